//! Test support: the plane's statements executed on real SQLite (bundled), with faults that
//! a test injects on purpose. This is the one stand-in in the native suite: a store whose
//! failures can be chosen, running the very SQL the Worker sends to D1.
#![allow(dead_code)]

pub mod driver;

use rindle_streams::engine::durable::{ColumnValue, Dialect, MappedSql, Shape, Statement, StorePlan, TableMapping, Value};
use rindle_streams::engine::live::lease::{HostColumn, LeaseRow};
use rindle_streams::engine::live::{StoreFailure, StoreReply};
use rindle_streams::engine::reading::{assemble_durable_text, ChunkRow, DurableText};
use rusqlite::{params_from_iter, Connection};
use std::collections::HashMap;

/// The example schema, exactly as the Worker's migrations create it.
pub fn migration_sql() -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations");
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
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

    /// What the app does before opening a stream: insert the message row.
    pub fn insert_message(&self, id: &str) {
        self.conn.execute("INSERT INTO messages (id, chat_id, role) VALUES (?1, 'chat-1', 'assistant')", [id]).unwrap();
    }

    pub fn exec(&self, sql: &str) {
        self.conn.execute_batch(sql).unwrap();
    }

    /// Runs one plan with `fault` injected.
    pub fn run(&mut self, plan: &StorePlan, fault: Fault) -> Result<StoreReply, StoreFailure> {
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
    pub fn batch(&mut self, statements: &[Statement]) -> Result<Vec<usize>, StoreFailure> {
        self.transact(statements, None).map(|(changes, _)| changes)
    }

    /// Runs `writes`, then `read` if any, as one transaction; returns each write's change count
    /// and the read's rows.
    pub fn transact(&mut self, writes: &[Statement], read: Option<&Statement>) -> Result<(Vec<usize>, Vec<Row>), StoreFailure> {
        let tx = self.conn.transaction().map_err(fail)?;
        let mut changes = Vec::new();
        for s in writes {
            changes.push(tx.execute(&s.sql, params_from_iter(s.params.iter().map(bind))).map_err(fail)?);
        }
        let rows = read.map(|r| rows_of(&tx, r)).transpose()?.unwrap_or_default();
        tx.commit().map_err(fail)?;
        Ok((changes, rows))
    }

    pub fn query(&self, statement: &Statement) -> Vec<Row> {
        rows_of(&self.conn, statement).unwrap()
    }

    /// The durable text of `id` as a reader would get it: body plus chunk rows.
    pub fn durable_text(&self, id: &str) -> String {
        let row = self.query(&self.sql.read_row(id)).into_iter().next();
        let body = match row.as_ref().and_then(|r| r.get("body")) {
            Some(ColumnValue::Text(b)) => b.clone(),
            _ => String::new(),
        };
        let chunks = self
            .query(&self.sql.read_chunks(id))
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
    pub fn message_column(&self, id: &str, column: &str) -> ColumnValue {
        let sql = format!("SELECT \"{column}\" AS v FROM messages WHERE id = ?1");
        self.query(&Statement { sql, params: vec![Value::from(id)] })
            .into_iter()
            .next()
            .map(|r| r["v"].clone())
            .unwrap_or(ColumnValue::Null)
    }

    pub fn status(&self, id: &str) -> String {
        match self.message_column(id, "status") {
            ColumnValue::Text(s) => s,
            other => format!("{other:?}"),
        }
    }

    /// The row as the lease alarm reads it (what `read_durable` and the host read give the
    /// Worker): `host_mapped` says whether the mapping has a host column.
    pub fn lease_row(&self, id: &str, host_mapped: bool) -> LeaseRow {
        let exists = !self.query(&self.sql.read_row(id)).is_empty();
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

    pub fn chunk_count(&self, id: &str) -> usize {
        self.query(&self.sql.read_chunks(id)).len()
    }
}

/// One row: column name to value.
pub type Row = HashMap<String, ColumnValue>;

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

fn read_first(shape: Shape, rows: Vec<Row>) -> Result<StoreReply, StoreFailure> {
    let row = rows.into_iter().next();
    shape.read(row.as_ref().map(|r| move |name: &str| r.get(name).cloned()))
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
