//! What a reader needs to turn durable rows and live frames into the produced text: the Rust
//! counterpart of `public/client.js`.
//!
//! Contract P makes this mechanical: durable text and live text are both prefixes of one
//! produced text, and two prefixes of one string merge by taking the longer.

use crate::engine::text::utf16::{self, Offset};
use thiserror::Error;

/// A chunk row as stored: `seq` is the offset its text ends at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRow {
    pub seq: Offset,
    pub text: String,
}

/// A message row's durable text, as `/text` answers it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DurableText {
    pub text: String,
    /// Its length in UTF-16 units.
    pub seq: Offset,
    /// The row's status column.
    pub status: String,
    /// The row's error column, where mapped and set (the `/ui` error ending carries it, and
    /// `/text` answers it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The row's format column, where mapped and set (`/text` answers the format on its own).
    #[serde(skip)]
    pub format: Option<crate::engine::wire::ui::Format>,
}

impl DurableText {
    /// Assembles body plus chunk rows (see [`assemble_durable_text`]).
    pub fn assemble(body: &str, chunks: Vec<ChunkRow>, status: String) -> Self {
        let text = assemble_durable_text(body, chunks);
        Self { seq: utf16::len(&text), text, status, error: None, format: None }
    }
}

/// The durable text of a row: its body followed by its chunk rows in `seq` order.
///
/// Only the contiguous prefix is returned: a chunk that starts past the assembled end (a gap)
/// stops assembly, and a chunk that overlaps contributes only its new tail, so the result is
/// always a prefix of the produced text even if the rows are not perfectly laid out.
pub fn assemble_durable_text(body: &str, mut chunks: Vec<ChunkRow>) -> String {
    chunks.sort_by_key(|c| c.seq);
    let mut text = body.to_owned();
    let mut end = utf16::len(body);
    for chunk in chunks {
        let from = chunk.seq.saturating_sub(utf16::len(&chunk.text));
        if from > end {
            break;
        }
        if chunk.seq > end {
            text.push_str(utf16::slice(&chunk.text, end - from, Offset::MAX));
            end = chunk.seq;
        }
    }
    text
}

/// Two texts that are not prefixes of one another cannot be spliced.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the two texts diverge at UTF-16 offset {at}; they are not prefixes of one text")]
pub struct Diverged {
    pub at: Offset,
}

/// Merges two prefixes of one text by taking the longer.
pub fn splice_stream_text(a: &str, b: &str) -> Result<String, Diverged> {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    if long.starts_with(short) {
        return Ok(long.to_owned());
    }
    let at = short.char_indices().zip(long.chars()).find(|((_, x), y)| x != y).map_or(short.len(), |((i, _), _)| i);
    Err(Diverged { at: utf16::len(&short[..at]) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: u64, text: &str) -> ChunkRow {
        ChunkRow { seq: Offset(seq), text: text.into() }
    }

    #[test]
    fn body_then_chunks_in_seq_order() {
        let chunks = vec![row(7, "😀b"), row(4, "a😀")];
        assert_eq!(assemble_durable_text("x", chunks), "xa😀😀b");
    }

    #[test]
    fn a_gap_stops_assembly_and_an_overlap_adds_only_its_tail() {
        assert_eq!(assemble_durable_text("ab", vec![row(5, "z"), row(3, "c")]), "abc");
        assert_eq!(assemble_durable_text("abc", vec![row(4, "cd")]), "abcd");
    }

    #[test]
    fn splice_takes_the_longer_prefix() {
        assert_eq!(splice_stream_text("ab", "ab😀").unwrap(), "ab😀");
        assert_eq!(splice_stream_text("ab😀", "").unwrap(), "ab😀");
        assert_eq!(splice_stream_text("ab😀", "ax"), Err(Diverged { at: Offset(1) }));
    }
}
