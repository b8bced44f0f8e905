//! Test support: the plane's statements executed on real databases, with faults that a test
//! injects on purpose. SQLite (bundled) runs the very SQL the Worker sends to D1; PostgreSQL
//! ([`pg`]) runs the Postgres dialect on a real server. A store whose failures can be chosen is
//! the one stand-in in the native suite.
#![allow(dead_code)]

pub mod driver;
pub mod pg;

use rindle_streams::engine::durable::{ColumnValue, Dialect, MappedSql, Shape, Statement, StorePlan, TableMapping, Value};
use rindle_streams::engine::live::lease::{HostColumn, LeaseRow};
use rindle_streams::engine::live::{StoreFailure, StoreReply};
use rindle_streams::engine::reading::{assemble_durable_text, ChunkRow, DurableText};
use rusqlite::{params_from_iter, Connection};
use std::collections::HashMap;

/// The example schema, exactly as the Worker's migrations create it (`migrations/*.sql`, or
/// `migrations/postgres/*.sql` for Postgres).
pub fn migration_sql() -> String {
    migrations_in(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
}

/// The `.sql` files of `dir`, in name order, as one script.
pub fn migrations_in(dir: &str) -> String {
    let mut files: Vec<_> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "sql")).collect();
    files.sort();
    files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect::<Vec<_>>().join("\n")
}

/// A fault to inject into one store operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Run it and answer truthfully.
    None,
    /// Fail before anything commits.
    FailBeforeCommit,
    /// Commit, then lose the reply (the caller sees a failure). On a read: the read fails.
    CommitThenLoseReply,
}

/// One row: column name to value.
pub type Row = HashMap<String, ColumnValue>;

/// A database the plan runs on. A backend supplies the transaction and the query; everything
/// the tests read back (the durable text, a column, the lease's row) is built on those, once.
pub trait Store {
    fn sql(&self) -> &MappedSql;

    /// Runs `writes`, then `read` if any, as one transaction; returns each write's change count
    /// and the read's rows.
    fn transact(&mut self, writes: &[Statement], read: Option<&Statement>) -> Result<(Vec<u64>, Vec<Row>), StoreFailure>;

    /// Runs one query outside any transaction; panics on an error (the tests' own reads).
    fn query(&self, statement: &Statement) -> Vec<Row>;

    /// Runs SQL text of the test's own (no parameters).
    fn exec(&self, sql: &str);

    /// What the app does before opening a stream: insert the message row.
    fn insert_message(&self, id: &str) {
        let p1 = self.sql().dialect().placeholder(1);
        let sql = format!("INSERT INTO messages (id, chat_id, role) VALUES ({p1}, 'chat-1', 'assistant') RETURNING id");
        assert_eq!(self.query(&Statement { sql, params: vec![Value::from(id)] }).len(), 1);
    }

    /// Empties both tables, for the next schedule.
    fn reset(&self) {
        self.exec("DELETE FROM message_chunks; DELETE FROM messages;");
    }

    /// Runs one plan with `fault` injected.
    fn run(&mut self, plan: &StorePlan, fault: Fault) -> Result<StoreReply, StoreFailure> {
        if fault == Fault::FailBeforeCommit {
            return Err(StoreFailure("injected: failed before commit".into()));
        }
        let reply = match plan {
            StorePlan::Batch(statements) => self.batch(statements).map(|_| StoreReply::Applied),
            StorePlan::Query(statement, shape) => read_first(*shape, self.query(statement)),
            StorePlan::BatchThenQuery(writes, statement, shape) => {
                self.transact(writes, Some(statement)).and_then(|(_, rows)| read_first(*shape, rows))
            }
        };
        match fault {
            Fault::CommitThenLoseReply => Err(StoreFailure("injected: committed, reply lost".into())),
            _ => reply,
        }
    }

    /// Runs statements as one transaction; returns each statement's change count.
    fn batch(&mut self, statements: &[Statement]) -> Result<Vec<u64>, StoreFailure> {
        self.transact(statements, None).map(|(changes, _)| changes)
    }

    /// The durable text of `id` as a reader would get it: body plus chunk rows.
    fn durable_text(&self, id: &str) -> String {
        let row = self.query(&self.sql().read_row(id)).into_iter().next();
        let body = match row.as_ref().and_then(|r| r.get("body")) {
            Some(ColumnValue::Text(b)) => b.clone(),
            _ => String::new(),
        };
        let chunks = self
            .query(&self.sql().read_chunks(id))
            .into_iter()
            .map(|r| {
                let seq = r["seq"].as_offset().unwrap();
                let ColumnValue::Text(text) = r["text"].clone() else { panic!("chunk text") };
                ChunkRow { seq, text }
            })
            .collect();
        assemble_durable_text(&body, chunks)
    }

    /// One column of the message row.
    fn message_column(&self, id: &str, column: &str) -> ColumnValue {
        let sql = format!("SELECT \"{column}\" AS v FROM messages WHERE id = {}", self.sql().dialect().placeholder(1));
        self.query(&Statement { sql, params: vec![Value::from(id)] })
            .into_iter()
            .next()
            .map(|r| r["v"].clone())
            .unwrap_or(ColumnValue::Null)
    }

    fn status(&self, id: &str) -> String {
        match self.message_column(id, "status") {
            ColumnValue::Text(s) => s,
            other => format!("{other:?}"),
        }
    }

    /// The row as the lease alarm reads it (what `read_durable` and the host read give the
    /// Worker): `host_mapped` says whether the mapping has a host column.
    fn lease_row(&self, id: &str, host_mapped: bool) -> LeaseRow {
        let exists = !self.query(&self.sql().read_row(id)).is_empty();
        let durable = exists.then(|| {
            let text = self.durable_text(id);
            DurableText { seq: rindle_streams::engine::utf16::len(&text), text, status: self.status(id), error: None }
        });
        let host = match (host_mapped, self.message_column(id, "host")) {
            (false, _) => HostColumn::Unmapped,
            (true, ColumnValue::Text(h)) => HostColumn::Holds(Some(h)),
            (true, _) => HostColumn::Holds(None),
        };
        LeaseRow { durable, host }
    }

    fn chunk_count(&self, id: &str) -> usize {
        self.query(&self.sql().read_chunks(id)).len()
    }
}

fn read_first(shape: Shape, rows: Vec<Row>) -> Result<StoreReply, StoreFailure> {
    let row = rows.into_iter().next();
    shape.read(row.as_ref().map(|r| move |name: &str| r.get(name).cloned()))
}

pub struct SqliteDb {
    pub conn: Connection,
    pub sql: MappedSql,
}

impl SqliteDb {
    /// An in-memory database with the example migrations applied.
    pub fn new() -> Self {
        Self::with_schema(&migration_sql(), TableMapping::example())
    }

    pub fn with_schema(schema: &str, mapping: TableMapping) -> Self {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(schema).unwrap();
        Self { conn, sql: MappedSql::new(mapping, Dialect::Sqlite) }
    }
}

impl Store for SqliteDb {
    fn sql(&self) -> &MappedSql {
        &self.sql
    }

    fn transact(&mut self, writes: &[Statement], read: Option<&Statement>) -> Result<(Vec<u64>, Vec<Row>), StoreFailure> {
        let tx = self.conn.transaction().map_err(fail)?;
        let mut changes = Vec::new();
        for s in writes {
            changes.push(tx.execute(&s.sql, params_from_iter(s.params.iter().map(bind))).map_err(fail)? as u64);
        }
        let rows = read.map(|r| rows_of(&tx, r)).transpose()?.unwrap_or_default();
        tx.commit().map_err(fail)?;
        Ok((changes, rows))
    }

    fn query(&self, statement: &Statement) -> Vec<Row> {
        rows_of(&self.conn, statement).unwrap()
    }

    fn exec(&self, sql: &str) {
        self.conn.execute_batch(sql).unwrap();
    }
}

/// Runs one query on `conn` (the database, or a transaction on it).
fn rows_of(conn: &Connection, statement: &Statement) -> Result<Vec<Row>, StoreFailure> {
    let mut stmt = conn.prepare(&statement.sql).map_err(fail)?;
    let names: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
    let rows = stmt
        .query_map(params_from_iter(statement.params.iter().map(bind)), |row| {
            names.iter().enumerate().map(|(i, name)| Ok((name.clone(), column(row.get_ref(i)?)))).collect::<Result<Row, _>>()
        })
        .map_err(fail)?;
    rows.collect::<Result<_, _>>().map_err(fail)
}

fn fail(e: rusqlite::Error) -> StoreFailure {
    StoreFailure(e.to_string())
}

fn bind(v: &Value) -> rusqlite::types::Value {
    match v {
        Value::Text(s) => rusqlite::types::Value::Text(s.clone()),
        Value::Int(n) => rusqlite::types::Value::Integer(*n),
        Value::Bool(b) => rusqlite::types::Value::Integer(i64::from(*b)),
        Value::Null => rusqlite::types::Value::Null,
    }
}

fn column(v: rusqlite::types::ValueRef<'_>) -> ColumnValue {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => ColumnValue::Null,
        ValueRef::Integer(n) => ColumnValue::Integer(n),
        ValueRef::Real(x) => ColumnValue::Real(x),
        ValueRef::Text(t) => ColumnValue::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(_) => ColumnValue::Text("<blob>".into()),
    }
}
