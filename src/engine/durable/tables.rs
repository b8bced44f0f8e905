//! The mapped tables as a store, over any SQL database: [`Tables`] performs each operation's
//! [`StorePlan`] through a small [`SqlExecutor`] (D1 in the Worker, SQLite in the tests; a
//! Postgres executor is one more implementation of it and nothing else).

use super::plan::{text, StorePlan, TablesOp};
use super::rows::{ColumnValue, RowState};
use super::sql::{MappedSql, Statement};
use crate::engine::host::store::{
    Checkpoint, CheckpointSink, MarkOutcome, MarkStreaming, OpKind, SealResult, SealWrite, StoreAnswer, StoreError, StoreFuture,
    StoreRequest,
};
use crate::engine::live::lease::{HostColumn, LeaseRow};
use crate::engine::text::reading::{ChunkRow, DurableText};
use std::rc::Rc;

/// One row of a query: column name to value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    columns: Vec<(String, ColumnValue)>,
}

impl Row {
    pub fn new(columns: Vec<(String, ColumnValue)>) -> Self {
        Self { columns }
    }

    /// The value of column `name` (as the statement aliases it), if the row has it.
    pub fn get(&self, name: &str) -> Option<&ColumnValue> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

/// `row["seq"]`: the value of a column the row must have (panics where [`Row::get`] is `None`).
impl std::ops::Index<&str> for Row {
    type Output = ColumnValue;

    fn index(&self, name: &str) -> &ColumnValue {
        self.get(name).unwrap_or_else(|| panic!("the row has no column {name:?}"))
    }
}

/// Runs SQL on one database. `op` names the store call each statement runs for (an executor may
/// log it; a test build's fault plan targets by it). Errors say whether a write may have
/// committed: [`StoreError::NotCommitted`] when the database never applied it (it failed before
/// reaching it, or rolled the transaction back), [`StoreError::MayHaveCommitted`] when the
/// outcome is unknown (the reply was lost, or did not come in time).
pub trait SqlExecutor {
    /// Runs `statements` as ONE transaction; each one's count of changed rows.
    fn batch<'a>(&'a self, op: OpKind, statements: &'a [Statement]) -> StoreFuture<'a, Vec<u64>>;

    /// Runs one query; its rows.
    fn query<'a>(&'a self, op: OpKind, statement: &'a Statement) -> StoreFuture<'a, Vec<Row>>;

    /// Runs `writes`, then `read`, as ONE transaction; the read's rows.
    fn batch_then_query<'a>(&'a self, op: OpKind, writes: &'a [Statement], read: &'a Statement) -> StoreFuture<'a, Vec<Row>>;
}

/// One answer of a chat as its feed checks it: its key, status column and durable length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatAnswer {
    pub id: String,
    pub status: String,
    pub seq: crate::engine::text::utf16::Offset,
}

/// The app's message table and the protocol's chunk table, on the database an executor runs:
/// the default store of a stream, and a [`CheckpointSink`] for a sink that wraps it.
#[derive(Clone)]
pub struct Tables {
    exec: Rc<dyn SqlExecutor>,
    sql: MappedSql,
}

impl Tables {
    pub fn new(exec: Rc<dyn SqlExecutor>, sql: MappedSql) -> Self {
        Self { exec, sql }
    }

    /// The statements this store runs.
    pub fn sql(&self) -> &MappedSql {
        &self.sql
    }

    /// Performs one operation on `stream_id`.
    pub async fn perform<Op: TablesOp>(&self, stream_id: &str, op: &Op) -> Result<Op::Reply, StoreError> {
        let plan: StorePlan = op.plan(&self.sql, stream_id);
        op.reply(plan.execute(self.exec.as_ref(), Op::KIND).await?)
    }

    /// Answers a request of a stream whose store these tables are.
    pub async fn run(&self, stream_id: &str, request: StoreRequest) -> StoreAnswer {
        match request {
            StoreRequest::ProbeOpen(r) => {
                let reply = self.perform(stream_id, r.op()).await;
                r.answer(reply)
            }
            StoreRequest::MarkStreaming(r) => {
                let reply = self.perform(stream_id, r.op()).await;
                r.answer(reply)
            }
            StoreRequest::ReadHost(r) => {
                let reply = self.perform(stream_id, r.op()).await;
                r.answer(reply)
            }
            StoreRequest::Checkpoint(r) => {
                let reply = self.perform(stream_id, r.op()).await;
                r.answer(reply)
            }
            StoreRequest::ReadState(r) => {
                let reply = self.perform(stream_id, r.op()).await;
                r.answer(reply)
            }
            StoreRequest::Seal(r) => {
                let reply = self.perform(stream_id, r.op()).await;
                r.answer(reply)
            }
            StoreRequest::ReadLeaseRow(r) => {
                let reply = self.perform(stream_id, r.op()).await;
                r.answer(reply)
            }
            StoreRequest::ClaimHost(r) => {
                let reply = self.perform(stream_id, r.op()).await;
                r.answer(reply)
            }
        }
    }

    /// The durable text of a stream (body plus chunk rows), or `None` when it has no row: one
    /// statement, one snapshot (see [`MappedSql::read_durable`]).
    pub async fn read_durable(&self, stream_id: &str) -> Result<Option<DurableText>, StoreError> {
        let rows = self.exec.query(OpKind::ReadDurable, &self.sql.read_durable(stream_id)).await?;
        Ok(durable_of_rows(&rows))
    }

    /// The key of the answer of chat `chat_id` that is streaming, if any; `None` too when no
    /// chat column is mapped.
    pub async fn streaming_in_chat(&self, chat_id: &str) -> Result<Option<String>, StoreError> {
        self.read_text(self.sql.streaming_in_chat(chat_id), "id").await
    }

    /// The chat of the answer `stream_id`, if it has a row and a chat; `None` too when no chat
    /// column is mapped.
    pub async fn chat_of(&self, stream_id: &str) -> Result<Option<String>, StoreError> {
        self.read_text(self.sql.chat_of(stream_id), "chat").await
    }

    /// A chat's answers `streaming`, and the rows of `open` that exist, for its feed
    /// ([`MappedSql::chat_answers`]); `None` when no chat column is mapped.
    pub async fn chat_answers(&self, chat_id: &str, open: &[String]) -> Result<Option<Vec<ChatAnswer>>, StoreError> {
        let Some(statement) = self.sql.chat_answers(chat_id, open) else { return Ok(None) };
        let rows = self.exec.query(OpKind::ReadChat, &statement).await?;
        Ok(Some(
            rows.iter()
                .filter_map(|row| {
                    Some(ChatAnswer {
                        id: text(row.get("id"))?,
                        status: text(row.get("status")).unwrap_or_default(),
                        seq: row.get("seq").and_then(ColumnValue::as_offset).unwrap_or_default(),
                    })
                })
                .collect(),
        ))
    }

    /// A chat read: the text in `column` of the first row `statement` gives.
    async fn read_text(&self, statement: Option<Statement>, column: &str) -> Result<Option<String>, StoreError> {
        let Some(statement) = statement else { return Ok(None) };
        let rows = self.exec.query(OpKind::ReadChat, &statement).await?;
        Ok(rows.first().and_then(|row| text(row.get(column))))
    }

    /// Sets the row's cancel flag; `false` when there is no such row.
    pub async fn request_cancel(&self, stream_id: &str) -> Result<bool, StoreError> {
        match self.sql.request_cancel(stream_id) {
            Some(statement) => Ok(self.exec.batch(OpKind::RequestCancel, &[statement]).await?.first().copied().unwrap_or(0) > 0),
            // No cancel column: the live stream still learns of it; the row just cannot.
            None => Ok(!self.exec.query(OpKind::RequestCancel, &self.sql.read_row(stream_id)).await?.is_empty()),
        }
    }
}

/// The tables as a sink: the mark is the open (no probe, no host read), a checkpoint answers
/// the row as its own transaction left it.
impl CheckpointSink for Tables {
    fn open<'a>(&'a self, stream_id: &'a str, open: &'a MarkStreaming) -> StoreFuture<'a, MarkOutcome> {
        Box::pin(self.perform(stream_id, open))
    }

    fn checkpoint<'a>(&'a self, stream_id: &'a str, slice: &'a Checkpoint) -> StoreFuture<'a, RowState> {
        Box::pin(self.perform(stream_id, slice))
    }

    /// The guarded seal; a seal whose guard did not hold is an error here (a sink's `Ok` says
    /// the seal is written).
    fn seal<'a>(&'a self, stream_id: &'a str, write: &'a SealWrite) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            match self.perform(stream_id, write).await? {
                SealResult::Applied => Ok(()),
                SealResult::NotApplied(row) => Err(StoreError::NotCommitted(format!("the seal's guard did not hold: the row is {row:?}"))),
            }
        })
    }

    fn read_durable<'a>(&'a self, stream_id: &'a str) -> StoreFuture<'a, Option<DurableText>> {
        Box::pin(Tables::read_durable(self, stream_id))
    }

    fn request_cancel<'a>(&'a self, stream_id: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(Tables::request_cancel(self, stream_id))
    }
}

/// Assembles the rows of [`MappedSql::read_durable`]: the row (`part` 0) and its chunks.
pub fn durable_of_rows(rows: &[Row]) -> Option<DurableText> {
    let is_row = |r: &&Row| r.get("part").and_then(ColumnValue::as_offset) == Some(crate::engine::text::utf16::Offset::ZERO);
    let row = rows.iter().find(is_row)?;
    let chunks = rows
        .iter()
        .filter(|r| !is_row(r))
        .filter_map(|c| Some(ChunkRow { seq: c.get("seq")?.as_offset()?, text: text(c.get("text")).unwrap_or_default() }))
        .collect();
    let body = text(row.get("text")).unwrap_or_default();
    let status = text(row.get("status")).unwrap_or_default();
    let format = text(row.get("format")).as_deref().and_then(crate::engine::wire::ui::Format::parse);
    Some(DurableText { error: text(row.get("error")), format, ..DurableText::assemble(&body, chunks, status) })
}

/// The row as a revival reads it, from the rows of [`MappedSql::read_durable`]: the durable text,
/// the holder where the statement read a host column (a row read without one has no host to
/// compare), and the cancel flag where it read one.
pub fn lease_row_of_rows(rows: &[Row]) -> LeaseRow {
    let is_row = |r: &&Row| r.get("part").and_then(ColumnValue::as_offset) == Some(crate::engine::text::utf16::Offset::ZERO);
    let row = rows.iter().find(is_row);
    let host = match row.and_then(|row| row.get("host")) {
        Some(holder) => HostColumn::Holds(text(Some(holder))),
        None => HostColumn::Unmapped,
    };
    let cancel = row.and_then(|row| row.get("cancel")).is_some_and(ColumnValue::is_truthy);
    LeaseRow { durable: durable_of_rows(rows), host, cancel }
}
