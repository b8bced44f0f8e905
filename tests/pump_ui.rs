//! The pump in `ui` format (SPEC §9): upstream event sequences of the three model APIs, fed one
//! event at a time to the pure pump, give exactly these AI SDK UI message chunks.
//!
//! The sequences in `tests/fixtures/upstream/` are written in each API's streaming shapes as
//! documented and as the AI SDK's own provider fixtures record them (ids, `obfuscation`,
//! `sequence_number`, pings, a usage-only chunk with `choices: []`); they are not captures of a
//! live API. That the chunks build the right message in the real `ai` package is proven end to
//! end in `tests/e2e/pump.test.mjs`.

use rindle_streams::engine::pump::{Pump, PumpFailure, PumpStep, UpstreamFormat};
use rindle_streams::engine::wire::ui::Format;
use serde_json::{json, Value};

/// The events of an SSE body: `(event name, data)`.
fn sse_events(body: &str) -> Vec<(String, String)> {
    body.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut event = String::new();
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    event = name.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push(d);
                }
            }
            (event, data.join("\n"))
        })
        .collect()
}

/// Runs `body` through `pump`: every chunk it pushes (each push whole NDJSON lines) and how
/// it ended (`None`: still waiting).
fn run(mut pump: Pump, body: &str) -> (Vec<Value>, Option<PumpStep>) {
    let mut chunks = Vec::new();
    let mut end = None;
    for (event, data) in sse_events(body) {
        let step = pump.handle_event(&event, &data);
        let push = pump.take_push();
        assert!(push.is_empty() || push.ends_with('\n'), "a push ends at a line end: {push:?}");
        for line in push.lines() {
            let chunk: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert!(chunk["type"].is_string(), "{line}");
            chunks.push(chunk);
        }
        if step != PumpStep::Continue {
            end = Some(step);
            break;
        }
    }
    assert_well_formed(&chunks);
    (chunks, end)
}

fn ui(format: UpstreamFormat, body: &str) -> (Vec<Value>, Option<PumpStep>) {
    run(Pump::for_stream(Format::Ui, format, "msg-1"), body)
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/fixtures/upstream/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// The ordering rules the AI SDK's `processUIMessageStream` enforces (it throws on a delta for
/// a part that is not open), plus the pump's own: `start`, `start-step` first; nothing open at
/// `finish-step`; `finish` last.
fn assert_well_formed(chunks: &[Value]) {
    let types = types(chunks);
    if types.is_empty() {
        return;
    }
    assert_eq!(&types[..2.min(types.len())], &["start", "start-step"][..2.min(types.len())], "{types:?}");
    let mut open: Vec<(String, String)> = Vec::new();
    let mut tools: Vec<String> = Vec::new();
    for (c, t) in chunks.iter().zip(&types) {
        let s = |k: &str| c[k].as_str().unwrap_or_else(|| panic!("{k} in {c}")).to_owned();
        match *t {
            "text-start" | "reasoning-start" => {
                let kind = t.trim_end_matches("-start").to_owned();
                assert!(!open.iter().any(|(_, id)| *id == s("id")), "{c}: id reused while open");
                open.push((kind, s("id")));
            }
            "text-delta" | "reasoning-delta" | "text-end" | "reasoning-end" => {
                let kind = t.split('-').next().unwrap();
                let at = open.iter().position(|(k, id)| k == kind && *id == s("id")).unwrap_or_else(|| panic!("{c}: part not open"));
                if t.ends_with("-end") {
                    open.remove(at);
                }
            }
            "tool-input-start" => tools.push(s("toolCallId")),
            "tool-input-delta" => assert!(tools.contains(&s("toolCallId")), "{c}: tool call not started"),
            "tool-input-available" | "tool-input-error" => {
                let id = s("toolCallId");
                assert!(tools.contains(&id), "{c}: tool call not started");
                tools.retain(|t| *t != id);
            }
            "finish-step" => assert!(open.is_empty() && tools.is_empty(), "open at finish-step: {open:?} {tools:?}"),
            "finish" => assert_eq!(types.last(), Some(&"finish"), "finish is last"),
            _ => {}
        }
    }
}

fn types(chunks: &[Value]) -> Vec<&str> {
    chunks.iter().map(|c| c["type"].as_str().unwrap()).collect()
}

/// The text the concatenated deltas of `kind` parts give.
fn deltas(chunks: &[Value], kind: &str) -> String {
    chunks.iter().filter(|c| c["type"] == format!("{kind}-delta")).map(|c| c["delta"].as_str().unwrap()).collect()
}

#[test]
fn anthropic_thinking_text_and_a_tool_call_become_reasoning_text_and_tool_chunks() {
    let (chunks, end) = ui(UpstreamFormat::Anthropic, &fixture("anthropic-thinking-tool.sse"));
    assert_eq!(end, Some(PumpStep::Complete));
    let usage = json!({
        "inputTokens": 600, "inputTokenDetails": {"noCacheTokens": 472, "cacheReadTokens": 128, "cacheWriteTokens": 0},
        "outputTokens": 89, "outputTokenDetails": {"textTokens": 89}, "totalTokens": 689,
        "raw": {"input_tokens": 472, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 128, "output_tokens": 89, "service_tier": "standard"},
    });
    assert_eq!(
        chunks,
        vec![
            json!({"type": "start", "messageId": "msg-1"}),
            json!({"type": "start-step"}),
            json!({"type": "reasoning-start", "id": "reasoning-0"}),
            json!({"type": "reasoning-delta", "id": "reasoning-0", "delta": "The user wants the weather in 東京"}),
            json!({"type": "reasoning-delta", "id": "reasoning-0", "delta": ". I should call get_weather 🌦️."}),
            json!({"type": "reasoning-delta", "id": "reasoning-0", "delta": "", "providerMetadata": {"anthropic": {"signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}}),
            json!({"type": "reasoning-end", "id": "reasoning-0"}),
            json!({"type": "text-start", "id": "text-1"}),
            json!({"type": "text-delta", "id": "text-1", "delta": "Let me check 👋🏽"}),
            json!({"type": "text-delta", "id": "text-1", "delta": " the \"forecast\"\n"}),
            json!({"type": "text-end", "id": "text-1"}),
            json!({"type": "tool-input-start", "toolCallId": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "toolName": "get_weather"}),
            json!({"type": "tool-input-delta", "toolCallId": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "inputTextDelta": "{\"location\": \"Tok"}),
            json!({"type": "tool-input-delta", "toolCallId": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "inputTextDelta": "yo 東京\", \"unit\": \"c"}),
            json!({"type": "tool-input-delta", "toolCallId": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "inputTextDelta": "elsius\"}"}),
            json!({"type": "tool-input-available", "toolCallId": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "toolName": "get_weather", "input": {"location": "Tokyo 東京", "unit": "celsius"}}),
            json!({"type": "finish-step"}),
            json!({"type": "finish", "finishReason": "tool-calls", "messageMetadata": {"usage": usage, "finishReason": "tool-calls"}}),
        ]
    );
}

#[test]
fn openai_responses_reasoning_summaries_text_and_a_function_call() {
    let (chunks, end) = ui(UpstreamFormat::OpenAiResponses, &fixture("openai-responses-reasoning-tool.sse"));
    assert_eq!(end, Some(PumpStep::Complete));
    assert_eq!(
        types(&chunks),
        [
            "start",
            "start-step",
            "reasoning-start",
            "reasoning-delta",
            "reasoning-delta",
            "reasoning-end",
            "reasoning-start",
            "reasoning-delta",
            "reasoning-end",
            "text-start",
            "text-delta",
            "text-delta",
            "text-end",
            "tool-input-start",
            "tool-input-delta",
            "tool-input-delta",
            "tool-input-delta",
            "tool-input-available",
            "finish-step",
            "finish",
        ]
    );
    // One reasoning part per summary part, as the AI SDK's own OpenAI provider makes them.
    assert_eq!(chunks[2], json!({"type": "reasoning-start", "id": "reasoning-0"}));
    assert_eq!(chunks[6], json!({"type": "reasoning-start", "id": "reasoning-1"}));
    assert_eq!(deltas(&chunks, "reasoning"), "**Checking the weather**\n\nThe user asks about Paris 🇫🇷.**Calling the tool**");
    assert_eq!(chunks[9], json!({"type": "text-start", "id": "text-2"}));
    assert_eq!(deltas(&chunks, "text"), "Checking Paris (パリ)…");
    assert_eq!(chunks[13], json!({"type": "tool-input-start", "toolCallId": "call_ZPbxvQdVeX5vPSVzDYUtAPD1", "toolName": "get_weather"}));
    assert_eq!(
        chunks[17],
        json!({"type": "tool-input-available", "toolCallId": "call_ZPbxvQdVeX5vPSVzDYUtAPD1", "toolName": "get_weather", "input": {"city": "Paris"}})
    );
    assert_eq!(
        chunks[19],
        json!({"type": "finish", "finishReason": "tool-calls", "messageMetadata": {"finishReason": "tool-calls", "usage": {
            "inputTokens": 81, "inputTokenDetails": {"noCacheTokens": 17, "cacheReadTokens": 64},
            "outputTokens": 148, "outputTokenDetails": {"textTokens": 20, "reasoningTokens": 128}, "totalTokens": 229,
            "raw": {"input_tokens": 81, "input_tokens_details": {"cached_tokens": 64}, "output_tokens": 148, "output_tokens_details": {"reasoning_tokens": 128}, "total_tokens": 229},
        }}})
    );
}

#[test]
fn openai_chat_text_then_two_parallel_tool_calls_with_usage() {
    let (chunks, end) = ui(UpstreamFormat::OpenAiChat, &fixture("openai-chat-tool-usage.sse"));
    assert_eq!(end, Some(PumpStep::Complete));
    assert_eq!(
        chunks,
        vec![
            json!({"type": "start", "messageId": "msg-1"}),
            json!({"type": "start-step"}),
            json!({"type": "text-start", "id": "text-0"}),
            json!({"type": "text-delta", "id": "text-0", "delta": "Two cities, "}),
            json!({"type": "text-delta", "id": "text-0", "delta": "two calls 🧑🏽‍🚀"}),
            json!({"type": "tool-input-start", "toolCallId": "call_DdmO9pD3xa9XTPNJ32zg2hcA", "toolName": "get_weather"}),
            json!({"type": "tool-input-delta", "toolCallId": "call_DdmO9pD3xa9XTPNJ32zg2hcA", "inputTextDelta": "{\"ci"}),
            json!({"type": "tool-input-delta", "toolCallId": "call_DdmO9pD3xa9XTPNJ32zg2hcA", "inputTextDelta": "ty\": \"Seoul 서울\"}"}),
            json!({"type": "tool-input-start", "toolCallId": "call_Q4w0x1t0l3c8x2pK3LhFJ9sE", "toolName": "get_weather"}),
            json!({"type": "tool-input-delta", "toolCallId": "call_Q4w0x1t0l3c8x2pK3LhFJ9sE", "inputTextDelta": "{\"city\": \"Oslo\"}"}),
            // The finish reason ends everything still open, in the order it opened.
            json!({"type": "text-end", "id": "text-0"}),
            json!({"type": "tool-input-available", "toolCallId": "call_DdmO9pD3xa9XTPNJ32zg2hcA", "toolName": "get_weather", "input": {"city": "Seoul 서울"}}),
            json!({"type": "tool-input-available", "toolCallId": "call_Q4w0x1t0l3c8x2pK3LhFJ9sE", "toolName": "get_weather", "input": {"city": "Oslo"}}),
            json!({"type": "finish-step"}),
            json!({"type": "finish", "finishReason": "tool-calls", "messageMetadata": {"finishReason": "tool-calls", "usage": {
                "inputTokens": 85, "inputTokenDetails": {"noCacheTokens": 85, "cacheReadTokens": 0},
                "outputTokens": 52, "outputTokenDetails": {"textTokens": 52, "reasoningTokens": 0}, "totalTokens": 137,
                "raw": {"prompt_tokens": 85, "completion_tokens": 52, "total_tokens": 137,
                    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
            }}}),
        ]
    );
}

#[test]
fn openai_compatible_chat_reasoning_content_ends_when_the_answer_starts() {
    let (chunks, end) = ui(UpstreamFormat::OpenAiChat, &fixture("openai-chat-reasoning.sse"));
    assert_eq!(end, Some(PumpStep::Complete));
    assert_eq!(
        types(&chunks),
        [
            "start",
            "start-step",
            "reasoning-start",
            "reasoning-delta",
            "reasoning-delta",
            "reasoning-end",
            "text-start",
            "text-delta",
            "text-delta",
            "text-end",
            "finish-step",
            "finish"
        ]
    );
    assert_eq!(deltas(&chunks, "reasoning"), "9.11 vs 9.9: compare tenths 🤔");
    assert_eq!(deltas(&chunks, "text"), "9.9 is larger.");
    let finish = chunks.last().unwrap();
    assert_eq!(finish["finishReason"], "stop");
    assert_eq!(finish["messageMetadata"]["usage"]["outputTokenDetails"], json!({"textTokens": 6, "reasoningTokens": 24}));
}

#[test]
fn a_text_pump_fed_the_same_sequences_pushes_only_the_answer_text() {
    for (format, name, text) in [
        (UpstreamFormat::Anthropic, "anthropic-thinking-tool.sse", "Let me check 👋🏽 the \"forecast\"\n"),
        (UpstreamFormat::OpenAiResponses, "openai-responses-reasoning-tool.sse", "Checking Paris (パリ)…"),
        (UpstreamFormat::OpenAiChat, "openai-chat-tool-usage.sse", "Two cities, two calls 🧑🏽‍🚀"),
        (UpstreamFormat::OpenAiChat, "openai-chat-reasoning.sse", "9.9 is larger."),
    ] {
        let mut pump = Pump::for_stream(Format::Text, format, "msg-1");
        let mut pushed = String::new();
        let mut end = None;
        for (event, data) in sse_events(&fixture(name)) {
            let step = pump.handle_event(&event, &data);
            pushed.push_str(&pump.take_push());
            if step != PumpStep::Continue {
                end = Some(step);
                break;
            }
        }
        assert_eq!((pushed.as_str(), end), (text, Some(PumpStep::Complete)), "{name}");
    }
}

#[test]
fn an_upstream_error_fails_the_pump_after_the_chunks_before_it() {
    let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\n\n\
                event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hal\"}}\n\n\
                event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let (chunks, end) = ui(UpstreamFormat::Anthropic, body);
    assert_eq!(end, Some(PumpStep::Failed(PumpFailure::Upstream("Overloaded".into()))));
    // No finish: the stream fails, and its `/ui` readers get the `error` ending.
    assert_eq!(types(&chunks), ["start", "start-step", "text-start", "text-delta"]);
}

#[test]
fn an_error_before_any_output_writes_nothing() {
    let (chunks, end) = ui(UpstreamFormat::OpenAiChat, "data: {\"error\":{\"message\":\"rate limited\"}}\n\n");
    assert_eq!((chunks, end), (vec![], Some(PumpStep::Failed(PumpFailure::Upstream("rate limited".into())))));
}

#[test]
fn tool_input_that_is_not_json_is_a_tool_input_error_and_no_input_is_an_empty_object() {
    let chunk = |delta: Value| format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]}));
    let body = [
        chunk(json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": "}}]})),
        chunk(json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "now", "arguments": ""}}]})),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let (chunks, end) = ui(UpstreamFormat::OpenAiChat, &body);
    assert_eq!(end, Some(PumpStep::Complete));
    let settled: Vec<&Value> = chunks.iter().filter(|c| c["type"] == "tool-input-error" || c["type"] == "tool-input-available").collect();
    assert_eq!(settled[0]["type"], "tool-input-error");
    assert_eq!(settled[0]["input"], "{\"q\": ");
    assert!(settled[0]["errorText"].as_str().unwrap().starts_with("the tool call's input is not valid JSON"), "{}", settled[0]);
    assert_eq!(*settled[1], json!({"type": "tool-input-available", "toolCallId": "call_b", "toolName": "now", "input": {}}));
    // No finish reason, no usage: the finish says only what is known.
    assert_eq!(*chunks.last().unwrap(), json!({"type": "finish"}));
}

#[test]
fn tool_input_for_a_call_that_never_started_is_malformed() {
    let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n";
    let (_, end) = ui(UpstreamFormat::OpenAiChat, body);
    assert!(matches!(end, Some(PumpStep::Failed(PumpFailure::Malformed(_)))), "{end:?}");

    let body = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n";
    let (_, end) = ui(UpstreamFormat::Anthropic, body);
    assert!(matches!(end, Some(PumpStep::Failed(PumpFailure::Malformed(_)))), "{end:?}");
}

#[test]
fn a_responses_answer_cut_by_the_token_limit_finishes_with_length() {
    let body = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Once upon\"}\n\n\
                event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"usage\":{\"input_tokens\":3,\"output_tokens\":16,\"total_tokens\":19}}}\n\n";
    let (chunks, end) = ui(UpstreamFormat::OpenAiResponses, body);
    assert_eq!(end, Some(PumpStep::Complete));
    let finish = chunks.last().unwrap();
    assert_eq!(finish["finishReason"], "length");
    assert_eq!(finish["messageMetadata"]["usage"]["outputTokens"], 16);
    assert_eq!(chunks[chunks.len() - 3], json!({"type": "text-end", "id": "text-0"}));
}

#[test]
fn anthropic_redacted_thinking_and_server_tool_blocks() {
    let ev = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap());
    let body = [
        ev(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}})),
        ev(json!({"type": "content_block_stop", "index": 0})),
        // A server tool (web search) has no part in the UI message: its input is not a tool call's.
        ev(json!({"type": "content_block_start", "index": 1, "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}})),
        ev(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"x\"}"}})),
        ev(json!({"type": "content_block_stop", "index": 1})),
        ev(json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}})),
        ev(json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Found it."}})),
        ev(json!({"type": "content_block_stop", "index": 2})),
        ev(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}})),
        ev(json!({"type": "message_stop"})),
    ]
    .concat();
    let (chunks, end) = ui(UpstreamFormat::Anthropic, &body);
    assert_eq!(end, Some(PumpStep::Complete));
    assert_eq!(
        chunks[2],
        json!({"type": "reasoning-start", "id": "reasoning-0", "providerMetadata": {"anthropic": {"redactedData": "EmwKAhgBEgy3va3pzix"}}})
    );
    assert_eq!(chunks[3], json!({"type": "reasoning-end", "id": "reasoning-0"}));
    assert_eq!(chunks[4], json!({"type": "text-start", "id": "text-1"}));
    assert!(!chunks.iter().any(|c| c["type"].as_str().unwrap().starts_with("tool-")));
    assert_eq!(chunks.last().unwrap()["finishReason"], "stop");
}

#[test]
fn lines_stay_lines_whatever_the_text_holds() {
    // Line and paragraph separators, CR, NUL, escaped in the upstream's JSON.
    let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\\r\\nb\\u2028c\\u0000d\"}}]}\n\ndata: [DONE]\n\n";
    let mut pump = Pump::ui(UpstreamFormat::OpenAiChat, "m");
    let mut pushed = String::new();
    for (event, data) in sse_events(body) {
        pump.handle_event(&event, &data);
        pushed.push_str(&pump.take_push());
    }
    for line in pushed.split_terminator('\n') {
        assert!(!line.contains('\r'), "{line:?}");
        serde_json::from_str::<Value>(line).unwrap();
    }
    assert_eq!(pushed.matches('\n').count(), 7, "{pushed}");
}
