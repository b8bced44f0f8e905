//! The protocol coordinate: UTF-16 code units (JavaScript's `string.length`) measured over
//! Rust's UTF-8 strings.
//!
//! Every offset on the wire and in D1 is a UTF-16 offset ([`Offset`]); every string in this
//! crate is UTF-8. These functions are the only place the two meet, so nothing else does unit
//! arithmetic.

use serde::{Deserialize, Serialize};
use std::ops::{Add, AddAssign, Sub};

/// A position in a stream's text, in UTF-16 code units (JavaScript's `string.length`): every
/// `seq`, `from` and `durableSeq` on the wire, in the store and in the engine. Also a text's
/// length, which is the offset of its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Offset(pub u64);

impl Offset {
    pub const ZERO: Offset = Offset(0);
    /// Past the end of any text: "to the end" for [`slice()`].
    pub const MAX: Offset = Offset(u64::MAX);

    pub fn saturating_sub(self, other: Offset) -> Offset {
        Offset(self.0.saturating_sub(other.0))
    }
}

impl Add for Offset {
    type Output = Offset;
    fn add(self, other: Offset) -> Offset {
        Offset(self.0 + other.0)
    }
}

impl AddAssign for Offset {
    fn add_assign(&mut self, other: Offset) {
        self.0 += other.0;
    }
}

/// The distance between two offsets (`self` at or after `other`).
impl Sub for Offset {
    type Output = Offset;
    fn sub(self, other: Offset) -> Offset {
        Offset(self.0 - other.0)
    }
}

impl std::fmt::Display for Offset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// An offset in a JSON answer or log line is its number.
impl From<Offset> for serde_json::Value {
    fn from(offset: Offset) -> Self {
        offset.0.into()
    }
}

/// The number of UTF-16 code units in `s`.
pub fn len(s: &str) -> Offset {
    // A UTF-8 lead byte starts one code unit; a 4-byte lead (>= 0xF0) starts a surrogate pair.
    Offset(s.as_bytes().iter().map(|&b| u64::from(b & 0xC0 != 0x80) + u64::from(b >= 0xF0)).sum())
}

/// The position of a UTF-16 `offset` inside `s`, counted from the string's start.
///
/// An offset inside a surrogate pair moves down to the pair's start; an offset past the end
/// clamps to the end. Returns the byte index and the UTF-16 offset actually used.
pub fn locate(s: &str, offset: Offset) -> Located {
    locate_from(s, 0, Offset::ZERO, offset)
}

/// Like [`locate`], but starts scanning at a known `(byte, unit)` position of `s`, so callers
/// with an index of marks scan only the tail.
pub fn locate_from(s: &str, start_byte: usize, start_unit: Offset, offset: Offset) -> Located {
    let mut unit = start_unit.0;
    for (i, c) in s[start_byte..].char_indices() {
        let width = c.len_utf16() as u64;
        if unit + width > offset.0 {
            return Located { byte: start_byte + i, unit: Offset(unit) };
        }
        unit += width;
    }
    Located { byte: s.len(), unit: Offset(unit) }
}

/// A position inside a string, in both coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    /// Byte index into the UTF-8 string (always a char boundary).
    pub byte: usize,
    /// The UTF-16 offset of that byte index.
    pub unit: Offset,
}

/// The UTF-16 range `[from, to)` of `s`, each end moved down to a character start.
pub fn slice(s: &str, from: Offset, to: Offset) -> &str {
    let start = locate(s, from);
    let end = locate_from(s, start.byte, start.unit, to.max(start.unit));
    &s[start.byte..end.byte]
}

/// Moves `offset` down to the start of the character it falls in (the surrogate-pair rule).
pub fn floor(s: &str, offset: Offset) -> Offset {
    locate(s, offset).unit
}

/// The longest prefix of `s` that fits in `max_bytes` bytes without splitting a character.
pub fn prefix_within_bytes(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn js_len(s: &str) -> Offset {
        Offset(s.encode_utf16().count() as u64)
    }

    #[test]
    fn len_counts_utf16_units() {
        for s in ["", "abc", "é", "e\u{301}", "😀", "👩‍💻", "🇫🇷", "日本語", "a😀b👍🏽c"] {
            assert_eq!(len(s), js_len(s), "{s:?}");
        }
    }

    #[test]
    fn from_inside_a_surrogate_pair_moves_to_the_pairs_start() {
        let s = "a😀b";
        assert_eq!(floor(s, Offset(1)), Offset(1));
        assert_eq!(floor(s, Offset(2)), Offset(1), "offset 2 is between the two halves of 😀");
        assert_eq!(floor(s, Offset(3)), Offset(3));
        assert_eq!(slice(s, Offset(2), Offset(4)), "😀b");
    }

    #[test]
    fn offsets_past_the_end_clamp() {
        assert_eq!(locate("ab", Offset(99)), Located { byte: 2, unit: Offset(2) });
        assert_eq!(slice("ab", Offset(1), Offset(99)), "b");
        assert_eq!(slice("ab", Offset(5), Offset(1)), "");
    }

    #[test]
    fn prefix_within_bytes_never_splits_a_character() {
        assert_eq!(prefix_within_bytes("a😀", 3), "a");
        assert_eq!(prefix_within_bytes("a😀", 5), "a😀");
        assert_eq!(prefix_within_bytes("éé", 3), "é");
    }
}
