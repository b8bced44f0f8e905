//! The protocol coordinate: UTF-16 code units (JavaScript's `string.length`) measured over
//! Rust's UTF-8 strings.
//!
//! Every offset on the wire and in D1 is a UTF-16 offset; every string in this crate is UTF-8.
//! These functions are the only place the two meet, so nothing else does unit arithmetic.

/// The number of UTF-16 code units in `s`.
pub fn len(s: &str) -> u64 {
    // A UTF-8 lead byte starts one code unit; a 4-byte lead (>= 0xF0) starts a surrogate pair.
    s.as_bytes().iter().map(|&b| u64::from(b & 0xC0 != 0x80) + u64::from(b >= 0xF0)).sum()
}

/// The position of a UTF-16 `offset` inside `s`, counted from the string's start.
///
/// An offset inside a surrogate pair moves down to the pair's start; an offset past the end
/// clamps to the end. Returns the byte index and the UTF-16 offset actually used.
pub fn locate(s: &str, offset: u64) -> Located {
    locate_from(s, 0, 0, offset)
}

/// Like [`locate`], but starts scanning at a known `(byte, unit)` position of `s`, so callers
/// with an index of marks scan only the tail.
pub fn locate_from(s: &str, start_byte: usize, start_unit: u64, offset: u64) -> Located {
    let mut unit = start_unit;
    for (i, c) in s[start_byte..].char_indices() {
        let width = c.len_utf16() as u64;
        if unit + width > offset {
            return Located { byte: start_byte + i, unit };
        }
        unit += width;
    }
    Located { byte: s.len(), unit }
}

/// A position inside a string, in both coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    /// Byte index into the UTF-8 string (always a char boundary).
    pub byte: usize,
    /// The UTF-16 offset of that byte index.
    pub unit: u64,
}

/// The UTF-16 range `[from, to)` of `s`, each end moved down to a character start.
pub fn slice(s: &str, from: u64, to: u64) -> &str {
    let start = locate(s, from);
    let end = locate_from(s, start.byte, start.unit, to.max(start.unit));
    &s[start.byte..end.byte]
}

/// Moves `offset` down to the start of the character it falls in (the surrogate-pair rule).
pub fn floor(s: &str, offset: u64) -> u64 {
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

    fn js_len(s: &str) -> u64 {
        s.encode_utf16().count() as u64
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
        assert_eq!(floor(s, 1), 1);
        assert_eq!(floor(s, 2), 1, "offset 2 is between the two halves of 😀");
        assert_eq!(floor(s, 3), 3);
        assert_eq!(slice(s, 2, 4), "😀b");
    }

    #[test]
    fn offsets_past_the_end_clamp() {
        assert_eq!(locate("ab", 99), Located { byte: 2, unit: 2 });
        assert_eq!(slice("ab", 1, 99), "b");
        assert_eq!(slice("ab", 5, 1), "");
    }

    #[test]
    fn prefix_within_bytes_never_splits_a_character() {
        assert_eq!(prefix_within_bytes("a😀", 3), "a");
        assert_eq!(prefix_within_bytes("a😀", 5), "a😀");
        assert_eq!(prefix_within_bytes("éé", 3), "é");
    }
}
