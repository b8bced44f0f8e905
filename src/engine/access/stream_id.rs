//! Stream ids: the Durable Object name, the message row key and part of every chunk id.

use thiserror::Error;

/// The longest stream id accepted.
pub const MAX_STREAM_ID_BYTES: usize = 128;

/// A stream id that is refused, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BadStreamId {
    #[error("the stream id is empty")]
    Empty,
    #[error("the stream id is longer than {MAX_STREAM_ID_BYTES} bytes")]
    TooLong,
    #[error("the stream id may contain only letters, digits and . _ : - (found {0:?})")]
    BadCharacter(char),
    #[error("the stream id may not contain '..' or start with '.'")]
    DotPath,
}

/// Checks a stream id: 1–128 of `[A-Za-z0-9._:-]`, no `..`, not starting with `.`. Anything
/// else (slashes, NUL, CR/LF, quotes, spaces, percent signs) never reaches a store or an object.
pub fn validate(id: &str) -> Result<(), BadStreamId> {
    if id.is_empty() {
        return Err(BadStreamId::Empty);
    }
    if id.len() > MAX_STREAM_ID_BYTES {
        return Err(BadStreamId::TooLong);
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))) {
        return Err(BadStreamId::BadCharacter(c));
    }
    if id.starts_with('.') || id.contains("..") {
        return Err(BadStreamId::DotPath);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_ids_pass() {
        for id in ["m1", "msg_01HZX3", "chat-9:turn.2", "a".repeat(128).as_str()] {
            assert_eq!(validate(id), Ok(()), "{id}");
        }
    }

    #[test]
    fn hostile_ids_are_refused() {
        for id in ["", "a/b", "..", "a..b", ".hidden", "a\0b", "a\r\nb", "x'; DROP TABLE messages;--", "a b", "%00", "é", &"a".repeat(129)]
        {
            assert!(validate(id).is_err(), "{id:?}");
        }
    }
}
