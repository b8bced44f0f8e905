//! What the store answers, and the plane's verdicts on it.

use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::{EndStatus, STATUS_STREAMING};
use thiserror::Error;

/// One column value as a store returns it (D1 returns JSON; SQLite returns typed values).
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnValue {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
}

impl ColumnValue {
    /// The value as a non-negative integer, if it is one (D1 hands integers back as JSON numbers).
    pub fn as_offset(&self) -> Option<Offset> {
        match *self {
            ColumnValue::Integer(n) => u64::try_from(n).ok().map(Offset),
            ColumnValue::Real(x) if x >= 0.0 && x.fract() == 0.0 && x <= crate::engine::wire::sse::MAX_OFFSET.0 as f64 => {
                Some(Offset(x as u64))
            }
            _ => None,
        }
    }

    /// The value as text, if it is text.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ColumnValue::Text(t) => Some(t),
            _ => None,
        }
    }

    /// SQL truthiness of a flag column (`1`/`true`); NULL and 0 are false.
    pub fn is_truthy(&self) -> bool {
        match self {
            ColumnValue::Integer(n) => *n != 0,
            ColumnValue::Real(x) => *x != 0.0,
            ColumnValue::Text(t) => matches!(t.as_str(), "1" | "true" | "t"),
            ColumnValue::Null => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            ColumnValue::Null => "NULL".into(),
            ColumnValue::Integer(n) => n.to_string(),
            ColumnValue::Real(x) => x.to_string(),
            ColumnValue::Text(t) => format!("the text {t:?}"),
        }
    }
}

/// The open probe's row: the message's length and status.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenProbe {
    pub seq: ColumnValue,
    pub status: Option<String>,
}

/// Why a stream may not open on a row. A settled statement about the app's data: never retried.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OpenRefused {
    #[error("no message row with this id: the app must insert the message row (with its chat id, role, …) before opening its stream")]
    MissingRow,
    #[error("the row's length column is NULL: it must be NOT NULL DEFAULT 0, because it is compare-and-swapped on every checkpoint and no comparison matches NULL")]
    NullSeq,
    #[error("the row's length column holds {found}, not an integer")]
    SeqNotAnInteger { found: String },
    #[error("the row already holds {seq} characters: a regeneration is a new message id, never a resume of an advanced row")]
    Advanced { seq: Offset },
    #[error("the row is already 'streaming': another producer holds this stream")]
    AlreadyStreaming,
    #[error("the row was already sealed ({status:?}): a regeneration is a new message id, never a reopen of a sealed row")]
    AlreadySealed { status: String },
    #[error("another producer won the open race (the row's host is {holder:?})")]
    LostRace { holder: Option<String> },
    #[error("this stream is already open here")]
    AlreadyOpenHere,
    #[error("the checkpoint sink refused the open: {reason}")]
    BySink { reason: String },
}

/// The open probe's verdict: the row must exist, have length 0, and be neither streaming nor
/// sealed (an empty response sealed, or one whose open never completed and was sealed
/// `interrupted` by the lease, is not reopened either).
pub fn judge_probe(probe: Option<&OpenProbe>) -> Result<(), OpenRefused> {
    let row = probe.ok_or(OpenRefused::MissingRow)?;
    match &row.seq {
        ColumnValue::Null => return Err(OpenRefused::NullSeq),
        v => match v.as_offset() {
            None => return Err(OpenRefused::SeqNotAnInteger { found: v.describe() }),
            Some(Offset::ZERO) => {}
            Some(seq) => return Err(OpenRefused::Advanced { seq }),
        },
    }
    if row.status.as_deref() == Some(STATUS_STREAMING) {
        return Err(OpenRefused::AlreadyStreaming);
    }
    if let Some(status) = row.status.as_deref().filter(|s| EndStatus::parse(s).is_some()) {
        return Err(OpenRefused::AlreadySealed { status: status.to_owned() });
    }
    Ok(())
}

/// The open CAS's verdict: whoever's token the host column holds won. A replayed open (its
/// first reply lost) reads back its own token and proceeds.
pub fn judge_host(own_token: &str, host: Option<&str>) -> Result<(), OpenRefused> {
    if host == Some(own_token) {
        Ok(())
    } else {
        Err(OpenRefused::LostRace { holder: host.map(str::to_owned) })
    }
}

/// The row as the post-checkpoint read-back sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowState {
    /// The stored length: the only thing that confirms a checkpoint.
    pub seq: Offset,
    /// The cancel flag, where mapped.
    pub cancel: bool,
}

/// A read-back that cannot confirm anything.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the read-back found no usable message row ({0})")]
pub struct UnusableRow(pub String);

impl RowState {
    /// Interprets a read-back row; `None` is a missing row.
    pub fn from_columns(seq: Option<&ColumnValue>, cancel: Option<&ColumnValue>) -> Result<Self, UnusableRow> {
        let seq = seq.ok_or_else(|| UnusableRow("the row is missing".into()))?;
        let seq = seq.as_offset().ok_or_else(|| UnusableRow(format!("its length is {}", seq.describe())))?;
        Ok(RowState { seq, cancel: cancel.is_some_and(ColumnValue::is_truthy) })
    }
}
