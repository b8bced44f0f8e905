//! Where checkpoints go: the [`CheckpointSink`] trait, and its default, the app's mapped D1
//! tables. D1 runs the statements planned by the engine ([`MappedSql::plan`]); a batch is one
//! transaction, and the read-back after it is the truth.

#[cfg(feature = "test-faults")]
use super::faults::FaultPlan;
use crate::engine::durable::{ColumnValue, MappedSql, Shape, Statement, StorePlan, Value};
use crate::engine::live::{StoreFailure, StoreOp, StoreReply};
use crate::engine::reading::{ChunkRow, DurableText};
use futures::future::LocalBoxFuture;
use serde_json::Map;
use std::cell::Cell;
#[cfg(feature = "test-faults")]
use std::rc::Rc;
use wasm_bindgen::JsValue;
use worker::D1Database;

/// A checkpoint store. The default writes the mapped D1 tables; an embedding Worker may
/// install its own (the "commit" mode), which receives every operation of the stream.
pub trait CheckpointSink {
    /// Performs one store operation of the live stream.
    fn run<'a>(&'a self, stream_id: &'a str, op: &'a StoreOp) -> LocalBoxFuture<'a, Result<StoreReply, StoreFailure>>;

    /// The durable text of a stream, or `None` when it has no row.
    fn read_durable<'a>(&'a self, stream_id: &'a str) -> LocalBoxFuture<'a, Result<Option<DurableText>, StoreFailure>>;

    /// Sets the row's cancel flag; `false` when there is no such row.
    fn request_cancel<'a>(&'a self, stream_id: &'a str) -> LocalBoxFuture<'a, Result<bool, StoreFailure>>;

    /// What this sink has sent to its store so far, where it counts (for `/stats`).
    fn counters(&self) -> Option<StoreCounters> {
        None
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

/// The mapped D1 tables.
pub struct D1Tables {
    db: D1Database,
    sql: MappedSql,
    #[cfg(feature = "test-faults")]
    faults: Option<Rc<FaultPlan>>,
    counters: Cell<StoreCounters>,
}

impl D1Tables {
    pub fn new(db: D1Database, sql: MappedSql) -> Self {
        Self {
            db,
            sql,
            #[cfg(feature = "test-faults")]
            faults: None,
            counters: Cell::default(),
        }
    }

    /// The same tables, with `TEST_FAULTS`' faults injected (a test build).
    #[cfg(feature = "test-faults")]
    pub(super) fn with_faults(self, faults: Option<Rc<FaultPlan>>) -> Self {
        Self { faults, ..self }
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

    fn prepare(&self, s: &Statement) -> Result<worker::D1PreparedStatement, StoreFailure> {
        let params: Vec<JsValue> = s.params.iter().map(bind).collect();
        self.db.prepare(&s.sql).bind(&params).map_err(failure)
    }

    /// Runs statements as ONE transaction (a D1 batch); returns each one's change count.
    pub async fn batch(&self, statements: &[Statement]) -> Result<Vec<usize>, StoreFailure> {
        Ok(self.transact(statements, None).await?.0)
    }

    /// Runs `writes`, then `read` if any, as ONE transaction (a D1 batch); returns each
    /// write's change count and the read's rows.
    async fn transact(&self, writes: &[Statement], read: Option<&Statement>) -> Result<(Vec<usize>, Rows), StoreFailure> {
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
        let results = self.db.batch(prepared).await.map_err(failure)?;
        let mut changes = Vec::with_capacity(writes.len());
        for r in &results {
            if let Some(e) = r.error() {
                return Err(StoreFailure(e));
            }
        }
        for (i, r) in results.iter().enumerate() {
            let meta = r.meta().ok().flatten();
            self.count_rows(meta.as_ref());
            if i < writes.len() {
                changes.push(meta.and_then(|m| m.changes).unwrap_or(0));
            }
        }
        let rows = match (read, results.get(writes.len())) {
            (Some(_), Some(r)) => r.results::<Map<String, serde_json::Value>>().map_err(failure)?,
            (Some(_), None) => return Err(StoreFailure("D1 answered a batch without its read".into())),
            (None, _) => vec![],
        };
        Ok((changes, rows))
    }

    /// Runs one query; returns its rows as column maps.
    pub async fn query(&self, statement: &Statement) -> Result<Rows, StoreFailure> {
        self.count(|c| {
            c.rounds += 1;
            c.statements += 1;
        });
        let result = self.prepare(statement)?.all().await.map_err(failure)?;
        if let Some(e) = result.error() {
            return Err(StoreFailure(e));
        }
        self.count_rows(result.meta().ok().flatten().as_ref());
        result.results::<Map<String, serde_json::Value>>().map_err(failure)
    }

    async fn execute(&self, plan: &StorePlan) -> Result<StoreReply, StoreFailure> {
        match plan {
            StorePlan::Batch(statements) => self.batch(statements).await.map(|_| StoreReply::Applied),
            StorePlan::Query(statement, shape) => read_first(*shape, &self.query(statement).await?),
            StorePlan::BatchThenQuery(writes, statement, shape) => read_first(*shape, &self.transact(writes, Some(statement)).await?.1),
        }
    }
}

impl CheckpointSink for D1Tables {
    fn run<'a>(&'a self, stream_id: &'a str, op: &'a StoreOp) -> LocalBoxFuture<'a, Result<StoreReply, StoreFailure>> {
        Box::pin(async move {
            let plan = self.sql.plan(stream_id, op);
            #[cfg(feature = "test-faults")]
            if let Some(faults) = &self.faults {
                return faults.around(op, self.execute(&plan)).await;
            }
            self.execute(&plan).await
        })
    }

    fn read_durable<'a>(&'a self, stream_id: &'a str) -> LocalBoxFuture<'a, Result<Option<DurableText>, StoreFailure>> {
        Box::pin(async move {
            let rows = self.query(&self.sql.read_row(stream_id)).await?;
            let Some(row) = rows.first() else { return Ok(None) };
            let text_of = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).unwrap_or_default().to_owned();
            let body = text_of(row.get("body"));
            let status = text_of(row.get("status"));
            let chunks = self
                .query(&self.sql.read_chunks(stream_id))
                .await?
                .iter()
                .filter_map(|c| Some(ChunkRow { seq: column(c.get("seq")?).as_offset()?, text: text_of(c.get("text")) }))
                .collect();
            let error = row.get("error").and_then(|e| e.as_str()).map(str::to_owned);
            Ok(Some(DurableText { error, ..DurableText::assemble(&body, chunks, status) }))
        })
    }

    fn request_cancel<'a>(&'a self, stream_id: &'a str) -> LocalBoxFuture<'a, Result<bool, StoreFailure>> {
        Box::pin(async move {
            match self.sql.request_cancel(stream_id) {
                Some(statement) => Ok(self.batch(&[statement]).await?.first().copied().unwrap_or(0) > 0),
                // No cancel column: the live stream still learns of it; the row just cannot.
                None => Ok(!self.query(&self.sql.read_row(stream_id)).await?.is_empty()),
            }
        })
    }

    fn counters(&self) -> Option<StoreCounters> {
        Some(self.counters.get())
    }
}

/// Rows as D1 returns them: column maps.
type Rows = Vec<Map<String, serde_json::Value>>;

fn read_first(shape: Shape, rows: &Rows) -> Result<StoreReply, StoreFailure> {
    shape.read(rows.first().map(|r| move |name: &str| r.get(name).map(column)))
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

fn column(v: &serde_json::Value) -> ColumnValue {
    match v {
        serde_json::Value::Null => ColumnValue::Null,
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => ColumnValue::Integer(i),
            None => ColumnValue::Real(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => ColumnValue::Text(s.clone()),
        serde_json::Value::Bool(b) => ColumnValue::Integer(i64::from(*b)),
        other => ColumnValue::Text(other.to_string()),
    }
}

fn failure(e: impl std::fmt::Display) -> StoreFailure {
    StoreFailure(e.to_string())
}
