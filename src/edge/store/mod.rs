//! Where a stream's store operations go: the mapped tables ([`Tables`]) on D1 through the
//! [`D1`] executor, or the app's own [`CheckpointSink`]. A D1 batch is one transaction, and the
//! read in a checkpoint's own batch is the truth.

#[cfg(feature = "postgres")]
pub(crate) mod postgres;

use crate::engine::durable::{ColumnValue, Row, SqlExecutor, Statement, Tables, Value};
use crate::engine::host::store::{self, CheckpointSink, OpKind, StoreAnswer, StoreError, StoreFuture, StoreRequest};
use serde_json::Map;
use std::cell::Cell;
use std::rc::Rc;
use wasm_bindgen::JsValue;
use worker::D1Database;

/// A stream's store.
pub enum Store {
    /// The mapped tables: the open probe and CAS, a read-back where an answer failed.
    Tables(Tables),
    /// An embedding Worker's own sink.
    Sink(Rc<dyn CheckpointSink>),
}

impl Store {
    /// Performs one request of the live stream.
    pub async fn run(&self, stream_id: &str, request: StoreRequest) -> StoreAnswer {
        match self {
            Store::Tables(tables) => tables.run(stream_id, request).await,
            Store::Sink(sink) => store::run_on_sink(sink.as_ref(), stream_id, request).await,
        }
    }

    /// The rows carry the stream's format (a `/ui` of a finished stream reads it there).
    pub fn has_format_column(&self) -> bool {
        matches!(self, Store::Tables(tables) if tables.sql().has_format_column())
    }

    /// The store's terminal write, durable text and cancel flag (the tables are a sink too).
    pub fn sink(&self) -> &dyn CheckpointSink {
        match self {
            Store::Tables(tables) => tables,
            Store::Sink(sink) => sink.as_ref(),
        }
    }
}

/// The D1 traffic of one object, counted at the executor.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreCounters {
    /// Calls to D1 (a batch or a query): the round trips.
    pub rounds: u64,
    /// Every statement sent (reads and writes).
    pub statements: u64,
    /// Statements sent in write batches.
    pub write_statements: u64,
    /// Rows written, as D1 reports them (`meta.rows_written`: what D1 bills).
    pub rows_written: u64,
    /// Rows read, as D1 reports them (`meta.rows_read`: what D1 bills).
    pub rows_read: u64,
    /// Bytes bound to write statements (text as UTF-8, numbers as 8).
    pub bytes_bound: u64,
}

/// Runs SQL on a D1 database (the mapped tables' executor in the Worker).
pub struct D1 {
    db: D1Database,
    counters: Cell<StoreCounters>,
}

impl D1 {
    pub fn new(db: D1Database) -> Self {
        Self { db, counters: Cell::default() }
    }

    /// What this executor has sent so far (for `/stats`).
    pub fn counters(&self) -> StoreCounters {
        self.counters.get()
    }

    fn count(&self, f: impl FnOnce(&mut StoreCounters)) {
        let mut c = self.counters.get();
        f(&mut c);
        self.counters.set(c);
    }

    /// Adds the rows one statement read and wrote, as D1 reports them.
    fn count_rows(&self, meta: Option<&worker::D1ResultMeta>) {
        let (read, written) = meta.map_or((0, 0), |m| (m.rows_read.unwrap_or(0), m.rows_written.unwrap_or(0)));
        self.count(|c| {
            c.rows_read += read as u64;
            c.rows_written += written as u64;
        });
    }

    /// A statement D1 will run; a failure here is before D1 saw anything.
    fn prepare(&self, s: &Statement) -> Result<worker::D1PreparedStatement, StoreError> {
        let params: Vec<JsValue> = s.params.iter().map(bind).collect();
        self.db.prepare(&s.sql).bind(&params).map_err(not_committed)
    }

    /// Runs `writes`, then `read` if any, as ONE transaction (a D1 batch); returns each write's
    /// change count and the read's rows.
    async fn transact(&self, writes: &[Statement], read: Option<&Statement>) -> Result<(Vec<u64>, Vec<Row>), StoreError> {
        if writes.is_empty() && read.is_none() {
            return Ok((vec![], vec![]));
        }
        let prepared = writes.iter().chain(read).map(|s| self.prepare(s)).collect::<Result<Vec<_>, _>>()?;
        let bytes: usize = writes.iter().flat_map(|s| &s.params).map(Value::bound_bytes).sum();
        self.count(|c| {
            c.rounds += 1;
            c.statements += prepared.len() as u64;
            c.write_statements += writes.len() as u64;
            c.bytes_bound += bytes as u64;
        });
        // The request may have reached D1 and committed before its answer was lost.
        // The request may have reached D1 and committed before its answer was lost; an
        // overload (D1 turned the batch away unrun) is typed by the engine's rule.
        let results = self.db.batch(prepared).await.map_err(|e| StoreError::from_database(e.to_string(), true))?;
        // A statement that failed rolled its batch back.
        if let Some(e) = results.iter().find_map(|r| r.error()) {
            return Err(StoreError::from_database(e, false));
        }
        let mut changes = Vec::with_capacity(writes.len());
        for (i, r) in results.iter().enumerate() {
            let meta = r.meta().ok().flatten();
            self.count_rows(meta.as_ref());
            if i < writes.len() {
                changes.push(meta.and_then(|m| m.changes).unwrap_or(0) as u64);
            }
        }
        // The batch committed; a read that cannot be taken apart leaves the write's effect unknown.
        let committed = |e: String| if writes.is_empty() { StoreError::NotCommitted(e) } else { StoreError::MayHaveCommitted(e) };
        let rows = match (read, results.get(writes.len())) {
            (Some(_), Some(r)) => r.results::<Map<String, serde_json::Value>>().map_err(|e| committed(e.to_string()))?,
            (Some(_), None) => return Err(committed("D1 answered a batch without its read".into())),
            (None, _) => vec![],
        };
        Ok((changes, rows.into_iter().map(row).collect()))
    }
}

impl SqlExecutor for D1 {
    fn batch<'a>(&'a self, _op: OpKind, statements: &'a [Statement]) -> StoreFuture<'a, Vec<u64>> {
        Box::pin(async move { Ok(self.transact(statements, None).await?.0) })
    }

    fn query<'a>(&'a self, _op: OpKind, statement: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        Box::pin(async move {
            self.count(|c| {
                c.rounds += 1;
                c.statements += 1;
            });
            let result = self.prepare(statement)?.all().await.map_err(not_committed)?;
            if let Some(e) = result.error() {
                return Err(StoreError::from_database(e, false));
            }
            self.count_rows(result.meta().ok().flatten().as_ref());
            Ok(result.results::<Map<String, serde_json::Value>>().map_err(not_committed)?.into_iter().map(row).collect())
        })
    }

    fn batch_then_query<'a>(&'a self, _op: OpKind, writes: &'a [Statement], read: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        Box::pin(async move { Ok(self.transact(writes, Some(read)).await?.1) })
    }
}

/// D1 takes JavaScript values; every integer goes as a number (f64), which is exact for every
/// offset (they are bounded by 2^53) and sidesteps i32-only integer binding.
fn bind(v: &Value) -> JsValue {
    match v {
        Value::Text(s) => JsValue::from_str(s),
        Value::Int(n) => JsValue::from_f64(*n as f64),
        Value::Bool(b) => JsValue::from_bool(*b),
        Value::Null => JsValue::NULL,
    }
}

/// A row as D1 returns it (JSON), as the engine reads rows.
fn row(columns: Map<String, serde_json::Value>) -> Row {
    Row::new(columns.into_iter().map(|(name, value)| (name, column(value))).collect())
}

fn column(v: serde_json::Value) -> ColumnValue {
    match v {
        serde_json::Value::Null => ColumnValue::Null,
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => ColumnValue::Integer(i),
            None => ColumnValue::Real(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => ColumnValue::Text(s),
        serde_json::Value::Bool(b) => ColumnValue::Integer(i64::from(b)),
        other => ColumnValue::Text(other.to_string()),
    }
}

/// A failure before anything committed (or of a read): an overload, or a refusal.
fn not_committed(e: impl std::fmt::Display) -> StoreError {
    StoreError::from_database(e.to_string(), false)
}
