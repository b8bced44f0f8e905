//! How each store operation becomes statements, and how the rows that come back become its
//! typed reply. Every executor (D1 in the Worker, SQLite in the tests, Postgres next) runs
//! these plans through [`StorePlan::execute`], so the mapping from protocol to SQL has one home.

use super::rows::{ColumnValue, OpenProbe, RowState};
use super::sql::{MappedSql, Statement};
use super::tables::{lease_row_of_rows, Row, SqlExecutor};
use crate::engine::host::store::{
    Checkpoint, ClaimHost, MarkOutcome, MarkStreaming, OpKind, Operation, ProbeOpen, ReadHost, ReadLeaseRow, ReadState, RowSummary,
    SealResult, SealWrite, StoreError,
};
use crate::engine::live::lease::LeaseRow;

/// What an executor must run for one operation.
#[derive(Debug, Clone, PartialEq)]
pub enum StorePlan {
    /// Run as ONE transaction.
    Batch(Vec<Statement>),
    /// Run one query.
    Query(Statement),
    /// Run the writes, then the query, as ONE transaction: a checkpoint is confirmed in the
    /// round that writes it, where a separate read-back would take a second round.
    BatchThenQuery(Vec<Statement>, Statement),
}

/// What running a plan gave back: each write's count of changed rows, and the query's rows.
#[derive(Debug, Default)]
pub struct Executed {
    pub changes: Vec<u64>,
    pub rows: Vec<Row>,
}

impl StorePlan {
    /// Runs the plan on `exec` as `op`: the one place a plan becomes executor calls.
    pub async fn execute(&self, exec: &dyn SqlExecutor, op: OpKind) -> Result<Executed, StoreError> {
        Ok(match self {
            StorePlan::Batch(writes) => Executed { changes: exec.batch(op, writes).await?, rows: vec![] },
            StorePlan::Query(read) => Executed { changes: vec![], rows: exec.query(op, read).await? },
            StorePlan::BatchThenQuery(writes, read) => Executed { changes: vec![], rows: exec.batch_then_query(op, writes, read).await? },
        })
    }
}

/// An operation the mapped tables perform: its statements, and how its reply is read.
pub trait TablesOp: Operation {
    const KIND: OpKind;

    /// The statements for this operation on `stream_id`.
    fn plan(&self, sql: &MappedSql, stream_id: &str) -> StorePlan;

    /// The reply, from what the plan gave back.
    fn reply(&self, executed: Executed) -> Result<Self::Reply, StoreError>;
}

impl TablesOp for ProbeOpen {
    const KIND: OpKind = OpKind::ProbeOpen;

    fn plan(&self, sql: &MappedSql, stream_id: &str) -> StorePlan {
        StorePlan::Query(sql.probe_open(stream_id))
    }

    fn reply(&self, executed: Executed) -> Result<Option<OpenProbe>, StoreError> {
        Ok(executed
            .rows
            .first()
            .map(|row| OpenProbe { seq: row.get("seq").cloned().unwrap_or(ColumnValue::Null), status: text(row.get("status")) }))
    }
}

impl TablesOp for MarkStreaming {
    const KIND: OpKind = OpKind::MarkStreaming;

    fn plan(&self, sql: &MappedSql, stream_id: &str) -> StorePlan {
        StorePlan::Batch(vec![sql.mark_streaming(stream_id, &self.host_token, self.format)])
    }

    /// The mark ran; where a host column is mapped, [`ReadHost`] says whose the row is.
    fn reply(&self, _: Executed) -> Result<MarkOutcome, StoreError> {
        Ok(MarkOutcome::Marked)
    }
}

impl TablesOp for ReadHost {
    const KIND: OpKind = OpKind::ReadHost;

    /// Nothing to read without a host column (never asked then): no holder.
    fn plan(&self, sql: &MappedSql, stream_id: &str) -> StorePlan {
        sql.read_host(stream_id).map_or(StorePlan::Batch(vec![]), StorePlan::Query)
    }

    fn reply(&self, executed: Executed) -> Result<Option<String>, StoreError> {
        Ok(executed.rows.first().and_then(|row| text(row.get("host"))))
    }
}

impl TablesOp for Checkpoint {
    const KIND: OpKind = OpKind::Checkpoint;

    fn plan(&self, sql: &MappedSql, stream_id: &str) -> StorePlan {
        StorePlan::BatchThenQuery(
            sql.append(stream_id, self.from, self.to, &self.text, self.host_token.as_deref()),
            sql.read_state(stream_id),
        )
    }

    /// The row as the write's own transaction left it; a row that cannot be read after a write
    /// that ran may hold that write.
    fn reply(&self, executed: Executed) -> Result<RowState, StoreError> {
        row_state(&executed).map_err(|e| StoreError::MayHaveCommitted(e.to_string()))
    }
}

impl TablesOp for ReadState {
    const KIND: OpKind = OpKind::ReadState;

    fn plan(&self, sql: &MappedSql, stream_id: &str) -> StorePlan {
        StorePlan::Query(sql.read_state(stream_id))
    }

    fn reply(&self, executed: Executed) -> Result<RowState, StoreError> {
        row_state(&executed).map_err(|e| StoreError::NotCommitted(e.to_string()))
    }
}

impl TablesOp for ClaimHost {
    const KIND: OpKind = OpKind::ClaimHost;

    /// The claim, then the row read in the same transaction: the row's holder decides (a replay
    /// whose first reply was lost reads its own claim), and its text is what to rebuild from.
    /// Without a host column there is nothing to claim (never asked then): the row as it is.
    fn plan(&self, sql: &MappedSql, stream_id: &str) -> StorePlan {
        match sql.claim_host(stream_id, &self.old, &self.new) {
            Some(claim) => StorePlan::BatchThenQuery(vec![claim], sql.read_durable(stream_id)),
            None => StorePlan::Query(sql.read_durable(stream_id)),
        }
    }

    fn reply(&self, executed: Executed) -> Result<LeaseRow, StoreError> {
        Ok(lease_row_of_rows(&executed.rows))
    }
}

impl TablesOp for ReadLeaseRow {
    const KIND: OpKind = OpKind::ReadDurable;

    fn plan(&self, sql: &MappedSql, stream_id: &str) -> StorePlan {
        StorePlan::Query(sql.read_durable(stream_id))
    }

    fn reply(&self, executed: Executed) -> Result<LeaseRow, StoreError> {
        Ok(lease_row_of_rows(&executed.rows))
    }
}

impl TablesOp for SealWrite {
    const KIND: OpKind = OpKind::Seal;

    /// The guarded seal, then the row's summary in the same transaction: what the row holds
    /// says whether the seal applied.
    fn plan(&self, sql: &MappedSql, stream_id: &str) -> StorePlan {
        let seal = sql.seal(stream_id, self.body.as_deref(), self.status, self.error.as_deref(), &self.guard);
        StorePlan::BatchThenQuery(seal, sql.read_summary(stream_id))
    }

    /// Applied when the row holds this seal's status and length (a replay whose first attempt
    /// committed finds exactly that too). A row that cannot be read after the write may hold it.
    fn reply(&self, executed: Executed) -> Result<SealResult, StoreError> {
        let Some(row) = executed.rows.first() else { return Ok(SealResult::NotApplied(None)) };
        let seq = row.get("seq").and_then(ColumnValue::as_offset);
        let status = text(row.get("status"));
        let (Some(seq), Some(status)) = (seq, status) else {
            return Err(StoreError::MayHaveCommitted("the sealed row's status or length could not be read".into()));
        };
        // A compaction sets the row's length to the body's end; a seal in place leaves it.
        let sealed_seq = if self.body.is_some() { self.seq } else { self.guard.durable_seq };
        if status == self.status.as_str() && seq == sealed_seq {
            return Ok(SealResult::Applied);
        }
        Ok(SealResult::NotApplied(Some(RowSummary { status, seq, error: text(row.get("error")) })))
    }
}

/// A text column's value (`None`: absent, NULL or not text).
pub(super) fn text(value: Option<&ColumnValue>) -> Option<String> {
    match value {
        Some(ColumnValue::Text(s)) => Some(s.clone()),
        _ => None,
    }
}

fn row_state(executed: &Executed) -> Result<RowState, super::rows::UnusableRow> {
    let row = executed.rows.first();
    RowState::from_columns(row.and_then(|r| r.get("seq")), row.and_then(|r| r.get("cancel")))
}
