//! What a model API's streaming events mean, in no particular API's terms.
//!
//! Each [`UpstreamFormat`] has its own event vocabulary; [`UpstreamParser`] reads one SSE event
//! at a time and tells what the model did as [`ModelEvent`]s: text and reasoning deltas keyed
//! by the part they belong to, tool calls with their streamed input, usage, the finish reason,
//! the end, or an error. A parser for a `text` pump ([`Detail::Text`]) reads only what a text
//! stream carries, so anything else in the upstream (tool calls, reasoning) can neither show
//! up in nor break a text stream.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

/// The upstream API's streaming format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// How much of the upstream a parser reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Detail {
    /// The answer's text, its end and errors (a `text` stream).
    Text,
    /// Also reasoning, tool calls, usage and the finish reason (a `ui` stream).
    Full,
}

/// A text or reasoning part of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartKind {
    Text,
    Reasoning,
}

/// One thing the model did. `key` names a part or a tool call within one response (an
/// Anthropic block index, a Responses item id, …); keys are unique among the open ones.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    /// Text or reasoning for the part `key` (opened by its first delta).
    Delta { kind: PartKind, key: String, text: String },
    /// Anthropic: the signature of the reasoning part `key` (the app sends it back next turn).
    ReasoningSignature { key: String, signature: String },
    /// Anthropic: a redacted reasoning block, opaque data without text.
    RedactedReasoning { key: String, data: String },
    /// A tool call starts.
    ToolStart { key: String, call_id: String, name: String },
    /// A piece of a tool call's JSON input.
    ToolDelta { key: String, json: String },
    /// The part or tool call `key` is complete.
    End { key: String },
    /// The token usage so far (each one replaces the last).
    Usage(Usage),
    /// Why the model stopped; everything still open is complete.
    Finish(FinishReason),
    /// The response is complete.
    Done,
    /// OpenAI Responses: the response ended early (`response.incomplete`) for this reason.
    Incomplete(String),
    /// The upstream reported an error.
    Error(String),
}

/// An event whose data is not what its format promises.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("malformed upstream event: {0}")]
pub struct MalformedEvent(pub String);

/// Why the model stopped, in the AI SDK's terms (`FinishReason` of `ai`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    Stop,
    Length,
    ContentFilter,
    ToolCalls,
    Other,
}

/// Token usage in the shape of the AI SDK's `LanguageModelUsage`; a count the upstream did not
/// report is left out. `raw` is the upstream's own usage object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    pub input_token_details: InputTokenDetails,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    pub output_token_details: OutputTokenDetails,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    pub raw: Value,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputTokenDetails {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_cache_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputTokenDetails {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// From the counts as the AI SDK defines them: `input` includes cached tokens, `output`
    /// includes reasoning tokens. The derived counts are filled in where the parts are known.
    fn new(
        input: Option<u64>,
        cache_read: Option<u64>,
        cache_write: Option<u64>,
        output: Option<u64>,
        reasoning: Option<u64>,
        total: Option<u64>,
        raw: Value,
    ) -> Self {
        let cached = cache_read.unwrap_or(0) + cache_write.unwrap_or(0);
        Usage {
            input_tokens: input,
            input_token_details: InputTokenDetails {
                no_cache_tokens: input.map(|i| i.saturating_sub(cached)),
                cache_read_tokens: cache_read,
                cache_write_tokens: cache_write,
            },
            output_tokens: output,
            output_token_details: OutputTokenDetails {
                text_tokens: output.map(|o| o.saturating_sub(reasoning.unwrap_or(0))),
                reasoning_tokens: reasoning,
            },
            total_tokens: total.or_else(|| Some(input? + output?)),
            raw,
        }
    }
}

/// The per-response state a format needs to interpret its events. It is serializable: a
/// background pump keeps it with its replay mark (see `super::background`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum FormatState {
    /// Which part the chat deltas are writing (chat parts have no explicit ends) and which tool
    /// call indexes have started.
    OpenAiChat { writing: Option<PartKind>, tools: Vec<u64> },
    /// Whether a function call was seen (`response.completed` has no finish reason of its own),
    /// and where the response's events stand.
    OpenAiResponses { tool_called: bool, cursor: Cursor },
    /// The kind of each content block, and the usage of `message_start` and `message_delta`
    /// merged (the latter only carries what changed).
    Anthropic { blocks: Vec<(u64, AnthropicBlock)>, usage: Map<String, Value> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum AnthropicBlock {
    Text,
    Reasoning,
    Tool,
    /// A block the UI message has no part for (e.g. a server tool's use or result).
    Other,
}

/// Where an OpenAI Responses stream stands: the response's id (from the first event that
/// names it) and the `sequence_number` of the last event read. Re-attaching to a background
/// response needs both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    pub response_id: Option<String>,
    pub sequence: Option<u64>,
}

/// Interprets one upstream response's events, one at a time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamParser {
    detail: Detail,
    state: FormatState,
}

impl UpstreamParser {
    pub fn new(format: UpstreamFormat, detail: Detail) -> Self {
        let state = match format {
            UpstreamFormat::OpenAiChat => FormatState::OpenAiChat { writing: None, tools: Vec::new() },
            UpstreamFormat::OpenAiResponses => FormatState::OpenAiResponses { tool_called: false, cursor: Cursor::default() },
            UpstreamFormat::Anthropic => FormatState::Anthropic { blocks: Vec::new(), usage: Map::new() },
        };
        UpstreamParser { detail, state }
    }

    /// An OpenAI Responses stream's cursor (`None` for the other formats).
    pub fn cursor(&self) -> Option<&Cursor> {
        match &self.state {
            FormatState::OpenAiResponses { cursor, .. } => Some(cursor),
            _ => None,
        }
    }

    /// Interprets one SSE event (`event` is its `event:` name, if any) into `out`.
    pub fn interpret(&mut self, event: &str, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), MalformedEvent> {
        let data = data.trim();
        if matches!(self.state, FormatState::OpenAiChat { .. }) && data == "[DONE]" {
            out.push(ModelEvent::Done);
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| MalformedEvent(format!("{e} in {:?}", truncate(data, 120))))?;
        if let FormatState::OpenAiResponses { cursor, .. } = &mut self.state {
            cursor.read(&v);
        }
        if let Some(message) = error_message(&v) {
            out.push(ModelEvent::Error(message));
            return Ok(());
        }
        let kind = v.get("type").and_then(Value::as_str).unwrap_or(event);
        let full = self.detail == Detail::Full;
        match &mut self.state {
            FormatState::OpenAiChat { writing, tools } => chat(&v, data, full, writing, tools, out),
            FormatState::OpenAiResponses { tool_called, .. } => responses(kind, &v, full, tool_called, out),
            FormatState::Anthropic { blocks, usage } => anthropic(kind, &v, full, blocks, usage, out),
        }
    }
}

/// OpenAI chat completions. Reasoning arrives as `reasoning_content` (DeepSeek, vLLM) or
/// `reasoning` (OpenRouter, Ollama) on OpenAI-compatible servers; OpenAI itself sends none.
fn chat(
    v: &Value,
    data: &str,
    full: bool,
    writing: &mut Option<PartKind>,
    tools: &mut Vec<u64>,
    out: &mut Vec<ModelEvent>,
) -> Result<(), MalformedEvent> {
    if v.get("choices").is_none() {
        return Err(MalformedEvent(format!("a chat completion chunk without choices: {}", truncate(data, 120))));
    }
    // The first choice only (`n > 1` streams interleave the choices, each chunk naming its own).
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|all| all.iter().find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0));
    let delta = choice.and_then(|c| c.get("delta"));
    let text = |name: &str| delta.and_then(|d| d.get(name)).and_then(Value::as_str).filter(|s| !s.is_empty());
    if !full {
        if let Some(s) = text("content") {
            out.push(ModelEvent::Delta { kind: PartKind::Text, key: String::new(), text: s.to_owned() });
        }
        return Ok(());
    }
    // Chat parts have no ends of their own: a part ends when the other kind starts writing.
    let mut write = |kind: PartKind, s: &str, out: &mut Vec<ModelEvent>| {
        let key = |k: PartKind| if k == PartKind::Text { "text" } else { "reasoning" }.to_owned();
        if let Some(other) = writing.filter(|w| *w != kind) {
            out.push(ModelEvent::End { key: key(other) });
        }
        *writing = Some(kind);
        out.push(ModelEvent::Delta { kind, key: key(kind), text: s.to_owned() });
    };
    if let Some(s) = text("reasoning_content").or_else(|| text("reasoning")) {
        write(PartKind::Reasoning, s, out);
    }
    if let Some(s) = text("content") {
        write(PartKind::Text, s, out);
    }
    for call in delta.and_then(|d| d.get("tool_calls")).and_then(Value::as_array).into_iter().flatten() {
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .ok_or_else(|| MalformedEvent(format!("a tool call delta without an index: {call}")))?;
        let key = format!("tool-{index}");
        if !tools.contains(&index) {
            let id = call.get("id").and_then(Value::as_str);
            let name = call.pointer("/function/name").and_then(Value::as_str);
            let (Some(id), Some(name)) = (id, name) else {
                return Err(MalformedEvent(format!("tool call {index} continues before it started (no id and name): {call}")));
            };
            tools.push(index);
            out.push(ModelEvent::ToolStart { key: key.clone(), call_id: id.to_owned(), name: name.to_owned() });
        }
        if let Some(json) = call.pointer("/function/arguments").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            out.push(ModelEvent::ToolDelta { key, json: json.to_owned() });
        }
    }
    if let Some(reason) = choice.and_then(|c| c.get("finish_reason")).and_then(Value::as_str) {
        out.push(ModelEvent::Finish(match reason {
            "stop" => FinishReason::Stop,
            "length" => FinishReason::Length,
            "content_filter" => FinishReason::ContentFilter,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            _ => FinishReason::Other,
        }));
    }
    // Sent last, with `choices: []`, when the request asked `stream_options.include_usage`.
    if let Some(usage) = v.get("usage").and_then(|raw| openai_usage(raw, "prompt", "completion")) {
        out.push(ModelEvent::Usage(usage));
    }
    Ok(())
}

/// OpenAI Responses: parts are keyed by item id (and content or summary index).
fn responses(kind: &str, v: &Value, full: bool, tool_called: &mut bool, out: &mut Vec<ModelEvent>) -> Result<(), MalformedEvent> {
    let s = |name: &str| v.get(name).and_then(Value::as_str);
    let item = || s("item_id").unwrap_or_default();
    let index = |name: &str| v.get(name).and_then(Value::as_u64).unwrap_or(0);
    let delta = |what: &str| match v.get("delta") {
        Some(Value::String(d)) => Ok(d.clone()),
        _ => Err(MalformedEvent(format!("{what} without a string delta"))),
    };
    match kind {
        "response.output_text.delta" => {
            let text = delta(kind)?;
            out.push(ModelEvent::Delta { kind: PartKind::Text, key: format!("{}:{}", item(), index("content_index")), text });
        }
        "response.completed" => {
            if full {
                responses_usage(v, out);
                out.push(ModelEvent::Finish(if *tool_called { FinishReason::ToolCalls } else { FinishReason::Stop }));
            }
            out.push(ModelEvent::Done);
        }
        "response.incomplete" => {
            let reason = v.pointer("/response/incomplete_details/reason").and_then(Value::as_str);
            if full {
                responses_usage(v, out);
                out.push(ModelEvent::Finish(match reason {
                    Some("max_output_tokens") => FinishReason::Length,
                    Some("content_filter") => FinishReason::ContentFilter,
                    _ => FinishReason::Other,
                }));
            }
            let message = v.pointer("/response/error/message").and_then(Value::as_str).or(reason).unwrap_or(kind);
            out.push(ModelEvent::Incomplete(message.to_owned()));
        }
        "response.failed" => {
            out.push(ModelEvent::Error(v.pointer("/response/error/message").and_then(Value::as_str).unwrap_or(kind).to_owned()))
        }
        _ if !full => {}
        "response.output_text.done" => out.push(ModelEvent::End { key: format!("{}:{}", item(), index("content_index")) }),
        "response.reasoning_summary_text.delta" => {
            let text = delta(kind)?;
            out.push(ModelEvent::Delta { kind: PartKind::Reasoning, key: format!("{}:s{}", item(), index("summary_index")), text });
        }
        "response.reasoning_summary_text.done" | "response.reasoning_summary_part.done" => {
            out.push(ModelEvent::End { key: format!("{}:s{}", item(), index("summary_index")) });
        }
        // Raw reasoning text (open-weight models served over the Responses API).
        "response.reasoning_text.delta" => {
            let text = delta(kind)?;
            out.push(ModelEvent::Delta { kind: PartKind::Reasoning, key: format!("{}:r{}", item(), index("content_index")), text });
        }
        "response.reasoning_text.done" => out.push(ModelEvent::End { key: format!("{}:r{}", item(), index("content_index")) }),
        "response.output_item.added" if v.pointer("/item/type").and_then(Value::as_str) == Some("function_call") => {
            let field = |name: &str| v.pointer(&format!("/item/{name}")).and_then(Value::as_str);
            let (Some(key), Some(call_id), Some(name)) = (field("id"), field("call_id"), field("name")) else {
                return Err(MalformedEvent(format!(
                    "a function_call item without id, call_id and name: {}",
                    truncate(&v.to_string(), 120)
                )));
            };
            *tool_called = true;
            out.push(ModelEvent::ToolStart { key: key.to_owned(), call_id: call_id.to_owned(), name: name.to_owned() });
            if let Some(json) = field("arguments").filter(|a| !a.is_empty()) {
                out.push(ModelEvent::ToolDelta { key: key.to_owned(), json: json.to_owned() });
            }
        }
        "response.function_call_arguments.delta" => {
            let json = delta(kind)?;
            out.push(ModelEvent::ToolDelta { key: item().to_owned(), json });
        }
        "response.function_call_arguments.done" => out.push(ModelEvent::End { key: item().to_owned() }),
        "response.output_item.done" if v.pointer("/item/type").and_then(Value::as_str) == Some("function_call") => {
            out.push(ModelEvent::End { key: v.pointer("/item/id").and_then(Value::as_str).unwrap_or_default().to_owned() });
        }
        _ => {}
    }
    Ok(())
}

impl Cursor {
    /// Takes the event's sequence number and, the first time one appears, the response's id
    /// (`response.created` carries it; background mode also `response.queued`).
    fn read(&mut self, v: &Value) {
        if let Some(n) = v.get("sequence_number").and_then(Value::as_u64) {
            self.sequence = Some(n);
        }
        if self.response_id.is_none() {
            self.response_id = v.pointer("/response/id").and_then(Value::as_str).map(str::to_owned);
        }
    }
}

fn responses_usage(v: &Value, out: &mut Vec<ModelEvent>) {
    if let Some(usage) = v.pointer("/response/usage").and_then(|raw| openai_usage(raw, "input", "output")) {
        out.push(ModelEvent::Usage(usage));
    }
}

/// OpenAI's usage object: chat names its counts `prompt_*`/`completion_*`, Responses
/// `input_*`/`output_*`; both count cached tokens in the input and reasoning in the output.
fn openai_usage(raw: &Value, input: &str, output: &str) -> Option<Usage> {
    if !raw.is_object() {
        return None; // chat sends `"usage": null` on every chunk but the last
    }
    let n = |p: String| raw.pointer(&p).and_then(Value::as_u64);
    Some(Usage::new(
        n(format!("/{input}_tokens")),
        n(format!("/{input}_tokens_details/cached_tokens")),
        None,
        n(format!("/{output}_tokens")),
        n(format!("/{output}_tokens_details/reasoning_tokens")),
        n("/total_tokens".to_owned()),
        raw.clone(),
    ))
}

/// Anthropic Messages: parts are keyed by content block index.
fn anthropic(
    kind: &str,
    v: &Value,
    full: bool,
    blocks: &mut Vec<(u64, AnthropicBlock)>,
    usage: &mut Map<String, Value>,
    out: &mut Vec<ModelEvent>,
) -> Result<(), MalformedEvent> {
    let index = || v.get("index").and_then(Value::as_u64).unwrap_or(0);
    let key = || index().to_string();
    match kind {
        "content_block_delta" => {
            let delta = |name: &str| v.pointer(&format!("/delta/{name}")).and_then(Value::as_str);
            match delta("type") {
                Some("text_delta") => {
                    let text = delta("text").ok_or_else(|| MalformedEvent("text_delta without text".into()))?;
                    if !text.is_empty() {
                        out.push(ModelEvent::Delta { kind: PartKind::Text, key: key(), text: text.to_owned() });
                    }
                }
                _ if !full => {}
                Some("thinking_delta") => {
                    let text = delta("thinking").ok_or_else(|| MalformedEvent("thinking_delta without thinking".into()))?;
                    if !text.is_empty() {
                        out.push(ModelEvent::Delta { kind: PartKind::Reasoning, key: key(), text: text.to_owned() });
                    }
                }
                Some("signature_delta") => {
                    let signature = delta("signature").ok_or_else(|| MalformedEvent("signature_delta without signature".into()))?;
                    out.push(ModelEvent::ReasoningSignature { key: key(), signature: signature.to_owned() });
                }
                Some("input_json_delta") => {
                    let json = delta("partial_json").ok_or_else(|| MalformedEvent("input_json_delta without partial_json".into()))?;
                    let of_other = blocks.iter().any(|&(i, b)| i == index() && b == AnthropicBlock::Other);
                    if !json.is_empty() && !of_other {
                        out.push(ModelEvent::ToolDelta { key: key(), json: json.to_owned() });
                    }
                }
                _ => {} // e.g. citations_delta
            }
        }
        "message_stop" => out.push(ModelEvent::Done),
        _ if !full => {}
        "message_start" => merge_anthropic_usage(v.pointer("/message/usage"), usage, out),
        "content_block_start" => {
            let block = v.get("content_block");
            let field = |name: &str| block.and_then(|b| b.get(name)).and_then(Value::as_str);
            let (kind, initial) = match field("type") {
                Some("text") => (AnthropicBlock::Text, field("text").map(|t| (PartKind::Text, t))),
                Some("thinking") => (AnthropicBlock::Reasoning, field("thinking").map(|t| (PartKind::Reasoning, t))),
                Some("redacted_thinking") => {
                    out.push(ModelEvent::RedactedReasoning { key: key(), data: field("data").unwrap_or_default().to_owned() });
                    (AnthropicBlock::Reasoning, None)
                }
                Some("tool_use") => {
                    let (Some(id), Some(name)) = (field("id"), field("name")) else {
                        return Err(MalformedEvent(format!("a tool_use block without id and name: {}", truncate(&v.to_string(), 120))));
                    };
                    out.push(ModelEvent::ToolStart { key: key(), call_id: id.to_owned(), name: name.to_owned() });
                    (AnthropicBlock::Tool, None)
                }
                _ => (AnthropicBlock::Other, None),
            };
            blocks.retain(|&(i, _)| i != index());
            blocks.push((index(), kind));
            if let Some((part, text)) = initial.filter(|(_, t)| !t.is_empty()) {
                out.push(ModelEvent::Delta { kind: part, key: key(), text: text.to_owned() });
            }
        }
        "content_block_stop" => out.push(ModelEvent::End { key: key() }),
        "message_delta" => {
            if let Some(reason) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                out.push(ModelEvent::Finish(match reason {
                    "end_turn" | "stop_sequence" | "pause_turn" => FinishReason::Stop,
                    "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
                    "tool_use" => FinishReason::ToolCalls,
                    "refusal" => FinishReason::ContentFilter,
                    _ => FinishReason::Other,
                }));
            }
            merge_anthropic_usage(v.get("usage"), usage, out);
        }
        _ => {}
    }
    Ok(())
}

/// Anthropic counts input without the cache (`input_tokens`) and the cache separately.
fn merge_anthropic_usage(update: Option<&Value>, usage: &mut Map<String, Value>, out: &mut Vec<ModelEvent>) {
    let Some(Value::Object(update)) = update else { return };
    for (k, v) in update {
        if !v.is_null() {
            usage.insert(k.clone(), v.clone());
        }
    }
    let n = |name: &str| usage.get(name).and_then(Value::as_u64);
    let (no_cache, read, write) = (n("input_tokens"), n("cache_read_input_tokens"), n("cache_creation_input_tokens"));
    let input = no_cache.map(|i| i + read.unwrap_or(0) + write.unwrap_or(0));
    out.push(ModelEvent::Usage(Usage::new(input, read, write, n("output_tokens"), None, None, Value::Object(usage.clone()))));
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

pub(super) fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
