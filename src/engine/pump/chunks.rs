//! Model events as AI SDK UI message chunks (SPEC §9), one NDJSON line each.
//!
//! The AI SDK's reader (`processUIMessageStream`) throws on a delta for a part it has not seen
//! start, so the writer keeps the parts open in this response and guarantees, whatever order
//! the upstream's events come in: `start` and `start-step` first; a part's `*-start` before
//! its deltas and `*-end` after them; every open part ended and every tool call's input
//! settled before `finish-step` and `finish`.

use super::upstream::{FinishReason, ModelEvent, PartKind, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One UI message chunk as the AI SDK 7 defines it (`UIMessageChunk` in `ai`), for the types
/// the pump writes.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "kebab-case", rename_all_fields = "camelCase")]
enum UiChunk<'a> {
    Start {
        message_id: &'a str,
    },
    StartStep,
    TextStart {
        id: &'a str,
    },
    TextDelta {
        id: &'a str,
        delta: &'a str,
    },
    TextEnd {
        id: &'a str,
    },
    ReasoningStart {
        id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        provider_metadata: Option<Value>,
    },
    ReasoningDelta {
        id: &'a str,
        delta: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        provider_metadata: Option<Value>,
    },
    ReasoningEnd {
        id: &'a str,
    },
    ToolInputStart {
        tool_call_id: &'a str,
        tool_name: &'a str,
    },
    ToolInputDelta {
        tool_call_id: &'a str,
        input_text_delta: &'a str,
    },
    ToolInputAvailable {
        tool_call_id: &'a str,
        tool_name: &'a str,
        input: &'a Value,
    },
    ToolInputError {
        tool_call_id: &'a str,
        tool_name: &'a str,
        input: &'a Value,
        error_text: &'a str,
    },
    FinishStep,
    Finish {
        #[serde(skip_serializing_if = "Option::is_none")]
        finish_reason: Option<FinishReason>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message_metadata: Option<Value>,
    },
}

/// A part or tool call that has started and not yet ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Open {
    /// The upstream's key for it.
    key: String,
    what: OpenPart,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum OpenPart {
    /// A text or reasoning part and the chunk id this writer gave it.
    Part { kind: PartKind, id: String },
    /// A tool call and its input so far.
    Tool { call_id: String, name: String, input: String },
}

/// What a model event meant for the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// More is to come.
    Continue,
    /// The response is complete: its last chunk (`finish`) is written.
    Finished,
    /// The upstream failed with this message; nothing more is written.
    Failed(String),
}

/// A model event that contradicts the ones before it (e.g. input for a tool call that never
/// started).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfOrder(pub String);

/// Writes one response's UI message chunks. Part ids are `text-N` / `reasoning-N`, numbered
/// in order of appearance: unique within the message, and the same on every replay. Its state
/// between events is serializable (a background pump's replay mark keeps it); the lines not yet
/// taken are not part of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UiWriter {
    message_id: String,
    started: bool,
    parts_opened: u32,
    open: Vec<Open>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    #[serde(skip)]
    out: String,
}

impl UiWriter {
    /// `message_id` goes into the `start` chunk: the UI message gets the stream's id.
    pub fn new(message_id: &str) -> Self {
        UiWriter {
            message_id: message_id.to_owned(),
            started: false,
            parts_opened: 0,
            open: Vec::new(),
            usage: None,
            finish: None,
            out: String::new(),
        }
    }

    /// The NDJSON lines written since the last call.
    pub fn take_lines(&mut self) -> String {
        std::mem::take(&mut self.out)
    }

    pub fn handle(&mut self, event: ModelEvent) -> Result<Written, OutOfOrder> {
        match event {
            ModelEvent::Delta { kind, key, text } => {
                if !text.is_empty() {
                    let id = self.part(kind, key, None)?;
                    self.write_delta(kind, &id, &text, None);
                }
            }
            ModelEvent::ReasoningSignature { key, signature } => {
                let id = self.part(PartKind::Reasoning, key, None)?;
                self.write_delta(PartKind::Reasoning, &id, "", Some(json!({"anthropic": {"signature": signature}})));
            }
            ModelEvent::RedactedReasoning { key, data } => {
                self.part(PartKind::Reasoning, key, Some(json!({"anthropic": {"redactedData": data}})))?;
            }
            ModelEvent::ToolStart { key, call_id, name } => {
                if self.open.iter().any(|o| o.key == key) {
                    return Err(OutOfOrder(format!("a tool call starts as {key:?} while that is still open")));
                }
                self.write(&UiChunk::ToolInputStart { tool_call_id: &call_id, tool_name: &name });
                self.open.push(Open { key, what: OpenPart::Tool { call_id, name, input: String::new() } });
            }
            ModelEvent::ToolDelta { key, json } => {
                let Some(OpenPart::Tool { call_id, input, .. }) = self.open.iter_mut().find(|o| o.key == key).map(|o| &mut o.what) else {
                    return Err(OutOfOrder(format!("tool input for {key:?}, which is not an open tool call")));
                };
                input.push_str(&json);
                let call_id = call_id.clone();
                self.write(&UiChunk::ToolInputDelta { tool_call_id: &call_id, input_text_delta: &json });
            }
            // An end may repeat (Responses ends a text part at `output_text.done` and again at
            // `content_part.done`), or follow a part that never wrote: both are no-ops.
            ModelEvent::End { key } => {
                if let Some(at) = self.open.iter().position(|o| o.key == key) {
                    let open = self.open.remove(at);
                    self.close(open);
                }
            }
            ModelEvent::Usage(usage) => self.usage = Some(usage),
            ModelEvent::Finish(reason) => {
                self.finish = Some(reason);
                self.close_all();
            }
            // An incomplete response (the Responses API's max_output_tokens) still finishes:
            // its finish reason (`length`) says it was cut.
            ModelEvent::Done | ModelEvent::Incomplete(_) => {
                self.close_all();
                self.write(&UiChunk::FinishStep);
                let metadata = self.metadata();
                self.write(&UiChunk::Finish { finish_reason: self.finish, message_metadata: metadata });
                return Ok(Written::Finished);
            }
            ModelEvent::Error(message) => return Ok(Written::Failed(message)),
        }
        Ok(Written::Continue)
    }

    /// `{usage, finishReason}` as far as the upstream reported them.
    fn metadata(&self) -> Option<Value> {
        let mut metadata = serde_json::Map::new();
        if let Some(usage) = &self.usage {
            metadata.insert("usage".into(), serde_json::to_value(usage).expect("usage serializes"));
        }
        if let Some(reason) = self.finish {
            metadata.insert("finishReason".into(), serde_json::to_value(reason).expect("a finish reason serializes"));
        }
        (!metadata.is_empty()).then_some(Value::Object(metadata))
    }

    /// The id of the open part `key`, opening it (with `metadata` on its start) if needed.
    fn part(&mut self, kind: PartKind, key: String, metadata: Option<Value>) -> Result<String, OutOfOrder> {
        match self.open.iter().find(|o| o.key == key).map(|o| &o.what) {
            Some(OpenPart::Part { kind: k, id }) if *k == kind => return Ok(id.clone()),
            Some(_) => return Err(OutOfOrder(format!("{kind:?} for {key:?}, which is open as something else"))),
            None => {}
        }
        let prefix = if kind == PartKind::Text { "text" } else { "reasoning" };
        let id = format!("{prefix}-{}", self.parts_opened);
        self.parts_opened += 1;
        match kind {
            PartKind::Text => self.write(&UiChunk::TextStart { id: &id }),
            PartKind::Reasoning => self.write(&UiChunk::ReasoningStart { id: &id, provider_metadata: metadata }),
        }
        self.open.push(Open { key, what: OpenPart::Part { kind, id: id.clone() } });
        Ok(id)
    }

    fn write_delta(&mut self, kind: PartKind, id: &str, delta: &str, provider_metadata: Option<Value>) {
        match kind {
            PartKind::Text => self.write(&UiChunk::TextDelta { id, delta }),
            PartKind::Reasoning => self.write(&UiChunk::ReasoningDelta { id, delta, provider_metadata }),
        }
    }

    fn close_all(&mut self) {
        for open in std::mem::take(&mut self.open) {
            self.close(open);
        }
    }

    /// Ends a part, or settles a tool call's input: parsed JSON (`{}` when the tool takes
    /// none), or a `tool-input-error` carrying the raw text when it is not JSON.
    fn close(&mut self, open: Open) {
        match open.what {
            OpenPart::Part { kind: PartKind::Text, id } => self.write(&UiChunk::TextEnd { id: &id }),
            OpenPart::Part { kind: PartKind::Reasoning, id } => self.write(&UiChunk::ReasoningEnd { id: &id }),
            OpenPart::Tool { call_id, name, input } => {
                let text = if input.trim().is_empty() { "{}" } else { &input };
                match serde_json::from_str::<Value>(text) {
                    Ok(parsed) => self.write(&UiChunk::ToolInputAvailable { tool_call_id: &call_id, tool_name: &name, input: &parsed }),
                    Err(e) => {
                        let error = format!("the tool call's input is not valid JSON: {e}");
                        self.write(&UiChunk::ToolInputError {
                            tool_call_id: &call_id,
                            tool_name: &name,
                            input: &Value::String(input),
                            error_text: &error,
                        });
                    }
                }
            }
        }
    }

    fn ensure_started(&mut self) {
        if !self.started {
            self.started = true;
            let message_id = std::mem::take(&mut self.message_id);
            self.write(&UiChunk::Start { message_id: &message_id });
            self.write(&UiChunk::StartStep);
        }
    }

    fn write(&mut self, chunk: &UiChunk) {
        self.ensure_started();
        // JSON escapes every control character, so a chunk is always exactly one line.
        self.out.push_str(&serde_json::to_string(chunk).expect("chunks serialize"));
        self.out.push('\n');
    }
}
