//! The Server-Sent Events encoding of frames, and the parsing of a subscribe request.

use crate::engine::host::time::Millis;
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::Frame;

/// Response headers of every SSE answer. `x-accel-buffering` opts out of proxy buffering,
/// without which a reader sees a paragraph at a time instead of tokens.
pub const SSE_HEADERS: [(&str, &str); 3] =
    [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache, no-transform"), ("x-accel-buffering", "no")];

/// The keep-alive comment; costs a few bytes and keeps intermediaries from reaping the socket.
pub const PING: &str = ": ping\n\n";

/// The first bytes of every SSE body: how soon a dropped `EventSource` should reconnect.
pub fn preamble(retry: Millis) -> String {
    format!("retry: {}\n\n", retry.0)
}

/// One SSE event for `frame`: an `id:` line for frames with a resume point, then one `data:` line.
pub fn encode(frame: &Frame) -> String {
    if let Frame::Chunk { from, seq, text } = frame {
        return encode_chunk(*from, *seq, text);
    }
    let json = serde_json::to_string(frame).expect("frames always serialize");
    match frame.resume_point() {
        Some(id) => format!("id: {id}\ndata: {json}\n\n"),
        None => format!("data: {json}\n\n"),
    }
}

/// A `chunk` frame, the one written per delta, encoded by hand: the same bytes as serde_json's
/// encoding of [`Frame::Chunk`] under `format!` (the tests hold the two together), in one
/// buffer sized up front. serde_json and `core::fmt` take dozens of small calls per frame, and
/// in the Worker most of the wasm still runs in V8's baseline tier, where every call sets up a
/// frame (docs/PERFORMANCE.md, "A floor in Rust").
///
/// A large text is measured first, so its buffer is allocated once at its exact size: grown by
/// doubling, a 4 MiB text of control characters (24 MiB once escaped) took a 32 MiB buffer and a
/// 16 MiB one beside it while it moved, and wasm memory never shrinks.
fn encode_chunk(from: Offset, seq: Offset, text: &str) -> String {
    let body = if text.len() > 64 << 10 { json_string_body_len(text.as_bytes()) } else { text.len() };
    let mut out = String::with_capacity(body + 80);
    out.push_str("id: ");
    push_u64(&mut out, seq.0);
    out.push_str("\ndata: {\"type\":\"chunk\",\"from\":");
    push_u64(&mut out, from.0);
    out.push_str(",\"seq\":");
    push_u64(&mut out, seq.0);
    out.push_str(",\"text\":\"");
    push_json_string_body(&mut out, text);
    out.push_str("\"}\n\n");
    out
}

fn push_u64(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default());
}

/// The length of `bytes` as `push_json_string_body` writes them (as text: every byte that is not
/// escaped is written as it is, so UTF-8 split anywhere counts the same).
pub fn json_string_body_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .map(|&b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

/// `s` escaped as the inside of a JSON string, as serde_json escapes it: `"`, `\\` and the
/// control characters below U+0020 (the short forms where JSON has them, else `\u00xx`).
fn push_json_string_body(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        // Every escaped byte is ASCII, so `start..i` and `i + 1..` fall on character boundaries.
        out.push_str(&s[start..i]);
        if short.is_empty() {
            out.push_str("\\u00");
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        } else {
            out.push_str(short);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
}

/// The largest offset accepted from a client: JavaScript's `Number.MAX_SAFE_INTEGER`. Anything
/// larger is not an offset any stream could reach.
pub const MAX_OFFSET: Offset = Offset((1 << 53) - 1);

/// The join offset of a subscribe request. `Last-Event-ID` (where the reconnecting
/// `EventSource` actually got to) wins over the URL's `from` (its original join point). A
/// missing, empty, negative, fractional, non-numeric or absurd value means 0.
pub fn join_offset(last_event_id: Option<&str>, from_query: Option<&str>) -> Offset {
    let raw = match last_event_id.map(str::trim) {
        Some(id) if !id.is_empty() => id,
        _ => from_query.unwrap_or("0").trim(),
    };
    match raw.parse::<u64>().map(Offset) {
        Ok(n) if n <= MAX_OFFSET && raw.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => Offset::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_escaped_length_is_the_length_written() {
        let texts = ["plain", "quote \" back \\ nl \n cr \r tab \t bs \u{8} ff \u{c}", "\u{1}\u{0}\u{1f}", "é😀日本", ""];
        for text in texts {
            let mut out = String::new();
            push_json_string_body(&mut out, text);
            assert_eq!(json_string_body_len(text.as_bytes()), out.len(), "{text:?}");
        }
        let big = "\u{1}".repeat(100_000);
        let frame = encode_chunk(Offset(0), Offset(100_000), &big);
        assert!(
            frame.capacity() <= frame.len() + 80,
            "allocated once at its size (the framing's slack), never doubled: {}",
            frame.capacity()
        );
    }
    use crate::engine::wire::frame::EndStatus;

    #[test]
    fn only_open_and_chunk_carry_an_id_line() {
        assert_eq!(
            encode(&Frame::Chunk { from: Offset(0), seq: Offset(2), text: "hi".into() }),
            "id: 2\ndata: {\"type\":\"chunk\",\"from\":0,\"seq\":2,\"text\":\"hi\"}\n\n"
        );
        assert_eq!(encode(&Frame::Durable { seq: Offset(2) }), "data: {\"type\":\"durable\",\"seq\":2}\n\n");
        let end = encode(&Frame::End { seq: Offset(2), status: EndStatus::Complete, error: None });
        assert!(!end.contains("id:"));
    }

    /// The hand-written chunk encoding is byte for byte serde_json's, for every ASCII byte and
    /// characters of every UTF-8 length, alone and in runs, and for offsets of every width.
    #[test]
    fn a_chunk_is_encoded_as_serde_json_would() {
        let via_serde = |from: Offset, seq: Offset, text: &str| {
            let frame = Frame::Chunk { from, seq, text: text.to_owned() };
            format!("id: {seq}\ndata: {}\n\n", serde_json::to_string(&frame).unwrap())
        };
        let mut texts: Vec<String> = (0u8..=0x7f).map(|b| char::from(b).to_string()).collect();
        texts.extend(
            ["", "plain words", "é", "€", "𝄞", "a\"b\\c\n\r\t\u{8}\u{c}\u{0}\u{1f}\u{7f}/<>&'", "\u{2028}\u{2029}\u{feff}"]
                .map(String::from),
        );
        texts.push((0u8..=0x7f).map(char::from).chain("é€𝄞".chars()).collect());
        for (i, text) in texts.iter().enumerate() {
            let widths = [(0, 0), (7, 19), (u64::from(u32::MAX), u64::MAX), (MAX_OFFSET.0 - 1, MAX_OFFSET.0)];
            for (from, seq) in widths.map(|(from, seq)| (Offset(from), Offset(seq))) {
                let frame = Frame::Chunk { from, seq, text: text.clone() };
                assert_eq!(encode(&frame), via_serde(from, seq, text), "text #{i} {text:?}, {from}..{seq}");
            }
        }
    }

    #[test]
    fn a_newline_in_text_stays_inside_one_data_line() {
        let e = encode(&Frame::Chunk { from: Offset(0), seq: Offset(3), text: "a\nb".into() });
        assert_eq!(e.matches('\n').count(), 3, "id line, data line, blank line: {e:?}");
    }

    #[test]
    fn last_event_id_wins_over_from() {
        assert_eq!(join_offset(Some("12"), Some("3")), Offset(12));
        assert_eq!(join_offset(None, Some("3")), Offset(3));
        assert_eq!(join_offset(Some(""), Some("3")), Offset(3), "an empty header is no header");
        assert_eq!(join_offset(Some("junk"), Some("3")), Offset(0), "a present but bad header means 0");
    }

    #[test]
    fn bad_offsets_mean_zero() {
        for bad in ["-1", "3.5", "NaN", "1e309", "+4", "0x10", "99999999999999999999", "9007199254740992", " "] {
            assert_eq!(join_offset(None, Some(bad)), Offset(0), "{bad:?}");
        }
        assert_eq!(join_offset(None, None), Offset(0));
        assert_eq!(join_offset(None, Some("9007199254740991")), MAX_OFFSET);
    }
}
