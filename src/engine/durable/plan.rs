//! How each store operation of the live stream becomes statements, and how the rows that come
//! back become its reply. Every executor (D1 in the Worker, SQLite in the tests) goes through
//! here, so the mapping from protocol to SQL has one home.

use super::rows::{ColumnValue, OpenProbe, RowState};
use super::sql::{MappedSql, Statement};
use crate::engine::live::{SealWrite, StoreFailure, StoreOp, StoreReply};

/// What an executor must run for one operation.
#[derive(Debug, Clone, PartialEq)]
pub enum StorePlan {
    /// Run as ONE transaction; the reply is [`StoreReply::Applied`].
    Batch(Vec<Statement>),
    /// Run one query and read its first row as `shape`.
    Query(Statement, Shape),
    /// Run the writes, then the query, as ONE transaction: the query's first row, read as
    /// `shape`, is the reply. A checkpoint is confirmed in the round that writes it, where a
    /// separate read-back would take a second round.
    BatchThenQuery(Vec<Statement>, Statement, Shape),
}

/// How to read a query's first row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Probe,
    Host,
    State,
}

impl MappedSql {
    /// The statements for `op` on `stream_id`.
    pub fn plan(&self, stream_id: &str, op: &StoreOp) -> StorePlan {
        match op {
            StoreOp::ProbeOpen => StorePlan::Query(self.probe_open(stream_id), Shape::Probe),
            StoreOp::MarkStreaming { host_token, .. } => StorePlan::Batch(vec![self.mark_streaming(stream_id, host_token)]),
            StoreOp::ReadHost => match self.read_host(stream_id) {
                Some(q) => StorePlan::Query(q, Shape::Host),
                None => StorePlan::Batch(vec![]),
            },
            StoreOp::Append { from, to, text } => {
                StorePlan::BatchThenQuery(self.append(stream_id, *from, *to, text), self.read_state(stream_id), Shape::State)
            }
            StoreOp::ReadState => StorePlan::Query(self.read_state(stream_id), Shape::State),
            StoreOp::Seal(SealWrite { status, error, body, .. }) => StorePlan::Batch(match body {
                Some(body) => self.compact(stream_id, body, *status, error.as_deref()).into(),
                None => vec![self.seal_in_place(stream_id, *status, error.as_deref())],
            }),
        }
    }
}

impl Shape {
    /// Reads the first row (`None`: no row); the row is a lookup from column name to value.
    pub fn read<F: Fn(&str) -> Option<ColumnValue>>(self, row: Option<F>) -> Result<StoreReply, StoreFailure> {
        match self {
            Shape::Probe => Ok(StoreReply::Probe(row.map(|col| OpenProbe {
                seq: col("seq").unwrap_or(ColumnValue::Null),
                status: match col("status") {
                    Some(ColumnValue::Text(s)) => Some(s),
                    _ => None,
                },
            }))),
            Shape::Host => Ok(StoreReply::Host(row.and_then(|col| match col("host") {
                Some(ColumnValue::Text(s)) => Some(s),
                _ => None,
            }))),
            Shape::State => {
                let seq = row.as_ref().and_then(|col| col("seq"));
                let cancel = row.as_ref().and_then(|col| col("cancel"));
                RowState::from_columns(seq.as_ref(), cancel.as_ref()).map(StoreReply::State).map_err(|e| StoreFailure(e.to_string()))
            }
        }
    }
}
