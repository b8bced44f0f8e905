//! The live buffer: the produced text from some floor offset to `seq`, addressable by UTF-16
//! offset without rescanning from the start.

use crate::engine::text::utf16::{self, Offset};
use crate::engine::wire::sse::json_string_body_len;

/// Keep a mark at least this often, so locating an offset scans at most about this many bytes.
const MARK_SPACING_BYTES: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Mark {
    unit: Offset,
    byte: usize,
}

/// Produced text retained from [`TextBuffer::floor`] up to [`TextBuffer::seq`].
#[derive(Debug, Clone)]
pub struct TextBuffer {
    text: String,
    /// UTF-16 offset of `text`'s first byte.
    floor: Offset,
    seq: Offset,
    /// Sorted `(unit, byte)` positions inside `text`, relative to its start; always holds (floor, 0).
    marks: Vec<Mark>,
    /// The bytes of the text pushed in all (those trimmed below the floor included) as a JSON
    /// string carries it to readers: what a replay of it takes.
    wire_bytes: usize,
}

impl Default for TextBuffer {
    fn default() -> Self {
        Self {
            text: String::new(),
            floor: Offset::ZERO,
            seq: Offset::ZERO,
            marks: vec![Mark { unit: Offset::ZERO, byte: 0 }],
            wire_bytes: 0,
        }
    }
}

impl TextBuffer {
    pub fn new() -> Self {
        Self::default()
    }

    /// The produced length.
    pub fn seq(&self) -> Offset {
        self.seq
    }

    /// The lowest offset still held.
    pub fn floor(&self) -> Offset {
        self.floor
    }

    /// Bytes held, for memory accounting.
    pub fn retained_bytes(&self) -> usize {
        self.text.len()
    }

    /// The bytes of all the text pushed (trimmed ones included) as a JSON string carries it to
    /// readers ([`json_string_body_len`]): the size of the text's replay.
    pub fn wire_bytes(&self) -> usize {
        self.wire_bytes
    }

    /// Appends `s`; returns the UTF-16 range it now covers.
    pub fn push(&mut self, s: &str) -> (Offset, Offset) {
        let from = self.seq;
        let mut last = *self.marks.last().expect("marks always hold the start");
        let mut unit = self.seq.0;
        let base = self.text.len();
        for (i, c) in s.char_indices() {
            if base + i - last.byte >= MARK_SPACING_BYTES {
                last = Mark { unit: Offset(unit), byte: base + i };
                self.marks.push(last);
            }
            unit += c.len_utf16() as u64;
        }
        self.text.push_str(s);
        self.wire_bytes += json_string_body_len(s.as_bytes());
        self.seq = Offset(unit);
        (from, self.seq)
    }

    /// Locates `offset` (clamped into `[floor, seq]`, moved down out of a surrogate pair).
    fn locate(&self, offset: Offset) -> utf16::Located {
        let offset = offset.clamp(self.floor, self.seq);
        let idx = self.marks.partition_point(|m| m.unit <= offset) - 1;
        let m = self.marks[idx];
        utf16::locate_from(&self.text, m.byte, m.unit, offset)
    }

    /// `offset` moved down to the start of the character it falls in (and up to the floor).
    pub fn char_floor(&self, offset: Offset) -> Offset {
        self.locate(offset).unit
    }

    /// The start of the line (of a `ui` stream's NDJSON text) holding `offset`; `None` when it
    /// may start below the floor, where the buffer no longer shows it.
    pub fn line_start(&self, offset: Offset) -> Option<Offset> {
        let at = self.locate(offset);
        match crate::engine::wire::ui::line_start_byte(&self.text, at.byte) {
            Some(start) => Some(at.unit - utf16::len(&self.text[start..at.byte])),
            None if self.floor == Offset::ZERO => Some(Offset::ZERO),
            None => None,
        }
    }

    /// The held text in `[from, to)`; both ends are clamped into the buffer and floored to a
    /// character start.
    pub fn slice(&self, from: Offset, to: Offset) -> &str {
        let a = self.locate(from);
        let b = self.locate(to.max(a.unit));
        &self.text[a.byte..b.byte]
    }

    /// The whole held text (from [`Self::floor`]).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The end of the longest slice starting at `from` that fits in `max_bytes` (and `to`),
    /// never splitting a character; at least one character when any text is there, so a single
    /// character wider than the cap still makes progress.
    pub fn capped_end(&self, from: Offset, to: Offset, max_bytes: usize) -> Offset {
        let whole = self.slice(from, to);
        let mut fitted = utf16::prefix_within_bytes(whole, max_bytes);
        if fitted.is_empty() {
            fitted = whole.chars().next().map_or("", |c| &whole[..c.len_utf8()]);
        }
        self.locate(from).unit + utf16::len(fitted)
    }

    /// The end of the last complete line in `[from, to)` (just after its `\n`); `None` when
    /// no line ends there.
    pub fn last_line_end(&self, from: Offset, to: Offset) -> Option<Offset> {
        let slice = self.slice(from, to);
        let end = slice.rfind('\n')? + 1;
        Some(self.locate(from).unit + utf16::len(&slice[..end]))
    }

    /// The end of the first complete line ending in `[from, to)`; `None` when none does.
    pub fn first_line_end(&self, from: Offset, to: Offset) -> Option<Offset> {
        let slice = self.slice(from, to);
        let end = slice.find('\n')? + 1;
        Some(self.locate(from).unit + utf16::len(&slice[..end]))
    }

    /// Drops everything below `offset` (floored to a character start).
    pub fn trim_below(&mut self, offset: Offset) {
        let at = self.locate(offset);
        if at.unit <= self.floor {
            return;
        }
        self.text.drain(..at.byte);
        self.floor = at.unit;
        self.marks.retain(|m| m.unit > at.unit);
        for m in &mut self.marks {
            m.byte -= at.byte;
        }
        self.marks.insert(0, Mark { unit: at.unit, byte: 0 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> String {
        let alphabet = ["a", "😀", "é", "👩‍💻", "日", "e\u{301}", "🇫🇷", "\n"];
        (0..n).map(|i| alphabet[(i * 7 + i / 3) % alphabet.len()]).collect()
    }

    #[test]
    fn slices_match_a_utf16_reference_across_marks() {
        let text = sample(6000);
        let mut buf = TextBuffer::new();
        for piece in text.split_inclusive(['a', '\n']) {
            buf.push(piece);
        }
        assert_eq!(buf.seq(), utf16::len(&text));
        for from in (0..buf.seq().0).step_by(97).map(Offset) {
            for to in [from, from + Offset(1), from + Offset(333), buf.seq()] {
                assert_eq!(buf.slice(from, to), utf16::slice(&text, from, to), "[{from},{to})");
            }
        }
    }

    #[test]
    fn trimming_keeps_offsets_absolute() {
        let text = sample(3000);
        let mut buf = TextBuffer::new();
        buf.push(&text);
        let cut = buf.char_floor(Offset(5001));
        buf.trim_below(Offset(5001));
        assert_eq!(buf.floor(), cut);
        assert_eq!(buf.slice(cut, buf.seq()), utf16::slice(&text, cut, Offset::MAX));
        assert_eq!(buf.slice(cut + Offset(10), cut + Offset(50)), utf16::slice(&text, cut + Offset(10), cut + Offset(50)));
        buf.push("tail😀");
        assert!(buf.as_str().ends_with("tail😀"));
    }

    #[test]
    fn capped_end_respects_the_byte_cap_and_always_progresses() {
        let mut buf = TextBuffer::new();
        buf.push("😀😀😀");
        assert_eq!(buf.capped_end(Offset(0), Offset(6), 9), Offset(4), "two 4-byte emoji fit in 9 bytes");
        assert_eq!(buf.capped_end(Offset(0), Offset(6), 1), Offset(2), "one character even when wider than the cap");
    }
}
