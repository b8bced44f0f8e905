//! The pump: a request to fetch a model API's SSE stream, and the per-pump state machine that
//! turns the upstream's events into what the stream is pushed.
//!
//! ```text
//!   SSE event ──▶ UpstreamParser (upstream.rs) ──ModelEvent──▶ text sink: the answer's text
//!                 one model API's vocabulary                 └▶ UiWriter (chunks.rs): UI message
//!                                                                chunks as NDJSON lines (SPEC §9)
//! ```
//!
//! The shell feeds [`Relay::handle_event`] one upstream event at a time, pushes
//! [`Relay::take_push`] into the stream, and ends the stream as the returned [`PumpStep`] says.
//! A [`Relay`] is a [`Pump`] plus, for an `openai-responses` pump in background mode, what
//! re-attaching to the response needs ([`background`]). The credential is named, never given
//! ([`secrets`]). Nothing here performs I/O.

pub mod background;
mod chunks;
pub mod secrets;
mod upstream;
pub mod upstreams;

pub use background::{BackgroundRecord, CallMethod, Interruption, Mark, Reattach, ReattachNext, Relay, Retrieve, Retrieved, UpstreamCall};
pub use secrets::{PumpSecrets, SecretsError};
pub use upstream::{Cursor, MalformedEvent, UpstreamFormat};
pub use upstreams::{Build, PumpUpstreams, UpstreamPrefix, UpstreamUrl, UpstreamsError};

use crate::engine::wire::ui::Format;
use chunks::{UiWriter, Written};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use thiserror::Error;
use upstream::{truncate, Detail, ModelEvent, PartKind, UpstreamParser};

/// One pump's conversion of an upstream response into stream text. Between events its state
/// is serializable: a background pump keeps it with its replay mark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pump {
    parser: UpstreamParser,
    sink: Sink,
    /// Scratch for one event's model events (kept to reuse its allocation).
    #[serde(skip)]
    events: Vec<ModelEvent>,
    #[serde(skip)]
    push: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Sink {
    /// A `text` stream: the answer's text as it comes.
    Text,
    /// A `ui` stream: UI message chunks, one NDJSON line each.
    Ui(Box<UiWriter>),
}

/// What the stream should do after an upstream event (once [`Pump::take_push`] is pushed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PumpStep {
    /// Wait for the next upstream event.
    Continue,
    /// The upstream's response is complete: close the stream.
    Complete,
    /// The upstream failed: fail the stream with this error.
    Failed(PumpFailure),
    /// A re-attached pump cannot go on without a seam: seal `interrupted` at the durable text.
    Interrupted(Interruption),
}

/// Why a pump failed. Its `Display` is the detail, for the log; readers are told
/// [`PumpFailure::for_readers`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PumpFailure {
    #[error(transparent)]
    Malformed(#[from] MalformedEvent),
    /// An error the upstream model API reported in its own stream (an `error` event): its
    /// message, as the API meant it for its caller.
    #[error("the upstream reported an error: {0}")]
    Upstream(String),
    #[error("the upstream stream ended before its final event")]
    EndedEarly,
    /// The upstream answered with a status other than 2xx (a redirect included: never
    /// followed). Its body goes to the log, never to readers.
    #[error("the upstream answered HTTP {0}")]
    Status(u16),
}

impl PumpFailure {
    /// What the stream's error says to readers: nothing of the upstream's own bytes but an
    /// allowed model API's error message (a malformed event's excerpt and an error answer's
    /// body go to the log only).
    pub fn for_readers(&self) -> String {
        match self {
            PumpFailure::Malformed(_) => "the upstream sent an event the pump cannot read".into(),
            PumpFailure::Status(status) if (300..400).contains(status) => {
                format!("the upstream answered HTTP {status}, a redirect, which a pump never follows")
            }
            other => other.to_string(),
        }
    }
}

impl Pump {
    /// The pump a stream of `format` takes: text for a `text` stream, UI message chunks (the
    /// stream id as the message id) for a `ui` stream.
    pub fn for_stream(format: Format, upstream: UpstreamFormat, stream_id: &str) -> Self {
        match format {
            Format::Text => Pump::text(upstream),
            Format::Ui => Pump::ui(upstream, stream_id),
        }
    }

    /// A pump into a `text` stream: pushes the answer's text.
    pub fn text(format: UpstreamFormat) -> Self {
        Pump::with(UpstreamParser::new(format, Detail::Text), Sink::Text)
    }

    /// A pump into a `ui` stream: pushes UI message chunks; `message_id` (the stream id) goes
    /// into the `start` chunk.
    pub fn ui(format: UpstreamFormat, message_id: &str) -> Self {
        Pump::with(UpstreamParser::new(format, Detail::Full), Sink::Ui(Box::new(UiWriter::new(message_id))))
    }

    fn with(parser: UpstreamParser, sink: Sink) -> Self {
        Pump { parser, sink, events: Vec::new(), push: String::new() }
    }

    /// Feeds one SSE event of the upstream (`event` is its `event:` name, or empty).
    pub fn handle_event(&mut self, event: &str, data: &str) -> PumpStep {
        let mut events = std::mem::take(&mut self.events);
        events.clear();
        let step = match self.parser.interpret(event, data, &mut events) {
            Ok(()) => self.apply(events.drain(..)),
            Err(malformed) => PumpStep::Failed(malformed.into()),
        };
        self.events = events;
        step
    }

    /// The upstream's body ended (without the final event, or this would not be called).
    pub fn handle_body_end(&mut self) -> PumpStep {
        PumpStep::Failed(PumpFailure::EndedEarly)
    }

    /// Where an OpenAI Responses stream stands (`None` for the other formats).
    pub fn cursor(&self) -> Option<&Cursor> {
        self.parser.cursor()
    }

    /// Whether this pump writes UI message chunks (a `ui` stream).
    pub fn writes_ui(&self) -> bool {
        matches!(self.sink, Sink::Ui(_))
    }

    /// What to push into the stream now: text, or whole NDJSON lines.
    pub fn take_push(&mut self) -> String {
        match &mut self.sink {
            Sink::Text => std::mem::take(&mut self.push),
            Sink::Ui(writer) => writer.take_lines(),
        }
    }

    fn apply(&mut self, events: impl Iterator<Item = ModelEvent>) -> PumpStep {
        for event in events {
            let step = match &mut self.sink {
                Sink::Text => match event {
                    ModelEvent::Delta { kind: PartKind::Text, text, .. } => {
                        self.push.push_str(&text);
                        PumpStep::Continue
                    }
                    ModelEvent::Done => PumpStep::Complete,
                    // A text stream has no finish reason to say it was cut short.
                    ModelEvent::Incomplete(message) | ModelEvent::Error(message) => PumpStep::Failed(PumpFailure::Upstream(message)),
                    _ => PumpStep::Continue,
                },
                Sink::Ui(writer) => match writer.handle(event) {
                    Ok(Written::Continue) => PumpStep::Continue,
                    Ok(Written::Finished) => PumpStep::Complete,
                    Ok(Written::Failed(message)) => PumpStep::Failed(PumpFailure::Upstream(message)),
                    Err(out_of_order) => PumpStep::Failed(PumpFailure::Malformed(MalformedEvent(out_of_order.0))),
                },
            };
            if step != PumpStep::Continue {
                return step;
            }
        }
        PumpStep::Continue
    }
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
    /// The credential by name: a Worker secret on the `PUMP_SECRETS` allow-list, whose value the
    /// shell sends in the format's credential header at each call ([`secrets`]).
    #[serde(default)]
    pub auth: Option<PumpAuth>,
}

/// `{"secret": "OPENAI_API_KEY"}`: the name of the Worker secret holding the credential.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PumpAuth {
    pub secret: String,
}

/// Why a pump request was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("bad pump request: {0}")]
pub struct BadPump(pub String);

impl PumpRequest {
    /// Parses and validates a pump request: its URL must be one `upstreams` allows, and its
    /// `auth` may name only a secret on `secrets`, pinned where the URL goes.
    pub fn parse(json: &[u8], upstreams: &PumpUpstreams, secrets: &PumpSecrets) -> Result<Self, BadPump> {
        let req: PumpRequest = serde_json::from_slice(json).map_err(|e| BadPump(e.to_string()))?;
        let scheme_ok = req.url.starts_with("https://") || req.url.starts_with("http://");
        if !scheme_ok || req.url.len() > 4096 || req.url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(BadPump(format!("url must be an http(s) URL, got {:?}", truncate(&req.url, 80))));
        }
        let upstream = upstreams.permit(&req.url)?;
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
        let credential_in_headers = req.headers.keys().find(|name| secrets::is_credential_header(name));
        if let Some(auth) = &req.auth {
            secrets.permit(&auth.secret, &upstream)?;
            if let Some(name) = credential_in_headers {
                return Err(BadPump(format!("auth.secret names the credential: header {name:?} may not carry another")));
            }
        }
        if req.background() {
            if req.body.as_ref().and_then(|b| b.get("stream")) != Some(&Value::Bool(true)) {
                return Err(BadPump("a background pump streams its response: the body must have \"stream\": true".into()));
            }
            if let Some(name) = credential_in_headers {
                return Err(BadPump(format!(
                    "a background pump names its credential with auth.secret (it re-attaches after a reset and stores no key), not in header {name:?}"
                )));
            }
        }
        Ok(req)
    }

    /// Background mode: an `openai-responses` request whose body asks `"background": true`. The
    /// response then runs on at the provider without our connection, and the pump can re-attach
    /// to it ([`background`]).
    pub fn background(&self) -> bool {
        self.format == UpstreamFormat::OpenAiResponses && self.body.as_ref().and_then(|b| b.get("background")) == Some(&Value::Bool(true))
    }

    /// The upstream named without its query (which may carry a key), for logs.
    pub fn redacted_url(&self) -> &str {
        self.url.split(['?', '#']).next().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PumpStep::*;

    /// Feeds one event to a text pump: what it pushes and what it says.
    fn feed(pump: &mut Pump, event: &str, data: &str) -> (String, PumpStep) {
        let step = pump.handle_event(event, data);
        (pump.take_push(), step)
    }

    fn pushed(text: &str) -> (String, PumpStep) {
        (text.to_owned(), Continue)
    }

    fn failed(failure: PumpFailure) -> (String, PumpStep) {
        (String::new(), Failed(failure))
    }

    #[test]
    fn text_pump_openai_chat_deltas_and_done() {
        let mut p = Pump::text(UpstreamFormat::OpenAiChat);
        assert_eq!(feed(&mut p, "", r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#), pushed(""));
        assert_eq!(feed(&mut p, "", r#"{"choices":[{"index":0,"delta":{"content":"Hi 👋"}}]}"#), pushed("Hi 👋"));
        // Tool calls and usage are not part of a text stream's text, whatever their shape.
        assert_eq!(
            feed(&mut p, "", r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#),
            pushed("")
        );
        // With `n > 1` the choices interleave, one per chunk: only the first is the answer.
        assert_eq!(feed(&mut p, "", r#"{"choices":[{"index":1,"delta":{"content":"other"}}]}"#), pushed(""));
        assert_eq!(feed(&mut p, "", r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#), pushed(""));
        assert_eq!(feed(&mut p, "", r#"{"choices":[],"usage":{"prompt_tokens":3}}"#), pushed(""));
        assert_eq!(feed(&mut p, "", "[DONE]"), (String::new(), Complete));
        let mut p = Pump::text(UpstreamFormat::OpenAiChat);
        assert_eq!(feed(&mut p, "", r#"{"error":{"message":"rate limited"}}"#), failed(PumpFailure::Upstream("rate limited".into())));
        assert!(matches!(feed(&mut p, "", "{not json").1, Failed(PumpFailure::Malformed(_))));
        assert!(matches!(feed(&mut p, "", r#"{"id":"x"}"#).1, Failed(PumpFailure::Malformed(_))), "a chunk without choices");
    }

    #[test]
    fn text_pump_openai_responses_deltas_and_done() {
        let mut p = Pump::text(UpstreamFormat::OpenAiResponses);
        assert_eq!(feed(&mut p, "response.created", r#"{"type":"response.created","response":{}}"#), pushed(""));
        assert_eq!(feed(&mut p, "response.output_text.delta", r#"{"type":"response.output_text.delta","delta":"é"}"#), pushed("é"));
        assert_eq!(feed(&mut p, "", r#"{"type":"response.reasoning_summary_text.delta","delta":"hmm"}"#), pushed(""));
        assert_eq!(feed(&mut p, "response.completed", r#"{"type":"response.completed"}"#), (String::new(), Complete));
        let mut p = Pump::text(UpstreamFormat::OpenAiResponses);
        assert_eq!(
            feed(&mut p, "error", r#"{"type":"error","code":"server_error","message":"boom"}"#),
            failed(PumpFailure::Upstream("boom".into()))
        );
        assert_eq!(
            feed(&mut p, "response.failed", r#"{"type":"response.failed","response":{"error":{"message":"bad"}}}"#),
            failed(PumpFailure::Upstream("bad".into()))
        );
        assert_eq!(
            feed(&mut p, "", r#"{"type":"response.incomplete","response":{"incomplete_details":{"reason":"max_output_tokens"}}}"#),
            failed(PumpFailure::Upstream("max_output_tokens".into())),
            "a text stream cut by the token limit is an error, as before the ui format"
        );
        assert!(matches!(feed(&mut p, "", r#"{"type":"response.output_text.delta","delta":1}"#).1, Failed(PumpFailure::Malformed(_))));
    }

    #[test]
    fn text_pump_anthropic_deltas_and_done() {
        let mut p = Pump::text(UpstreamFormat::Anthropic);
        assert_eq!(feed(&mut p, "ping", r#"{"type":"ping"}"#), pushed(""));
        assert_eq!(
            feed(&mut p, "content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"👩‍💻"}}"#),
            pushed("👩‍💻")
        );
        assert_eq!(
            feed(&mut p, "", r#"{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hm"}}"#),
            pushed("")
        );
        assert_eq!(feed(&mut p, "message_stop", r#"{"type":"message_stop"}"#), (String::new(), Complete));
        let mut p = Pump::text(UpstreamFormat::Anthropic);
        assert_eq!(
            feed(&mut p, "error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            failed(PumpFailure::Upstream("Overloaded".into()))
        );
        assert!(matches!(
            feed(&mut p, "", r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta"}}"#).1,
            Failed(PumpFailure::Malformed(_))
        ));
        assert_eq!(p.handle_body_end(), Failed(PumpFailure::EndedEarly));
    }

    #[test]
    fn readers_are_told_the_status_and_never_the_upstreams_bytes() {
        let malformed = PumpFailure::Malformed(MalformedEvent("x db_password=hunter2".into()));
        assert!(malformed.to_string().contains("hunter2"), "the log's detail");
        assert_eq!(malformed.for_readers(), "the upstream sent an event the pump cannot read");
        assert_eq!(PumpFailure::Status(500).for_readers(), "the upstream answered HTTP 500");
        assert_eq!(PumpFailure::Status(302).for_readers(), "the upstream answered HTTP 302, a redirect, which a pump never follows");
        assert_eq!(PumpFailure::Upstream("Overloaded".into()).for_readers(), "the upstream reported an error: Overloaded");
    }

    #[test]
    fn failures_say_what_the_stream_error_says() {
        assert_eq!(PumpFailure::Upstream("Overloaded".into()).to_string(), "the upstream reported an error: Overloaded");
        assert_eq!(PumpFailure::EndedEarly.to_string(), "the upstream stream ended before its final event");
        assert!(PumpFailure::Malformed(MalformedEvent("x".into())).to_string().starts_with("malformed upstream event: "));
    }

    #[test]
    fn pump_requests_are_validated() {
        let ok = br#"{"format":"anthropic","url":"http://127.0.0.1:8788/v1/messages?k=secret","headers":{"x-api-key":"k"},"body":{"stream":true}}"#;
        let req = PumpRequest::parse(ok, &PumpUpstreams::Loopback, &PumpSecrets::default()).unwrap();
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
            assert!(
                PumpRequest::parse(bad, &PumpUpstreams::Loopback, &PumpSecrets::default()).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
