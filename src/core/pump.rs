//! The pump: a request to fetch a model API's SSE stream and push its text deltas, and the
//! interpretation of each upstream event in the three supported formats.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use thiserror::Error;

/// The upstream API's streaming format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum UpstreamFormat {
    /// OpenAI-compatible chat completions: `choices[].delta.content`, then `[DONE]`.
    #[serde(rename = "openai-chat")]
    OpenAiChat,
    /// OpenAI Responses: `response.output_text.delta` events, then `response.completed`.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// Anthropic Messages: `content_block_delta` with a `text_delta`, then `message_stop`.
    #[serde(rename = "anthropic")]
    Anthropic,
}

/// A validated pump request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PumpRequest {
    pub format: UpstreamFormat,
    pub url: String,
    #[serde(default)]
    pub method: Option<String>,
    /// Sent as given (API keys included); never logged.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Sent as JSON.
    #[serde(default)]
    pub body: Option<Value>,
}

/// Why a pump request was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("bad pump request: {0}")]
pub struct BadPump(pub String);

impl PumpRequest {
    pub fn parse(json: &[u8]) -> Result<Self, BadPump> {
        let req: PumpRequest = serde_json::from_slice(json).map_err(|e| BadPump(e.to_string()))?;
        let scheme_ok = req.url.starts_with("https://") || req.url.starts_with("http://");
        if !scheme_ok || req.url.len() > 4096 || req.url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(BadPump(format!("url must be an http(s) URL, got {:?}", truncate(&req.url, 80))));
        }
        if let Some(m) = &req.method {
            if !matches!(m.as_str(), "POST" | "GET") {
                return Err(BadPump(format!("method must be POST or GET, got {m:?}")));
            }
        }
        for (name, value) in &req.headers {
            let token = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token || value.chars().any(|c| c == '\r' || c == '\n' || c == '\0') {
                return Err(BadPump(format!("header {name:?} is not a valid header")));
            }
        }
        Ok(req)
    }

    /// The upstream named without its query (which may carry a key), for logs.
    pub fn redacted_url(&self) -> &str {
        self.url.split(['?', '#']).next().unwrap_or_default()
    }
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// What one upstream event means for the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamEvent {
    /// Text to push.
    Delta(String),
    /// The response is complete.
    Done,
    /// The upstream reported an error.
    Error(String),
    /// Bookkeeping (pings, metadata, role-only deltas).
    Ignore,
}

/// An event whose data is not what its format promises.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("malformed upstream event: {0}")]
pub struct MalformedEvent(pub String);

impl UpstreamFormat {
    /// Interprets one SSE event (`event` is its `event:` name, if any).
    pub fn interpret(self, event: &str, data: &str) -> Result<UpstreamEvent, MalformedEvent> {
        let data = data.trim();
        if self == UpstreamFormat::OpenAiChat && data == "[DONE]" {
            return Ok(UpstreamEvent::Done);
        }
        if data.is_empty() {
            return Ok(UpstreamEvent::Ignore);
        }
        let v: Value = serde_json::from_str(data).map_err(|e| MalformedEvent(format!("{e} in {:?}", truncate(data, 120))))?;
        if let Some(message) = error_message(&v) {
            return Ok(UpstreamEvent::Error(message));
        }
        let kind = v.get("type").and_then(Value::as_str).unwrap_or(event);
        Ok(match self {
            UpstreamFormat::OpenAiChat => match v.pointer("/choices/0/delta/content") {
                Some(Value::String(s)) if !s.is_empty() => UpstreamEvent::Delta(s.clone()),
                _ if v.get("choices").is_some() => UpstreamEvent::Ignore,
                _ => return Err(MalformedEvent(format!("a chat completion chunk without choices: {}", truncate(data, 120)))),
            },
            UpstreamFormat::OpenAiResponses => match kind {
                "response.output_text.delta" => match v.get("delta") {
                    Some(Value::String(s)) => UpstreamEvent::Delta(s.clone()),
                    _ => return Err(MalformedEvent("response.output_text.delta without a string delta".into())),
                },
                "response.completed" => UpstreamEvent::Done,
                "response.failed" | "response.incomplete" => UpstreamEvent::Error(
                    v.pointer("/response/error/message")
                        .or_else(|| v.pointer("/response/incomplete_details/reason"))
                        .and_then(Value::as_str)
                        .unwrap_or(kind)
                        .to_owned(),
                ),
                _ => UpstreamEvent::Ignore,
            },
            UpstreamFormat::Anthropic => match kind {
                "content_block_delta" => match (v.pointer("/delta/type").and_then(Value::as_str), v.pointer("/delta/text")) {
                    (Some("text_delta"), Some(Value::String(s))) => UpstreamEvent::Delta(s.clone()),
                    (Some("text_delta"), _) => return Err(MalformedEvent("text_delta without text".into())),
                    _ => UpstreamEvent::Ignore, // e.g. input_json_delta of a tool call
                },
                "message_stop" => UpstreamEvent::Done,
                _ => UpstreamEvent::Ignore,
            },
        })
    }
}

/// The error message of an error event in any of the formats.
fn error_message(v: &Value) -> Option<String> {
    match v.get("error") {
        Some(Value::String(s)) => return Some(s.clone()),
        Some(e @ Value::Object(_)) => {
            return Some(e.get("message").and_then(Value::as_str).map_or_else(|| e.to_string(), str::to_owned));
        }
        _ => {}
    }
    (v.get("type").and_then(Value::as_str) == Some("error"))
        .then(|| v.get("message").and_then(Value::as_str).unwrap_or("upstream error").to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use UpstreamEvent::*;

    #[test]
    fn openai_chat_deltas_and_done() {
        let f = UpstreamFormat::OpenAiChat;
        assert_eq!(f.interpret("", r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#), Ok(Ignore));
        assert_eq!(f.interpret("", r#"{"choices":[{"index":0,"delta":{"content":"Hi 👋"}}]}"#), Ok(Delta("Hi 👋".into())));
        assert_eq!(f.interpret("", r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#), Ok(Ignore));
        assert_eq!(f.interpret("", "[DONE]"), Ok(Done));
        assert_eq!(f.interpret("", r#"{"error":{"message":"rate limited"}}"#), Ok(Error("rate limited".into())));
        assert!(f.interpret("", "{not json").is_err());
    }

    #[test]
    fn openai_responses_deltas_and_done() {
        let f = UpstreamFormat::OpenAiResponses;
        assert_eq!(f.interpret("response.created", r#"{"type":"response.created","response":{}}"#), Ok(Ignore));
        assert_eq!(
            f.interpret("response.output_text.delta", r#"{"type":"response.output_text.delta","delta":"é"}"#),
            Ok(Delta("é".into()))
        );
        assert_eq!(f.interpret("response.completed", r#"{"type":"response.completed"}"#), Ok(Done));
        assert_eq!(f.interpret("error", r#"{"type":"error","code":"server_error","message":"boom"}"#), Ok(Error("boom".into())));
        assert_eq!(
            f.interpret("response.failed", r#"{"type":"response.failed","response":{"error":{"message":"bad"}}}"#),
            Ok(Error("bad".into()))
        );
    }

    #[test]
    fn anthropic_deltas_and_done() {
        let f = UpstreamFormat::Anthropic;
        assert_eq!(f.interpret("ping", r#"{"type":"ping"}"#), Ok(Ignore));
        assert_eq!(
            f.interpret("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"👩‍💻"}}"#),
            Ok(Delta("👩‍💻".into()))
        );
        assert_eq!(f.interpret("message_stop", r#"{"type":"message_stop"}"#), Ok(Done));
        assert_eq!(
            f.interpret("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            Ok(Error("Overloaded".into()))
        );
    }

    #[test]
    fn pump_requests_are_validated() {
        let ok = br#"{"format":"anthropic","url":"http://127.0.0.1:8788/v1/messages?k=secret","headers":{"x-api-key":"k"},"body":{"stream":true}}"#;
        let req = PumpRequest::parse(ok).unwrap();
        assert_eq!(req.redacted_url(), "http://127.0.0.1:8788/v1/messages");
        for bad in [
            &br#"{"format":"gemini","url":"http://x"}"#[..],
            br#"{"format":"anthropic","url":"ftp://x"}"#,
            br#"{"format":"anthropic","url":"http://x","headers":{"a b":"c"}}"#,
            br#"{"format":"anthropic","url":"http://x","headers":{"a":"c\r\nd"}}"#,
            br#"{"format":"anthropic"}"#,
            br#"{"format":"anthropic","url":"http://x","extra":1}"#,
            b"not json",
        ] {
            assert!(PumpRequest::parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
