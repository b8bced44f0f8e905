//! The six frames of the wire (SPEC §3) and the statuses they carry.

use crate::engine::text::utf16::Offset;
use serde::{Deserialize, Serialize};

/// How a stream ended. Also the terminal values of the message row's status column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndStatus {
    Complete,
    Cancelled,
    Error,
    Interrupted,
}

impl EndStatus {
    /// Every terminal status, the ones a seal writes.
    pub const ALL: [EndStatus; 4] = [EndStatus::Complete, EndStatus::Cancelled, EndStatus::Error, EndStatus::Interrupted];

    pub fn as_str(self) -> &'static str {
        match self {
            EndStatus::Complete => "complete",
            EndStatus::Cancelled => "cancelled",
            EndStatus::Error => "error",
            EndStatus::Interrupted => "interrupted",
        }
    }

    /// A status column's value, if it is terminal (`streaming`, `pending`, … are not).
    pub fn parse(column: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == column)
    }
}

/// The status column's value while a producer holds the row.
pub const STATUS_STREAMING: &str = "streaming";

/// One frame of a subscription; serialized as one JSON object with a `type` field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", rename_all_fields = "camelCase")]
pub enum Frame {
    /// First frame of every live subscription; `from` is the offset actually used.
    Open { stream_id: String, from: Offset, seq: Offset, durable_seq: Offset, ended: bool },
    /// Produced text covering `[from, seq)`.
    Chunk { from: Offset, seq: Offset, text: String },
    /// Everything below `seq` is committed.
    Durable { seq: Offset },
    /// Sealed; `seq` is the durable length.
    End {
        seq: Offset,
        status: EndStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The live buffer no longer holds what the reader needs; rejoin from the durable text.
    Stale { floor_seq: Offset, durable_seq: Offset },
    /// No live stream here; read the durable text.
    Absent,
}

impl Frame {
    /// The offset a reconnecting reader resumes from after this frame (its SSE `id:`), if any.
    pub fn resume_point(&self) -> Option<Offset> {
        match self {
            Frame::Open { from, .. } => Some(*from),
            Frame::Chunk { seq, .. } => Some(*seq),
            _ => None,
        }
    }

    /// True for the frames after which a subscription carries nothing more.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Frame::End { .. } | Frame::Stale { .. } | Frame::Absent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames_serialize_with_the_specs_field_names() {
        let cases = [
            (
                Frame::Open { stream_id: "m1".into(), from: Offset(2), seq: Offset(5), durable_seq: Offset(1), ended: false },
                json!({"type":"open","streamId":"m1","from":2,"seq":5,"durableSeq":1,"ended":false}),
            ),
            (Frame::Chunk { from: Offset(0), seq: Offset(2), text: "😀".into() }, json!({"type":"chunk","from":0,"seq":2,"text":"😀"})),
            (Frame::Durable { seq: Offset(7) }, json!({"type":"durable","seq":7})),
            (Frame::End { seq: Offset(9), status: EndStatus::Complete, error: None }, json!({"type":"end","seq":9,"status":"complete"})),
            (
                Frame::End { seq: Offset(9), status: EndStatus::Error, error: Some("boom".into()) },
                json!({"type":"end","seq":9,"status":"error","error":"boom"}),
            ),
            (Frame::Stale { floor_seq: Offset(3), durable_seq: Offset(4) }, json!({"type":"stale","floorSeq":3,"durableSeq":4})),
            (Frame::Absent, json!({"type":"absent"})),
        ];
        for (frame, expected) in cases {
            let value = serde_json::to_value(&frame).unwrap();
            assert_eq!(value, expected);
            assert_eq!(serde_json::from_value::<Frame>(value).unwrap(), frame);
        }
    }

    #[test]
    fn only_terminal_status_columns_parse() {
        for s in [EndStatus::Complete, EndStatus::Cancelled, EndStatus::Error, EndStatus::Interrupted] {
            assert_eq!(EndStatus::parse(s.as_str()), Some(s));
        }
        for other in [STATUS_STREAMING, "pending", "", "Complete"] {
            assert_eq!(EndStatus::parse(other), None, "{other:?}");
        }
    }

    #[test]
    fn only_open_and_chunk_have_a_resume_point() {
        let open = Frame::Open { stream_id: "s".into(), from: Offset(3), seq: Offset(9), durable_seq: Offset(0), ended: false };
        assert_eq!(open.resume_point(), Some(Offset(3)));
        assert_eq!(Frame::Chunk { from: Offset(3), seq: Offset(9), text: "abcdef".into() }.resume_point(), Some(Offset(9)));
        assert_eq!(Frame::Durable { seq: Offset(9) }.resume_point(), None);
        assert_eq!(Frame::Absent.resume_point(), None);
    }
}
