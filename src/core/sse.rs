//! The Server-Sent Events encoding of frames, and the parsing of a subscribe request.

use super::frame::Frame;

/// Response headers of every SSE answer. `x-accel-buffering` opts out of proxy buffering,
/// without which a reader sees a paragraph at a time instead of tokens.
pub const SSE_HEADERS: [(&str, &str); 3] =
    [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache, no-transform"), ("x-accel-buffering", "no")];

/// The keep-alive comment; costs a few bytes and keeps intermediaries from reaping the socket.
pub const PING: &str = ": ping\n\n";

/// The first bytes of every SSE body: how soon a dropped `EventSource` should reconnect.
pub fn preamble(retry_ms: u64) -> String {
    format!("retry: {retry_ms}\n\n")
}

/// One SSE event for `frame`: an `id:` line for frames with a resume point, then one `data:` line.
pub fn encode(frame: &Frame) -> String {
    let json = serde_json::to_string(frame).expect("frames always serialize");
    match frame.resume_point() {
        Some(id) => format!("id: {id}\ndata: {json}\n\n"),
        None => format!("data: {json}\n\n"),
    }
}

/// The largest offset accepted from a client: JavaScript's `Number.MAX_SAFE_INTEGER`. Anything
/// larger is not an offset any stream could reach.
pub const MAX_OFFSET: u64 = (1 << 53) - 1;

/// The join offset of a subscribe request. `Last-Event-ID` (where the reconnecting
/// `EventSource` actually got to) wins over the URL's `from` (its original join point). A
/// missing, empty, negative, fractional, non-numeric or absurd value means 0.
pub fn join_offset(last_event_id: Option<&str>, from_query: Option<&str>) -> u64 {
    let raw = match last_event_id.map(str::trim) {
        Some(id) if !id.is_empty() => id,
        _ => from_query.unwrap_or("0").trim(),
    };
    match raw.parse::<u64>() {
        Ok(n) if n <= MAX_OFFSET && raw.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::frame::EndStatus;

    #[test]
    fn only_open_and_chunk_carry_an_id_line() {
        assert_eq!(
            encode(&Frame::Chunk { from: 0, seq: 2, text: "hi".into() }),
            "id: 2\ndata: {\"type\":\"chunk\",\"from\":0,\"seq\":2,\"text\":\"hi\"}\n\n"
        );
        assert_eq!(encode(&Frame::Durable { seq: 2 }), "data: {\"type\":\"durable\",\"seq\":2}\n\n");
        let end = encode(&Frame::End { seq: 2, status: EndStatus::Complete, error: None });
        assert!(!end.contains("id:"));
    }

    #[test]
    fn a_newline_in_text_stays_inside_one_data_line() {
        let e = encode(&Frame::Chunk { from: 0, seq: 3, text: "a\nb".into() });
        assert_eq!(e.matches('\n').count(), 3, "id line, data line, blank line: {e:?}");
    }

    #[test]
    fn last_event_id_wins_over_from() {
        assert_eq!(join_offset(Some("12"), Some("3")), 12);
        assert_eq!(join_offset(None, Some("3")), 3);
        assert_eq!(join_offset(Some(""), Some("3")), 3, "an empty header is no header");
        assert_eq!(join_offset(Some("junk"), Some("3")), 0, "a present but bad header means 0");
    }

    #[test]
    fn bad_offsets_mean_zero() {
        for bad in ["-1", "3.5", "NaN", "1e309", "+4", "0x10", "99999999999999999999", "9007199254740992", " "] {
            assert_eq!(join_offset(None, Some(bad)), 0, "{bad:?}");
        }
        assert_eq!(join_offset(None, None), 0);
        assert_eq!(join_offset(None, Some("9007199254740991")), MAX_OFFSET);
    }
}
