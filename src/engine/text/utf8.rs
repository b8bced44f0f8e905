//! Reassembling UTF-8 text from a byte stream whose pieces may split a character.

use thiserror::Error;

/// The body was not valid UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the request body is not valid UTF-8 (at byte {offset})")]
pub struct BadUtf8 {
    /// Byte offset of the first invalid byte, counted over the whole body.
    pub offset: u64,
}

/// Decodes pieces of a streaming body, carrying an incomplete trailing sequence over to the
/// next piece so that a character split across pieces arrives whole.
#[derive(Debug, Default)]
pub struct Utf8Reassembler {
    carry: Vec<u8>,
    consumed: u64,
}

impl Utf8Reassembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one piece; returns the text that is complete so far (possibly empty).
    pub fn feed(&mut self, piece: &[u8]) -> Result<String, BadUtf8> {
        let mut bytes = std::mem::take(&mut self.carry);
        bytes.extend_from_slice(piece);
        match std::str::from_utf8(&bytes) {
            Ok(text) => {
                self.consumed += bytes.len() as u64;
                Ok(text.to_owned())
            }
            Err(e) if e.error_len().is_none() => {
                // The tail is an incomplete (not invalid) sequence: keep it for the next piece.
                let valid = e.valid_up_to();
                self.carry = bytes.split_off(valid);
                self.consumed += valid as u64;
                // SAFETY of the unwrap: from_utf8 just vouched for bytes[..valid].
                Ok(String::from_utf8(bytes).expect("prefix validated by from_utf8"))
            }
            Err(e) => Err(BadUtf8 { offset: self.consumed + e.valid_up_to() as u64 }),
        }
    }

    /// Ends the body: a dangling partial character is an error.
    pub fn finish(self) -> Result<(), BadUtf8> {
        if self.carry.is_empty() {
            Ok(())
        } else {
            Err(BadUtf8 { offset: self.consumed })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_across_pieces_arrives_whole() {
        let bytes = "a😀é".as_bytes();
        let mut r = Utf8Reassembler::new();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&r.feed(&[*b]).unwrap());
        }
        r.finish().unwrap();
        assert_eq!(out, "a😀é");
    }

    #[test]
    fn invalid_bytes_are_refused_with_their_offset() {
        let mut r = Utf8Reassembler::new();
        assert_eq!(r.feed(b"ab").unwrap(), "ab");
        assert_eq!(r.feed(b"c\xFFd"), Err(BadUtf8 { offset: 3 }));
    }

    #[test]
    fn a_dangling_partial_character_at_the_end_is_refused() {
        let mut r = Utf8Reassembler::new();
        assert_eq!(r.feed(&"😀".as_bytes()[..2]).unwrap(), "");
        assert!(r.finish().is_err());
    }
}
