//! The pump in background mode (issue 35 item 7, SPEC §10): an `openai-responses` pump whose
//! response runs on at the provider re-attaches to it, after a lost connection or an object
//! reset, and never splices: the replay is checked against the text already written before
//! anything is pushed past it.
//!
//! The upstream here is a generated OpenAI Responses event stream in the shapes the mock model
//! server (mock/model-server.mjs) and the API send, with `sequence_number` on every event. A
//! "stream" is simulated as the shell keeps it: the text pushed, and a durable length that
//! advances at checkpoints. A reset keeps only the durable text, as rehydration from D1 does.

use rindle_streams::engine::host::time::Millis;
use rindle_streams::engine::pump::background::{MAX_REATTACHES, RECORD_VERSION, REPLAY_OVERLAP_UNITS};
use rindle_streams::engine::pump::{
    BackgroundRecord, Build, CallMethod, Interruption, PumpFailure, PumpRequest, PumpSecrets, PumpStep, PumpUpstreams, Reattach,
    ReattachNext, Relay, Retrieved,
};
use rindle_streams::engine::text::utf16::{self, Offset};
use rindle_streams::engine::wire::ui::Format;
use serde_json::{json, Value};

const ID: &str = "resp_0123456789abcdef";
const ENDPOINT: &str = "http://127.0.0.1:8788/v1/responses";

/// An SSE event: `(event name, data)`.
type Event = (String, String);

/// Deterministic awkward tokens (surrogate pairs, ZWJ sequences, combining marks, CJK).
fn tokens(seed: u64, n: usize) -> Vec<String> {
    const PALETTE: &[&str] = &[" stream", " 👩", "\u{200d}💻", " e\u{301}", " 流式", " 𠮷", " 🇯", "🇵", " \"q\"", "\n", " 👍🏽", " durable"];
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            PALETTE[(x >> 33) as usize % PALETTE.len()].to_owned()
        })
        .collect()
}

/// A background response's events, numbered from 0: optional reasoning summary, the message's
/// text deltas, an optional function call whose arguments stream in pieces, `response.completed`.
fn responses_events(reasoning: &[String], text: &[String], tool: &[&str]) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    let mut ev = |kind: &str, fields: Value| {
        let mut data = json!({"type": kind, "sequence_number": out.len()});
        data.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        out.push((kind.to_owned(), data.to_string()));
    };
    let response = |status: &str| json!({"id": ID, "object": "response", "status": status, "background": true, "output": []});
    ev("response.created", json!({"response": response("queued")}));
    ev("response.queued", json!({"response": response("queued")}));
    ev("response.in_progress", json!({"response": response("in_progress")}));
    if !reasoning.is_empty() {
        let at = json!({"item_id": "rs_1", "output_index": 0, "summary_index": 0});
        ev("response.output_item.added", json!({"output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": []}}));
        ev(
            "response.reasoning_summary_part.added",
            json!({"item_id": "rs_1", "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
        );
        for r in reasoning {
            ev("response.reasoning_summary_text.delta", json!({"delta": r, "item_id": "rs_1", "output_index": 0, "summary_index": 0}));
        }
        ev("response.reasoning_summary_text.done", at.clone());
        ev("response.reasoning_summary_part.done", at);
        ev("response.output_item.done", json!({"output_index": 0, "item": {"id": "rs_1", "type": "reasoning"}}));
    }
    let at = json!({"item_id": "msg_1", "output_index": 1, "content_index": 0});
    ev(
        "response.output_item.added",
        json!({"output_index": 1, "item": {"id": "msg_1", "type": "message", "status": "in_progress", "content": []}}),
    );
    ev(
        "response.content_part.added",
        json!({"item_id": "msg_1", "output_index": 1, "content_index": 0, "part": {"type": "output_text", "text": ""}}),
    );
    for t in text {
        ev("response.output_text.delta", json!({"delta": t, "item_id": "msg_1", "output_index": 1, "content_index": 0}));
    }
    ev("response.output_text.done", at.clone());
    ev("response.content_part.done", at);
    ev("response.output_item.done", json!({"output_index": 1, "item": {"id": "msg_1", "type": "message", "status": "completed"}}));
    if !tool.is_empty() {
        let item = json!({"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": ""});
        ev("response.output_item.added", json!({"output_index": 2, "item": item}));
        for piece in tool {
            ev("response.function_call_arguments.delta", json!({"item_id": "fc_1", "output_index": 2, "delta": piece}));
        }
        ev("response.function_call_arguments.done", json!({"item_id": "fc_1", "output_index": 2}));
        ev(
            "response.output_item.done",
            json!({"output_index": 2, "item": {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_weather"}}),
        );
    }
    let usage = json!({"input_tokens": 12, "output_tokens": 40, "total_tokens": 52});
    ev("response.completed", json!({"response": {"id": ID, "status": "completed", "usage": usage}}));
    out
}

fn request(json: &str) -> PumpRequest {
    let upstreams = PumpUpstreams::parse("http://x http://127.0.0.1:8788", Build::Production).unwrap();
    PumpRequest::parse(json.as_bytes(), &upstreams, &PumpSecrets::parse("MOCK_KEY").unwrap()).unwrap()
}

fn background_request() -> PumpRequest {
    request(&format!(
        r#"{{"format":"openai-responses","url":"{ENDPOINT}?tag=t&tokens=9","auth":{{"secret":"MOCK_KEY"}},"body":{{"stream":true,"background":true}}}}"#
    ))
}

/// The stream as the shell keeps it: the text pushed, the durable length, the stored record.
#[derive(Debug, Default, Clone)]
struct Sim {
    text: String,
    durable: Offset,
    record: Option<BackgroundRecord>,
}

impl Sim {
    fn seq(&self) -> Offset {
        utf16::len(&self.text)
    }

    /// A checkpoint commits everything produced.
    fn checkpoint(&mut self) {
        self.durable = self.seq();
    }

    /// What rehydration from D1 keeps: the durable text.
    fn reset(&mut self) {
        self.text = utf16::slice(&self.text, Offset(0), self.durable).to_owned();
    }

    /// One event through `relay` as the shell performs it; a checkpoint after it when `checkpoint`.
    fn feed(&mut self, relay: &mut Relay, (event, data): &Event, checkpoint: bool) -> PumpStep {
        let step = relay.handle_event(event, data);
        self.text.push_str(&relay.take_push());
        if checkpoint {
            self.checkpoint();
        }
        if let Some(record) = relay.poll_record(self.durable) {
            self.record = Some(record);
        }
        step
    }

    /// Feeds `events` (checkpointing after every `every`-th), stopping at the first end.
    fn run(&mut self, relay: &mut Relay, events: &[Event], every: usize) -> Option<PumpStep> {
        for (i, event) in events.iter().enumerate() {
            let step = self.feed(relay, event, (i + 1) % every == 0);
            if step != PumpStep::Continue {
                return Some(step);
            }
        }
        None
    }
}

/// A background pump into a new stream of `format`, fed `events` (checkpointing after every
/// `every`-th) without reaching their end.
fn pumped(format: Format, events: &[Event], every: usize) -> (Sim, Relay) {
    let mut sim = Sim::default();
    let mut relay = Relay::new(&background_request(), format, "msg-1", Offset(0));
    assert_eq!(sim.run(&mut relay, events, every), None, "the events end before the response does");
    (sim, relay)
}

/// The events a re-attach after `mark.after` gets.
fn after(events: &[Event], mark: Option<u64>) -> &[Event] {
    &events[mark.map_or(0, |n| n as usize + 1)..]
}

fn relay_of(next: ReattachNext) -> Relay {
    match next {
        ReattachNext::Relay(relay) => relay,
        other => panic!("expected a relay, got {other:?}"),
    }
}

/// What an uninterrupted pump writes.
fn uninterrupted(format: Format, events: &[Event]) -> String {
    let mut sim = Sim::default();
    let mut relay = Relay::new(&background_request(), format, "msg-1", Offset(0));
    assert_eq!(sim.run(&mut relay, events, 1), Some(PumpStep::Complete));
    sim.text
}

fn awkward_answer() -> Vec<Event> {
    responses_events(&tokens(7, 12), &tokens(3, 90), &["{\"city\":", "\"東京\",", "\"days\":3}"])
}

// ---------------------------------------------------------------------------------------
// What is stored

#[test]
fn a_background_pump_stores_its_response_id_endpoint_and_secret_name_once_the_upstream_names_it() {
    let events = responses_events(&[], &tokens(1, 5), &[]);
    let mut sim = Sim::default();
    let mut relay = Relay::new(&background_request(), Format::Text, "msg-1", Offset(0));
    assert!(relay.background());
    assert_eq!(relay.poll_record(Offset(0)), None, "no record before the upstream named its response");
    assert_eq!(relay.cancel_call(), None);
    sim.feed(&mut relay, &events[0], false);
    let record = sim.record.clone().expect("a record once response.created named the id");
    assert_eq!(record.version, RECORD_VERSION);
    assert_eq!(record.endpoint, ENDPOINT, "the endpoint without its query (which may carry a key or options)");
    assert_eq!(record.secret.as_deref(), Some("MOCK_KEY"), "the secret's NAME");
    assert_eq!(record.response_id, ID);
    // No text yet: the replay may skip the events before it (here response.created).
    assert_eq!((record.base, record.mark.after, record.mark.offset), (Offset(0), Some(0), Offset(0)));
    assert_eq!(relay.response_id(), Some(ID));
    let cancel = relay.cancel_call().unwrap();
    assert_eq!(
        (cancel.method, cancel.url.as_str(), cancel.secret.as_deref()),
        (CallMethod::Post, &*format!("{ENDPOINT}/{ID}/cancel"), Some("MOCK_KEY"))
    );
    assert_eq!(cancel.credential_header("sk-1"), ("authorization", "Bearer sk-1".to_owned()));
    // Nothing new, nothing to store.
    sim.feed(&mut relay, &events[1], false);
    assert_eq!(relay.poll_record(sim.durable), None);

    // The stored shape round-trips, and names no value of any secret.
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(
        json.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["base", "endpoint", "mark", "responseId", "secret", "version"],
        "{json}"
    );
    assert_eq!(json["mark"].as_object().unwrap().keys().collect::<Vec<_>>(), ["after", "offset", "pump"]);
    assert_eq!(serde_json::from_value::<BackgroundRecord>(json).unwrap(), record);
}

#[test]
fn other_pumps_store_nothing_and_cancel_nothing_upstream() {
    for json in [
        format!(r#"{{"format":"openai-responses","url":"{ENDPOINT}","body":{{"stream":true}}}}"#),
        format!(r#"{{"format":"openai-responses","url":"{ENDPOINT}","body":{{"stream":true,"background":false}}}}"#),
        r#"{"format":"anthropic","url":"http://x/v1/messages","body":{"stream":true,"background":true}}"#.to_owned(),
        r#"{"format":"openai-chat","url":"http://x/v1/chat/completions","body":{"stream":true,"background":true}}"#.to_owned(),
    ] {
        let mut relay = Relay::new(&request(&json), Format::Text, "msg-1", Offset(0));
        assert!(!relay.background(), "{json}");
        for (event, data) in responses_events(&[], &tokens(2, 3), &[]) {
            relay.handle_event(&event, &data);
        }
        assert_eq!(relay.poll_record(Offset(1000)), None, "{json}");
        assert_eq!(relay.cancel_call(), None);
        assert!(relay.reattach().is_err(), "only a background pump re-attaches");
    }
}

#[test]
fn the_stored_mark_is_the_last_event_at_least_the_overlap_below_the_durable_length() {
    let events = responses_events(&[], &tokens(5, 200), &[]);
    let mut sim = Sim::default();
    let mut relay = Relay::new(&background_request(), Format::Text, "msg-1", Offset(0));
    // Event boundaries: the stream offset just past each event's text.
    let mut ends = Vec::new();
    let mut marks_seen = 0;
    for (i, event) in events.iter().enumerate() {
        let before = sim.record.clone();
        sim.feed(&mut relay, event, i % 9 == 8);
        ends.push(sim.seq());
        let record = sim.record.clone().unwrap();
        if before.as_ref() != Some(&record) {
            marks_seen += 1;
        }
        let target = sim.durable.saturating_sub(REPLAY_OVERLAP_UNITS);
        match record.mark.after {
            None => assert!(ends.iter().all(|&end| end > target || end == Offset(0)), "a later event was due at {i}"),
            Some(n) => {
                let n = n as usize;
                assert_eq!(record.mark.offset, ends[n], "the mark's offset is just past event {n}'s text");
                assert!(record.mark.offset <= target, "the replay overlaps at least {REPLAY_OVERLAP_UNITS} units");
                assert!(ends[n + 1..].iter().all(|&end| end > target), "no later event qualified at {i}");
            }
        }
    }
    assert!(marks_seen > 5, "the mark moved with the checkpoints ({marks_seen} records)");
}

// ---------------------------------------------------------------------------------------
// Re-attach after a reset

#[test]
fn after_a_reset_at_any_event_and_checkpoint_cadence_the_answer_is_the_uninterrupted_one() {
    for format in [Format::Text, Format::Ui] {
        let events = awkward_answer();
        let whole = uninterrupted(format, &events);
        for every in [1, 4, 11] {
            for cut in 1..events.len() {
                let mut sim = Sim::default();
                let mut relay = Relay::new(&background_request(), format, "msg-1", Offset(0));
                assert_eq!(sim.run(&mut relay, &events[..cut], every), None);
                sim.reset();
                let record = sim.record.clone().unwrap();
                let reattach = Reattach::after_reset(record.clone(), Offset(0), &sim.text).unwrap();
                let starting_after = record.mark.after.map(|n| format!("&starting_after={n}")).unwrap_or_default();
                assert_eq!(reattach.call().url, format!("{ENDPOINT}/{ID}?stream=true{starting_after}"));
                assert_eq!((reattach.call().method, reattach.call().secret.as_deref()), (CallMethod::Get, Some("MOCK_KEY")));
                let mut relay = relay_of(reattach.handle_answer(200));
                let durable = sim.durable;
                let end = sim.run(&mut relay, after(&events, record.mark.after), every);
                let case = format!("{format:?}, checkpoint every {every}, reset after {cut} events (durable {durable})");
                assert_eq!(end, Some(PumpStep::Complete), "{case}");
                assert_eq!(sim.text, whole, "{case}: the durable text then the replay past it is the answer");
            }
        }
    }
}

#[test]
fn two_resets_in_a_row_one_during_the_replay_still_give_the_uninterrupted_answer() {
    let events = awkward_answer();
    for format in [Format::Text, Format::Ui] {
        let whole = uninterrupted(format, &events);
        for (first, second) in [(20, 5), (40, 1), (60, 30), (100, 2)] {
            let (mut sim, _) = pumped(format, &events[..first], 3);
            sim.reset();
            let record = sim.record.clone().unwrap();
            let mut relay = relay_of(Reattach::after_reset(record.clone(), Offset(0), &sim.text).unwrap().handle_answer(200));
            let replay = after(&events, record.mark.after);
            sim.run(&mut relay, &replay[..second.min(replay.len())], 3);
            sim.reset();
            let record = sim.record.clone().unwrap();
            let mut relay = relay_of(Reattach::after_reset(record.clone(), Offset(0), &sim.text).unwrap().handle_answer(200));
            assert_eq!(sim.run(&mut relay, after(&events, record.mark.after), 3), Some(PumpStep::Complete));
            assert_eq!(sim.text, whole, "{format:?}: resets after {first}, then {second} replayed events");
        }
    }
}

#[test]
fn nothing_is_pushed_until_the_replay_has_reproduced_the_durable_text() {
    let events = responses_events(&[], &tokens(9, 120), &[]);
    let (mut sim, _) = pumped(Format::Text, &events[..80], 10);
    sim.reset();
    let record = sim.record.clone().unwrap();
    assert!(record.mark.after.is_some() && record.mark.offset + REPLAY_OVERLAP_UNITS <= sim.durable);
    let mut relay = relay_of(Reattach::after_reset(record.clone(), Offset(0), &sim.text).unwrap().handle_answer(200));
    let mut pushed_at = Vec::new();
    for (event, data) in after(&events, record.mark.after) {
        let seq = sim.seq();
        relay.handle_event(event, data);
        let push = relay.take_push();
        if !push.is_empty() {
            pushed_at.push(seq);
        }
        sim.text.push_str(&push);
    }
    assert_eq!(pushed_at.first(), Some(&sim.durable), "the first push starts exactly at the durable length");
}

#[test]
fn a_replay_that_differs_from_the_durable_text_is_interrupted_at_the_first_difference_and_never_spliced() {
    let events = responses_events(&[], &tokens(11, 100), &[]);
    let (mut sim, _) = pumped(Format::Text, &events[..90], 7);
    sim.reset();
    let record = sim.record.clone().unwrap();
    let after_mark = record.mark.after.unwrap() as usize;
    // Perturb one delta inside the overlap (after the mark, below the durable length).
    let mut replay = events[after_mark + 1..].to_vec();
    let (i, offset) = {
        let mut at = record.mark.offset;
        let mut found = None;
        for (i, (_, data)) in replay.iter().enumerate() {
            let v: Value = serde_json::from_str(data).unwrap();
            if let Some(delta) = v["delta"].as_str() {
                if at + utf16::len(delta) < sim.durable && at > record.mark.offset {
                    found = Some((i, at));
                    break;
                }
                at += utf16::len(delta);
            }
        }
        found.expect("a delta inside the overlap")
    };
    let mut v: Value = serde_json::from_str(&replay[i].1).unwrap();
    v["delta"] = json!(format!("≠{}", v["delta"].as_str().unwrap()));
    replay[i].1 = v.to_string();

    let mut relay = relay_of(Reattach::after_reset(record, Offset(0), &sim.text).unwrap().handle_answer(200));
    let durable_text = sim.text.clone();
    let end = sim.run(&mut relay, &replay, 1000);
    assert_eq!(end, Some(PumpStep::Interrupted(Interruption::ReplayDiffers { at: offset })));
    assert_eq!(sim.text, durable_text, "nothing was pushed past the durable text");
    assert_eq!(
        Interruption::ReplayDiffers { at: offset }.to_string(),
        format!("re-attaching the pump: the replay differs from the text already written at offset {offset} (not spliced)")
    );
}

#[test]
fn a_replay_with_a_gap_or_that_ends_short_is_interrupted() {
    let events = responses_events(&[], &tokens(13, 60), &[]);
    let (mut sim, _) = pumped(Format::Text, &events[..50], 5);
    sim.reset();
    let record = sim.record.clone().unwrap();
    let mark = record.mark.after;
    let reattach = || relay_of(Reattach::after_reset(record.clone(), Offset(0), &sim.text).unwrap().handle_answer(200));

    // One event missing from the replay.
    let mut gapped = after(&events, mark).to_vec();
    gapped.remove(1);
    let first = mark.map_or(0, |n| n + 1);
    let end = sim.clone().run(&mut reattach(), &gapped, 1000);
    assert_eq!(end, Some(PumpStep::Interrupted(Interruption::ReplaySkipped { after: Some(first), got: Some(first + 2) })));

    // The response completes before the durable text was reproduced.
    let short = sim.clone();
    let mut relay = reattach();
    let mut completed = after(&events, mark)[..2].to_vec();
    let completed_seq = first + 2;
    completed.push((
        "response.completed".into(),
        json!({"type": "response.completed", "sequence_number": completed_seq, "response": {"id": ID}}).to_string(),
    ));
    assert!(matches!(sim.clone().run(&mut relay, &completed, 1000), Some(PumpStep::Interrupted(Interruption::ReplayShort { .. }))));
    assert_eq!(short.text, sim.text, "nothing pushed");
}

#[test]
fn a_record_that_cannot_be_checked_against_the_durable_text_is_interrupted() {
    let events = responses_events(&[], &tokens(17, 120), &[]);
    let (mut sim, _) = pumped(Format::Text, &events[..100], 5);
    sim.reset();
    let record = sim.record.clone().unwrap();
    let mark = record.mark.offset;
    assert!(mark > Offset(0));
    // The durable text held starts after the replay's start (a retention floor above it).
    let held = utf16::slice(&sim.text, mark + Offset(1), sim.durable);
    assert_eq!(
        Reattach::after_reset(record.clone(), mark + Offset(1), held).unwrap_err(),
        Interruption::DurableMissing { mark, from: mark + Offset(1), to: sim.durable }
    );
    // Less durable text than the record's mark (the record is newer than the text: never, by P).
    let less = utf16::slice(&sim.text, Offset(0), mark - Offset(1));
    assert!(matches!(Reattach::after_reset(record.clone(), Offset(0), less), Err(Interruption::DurableMissing { .. })));
    let newer = BackgroundRecord { version: RECORD_VERSION + 1, ..record };
    assert_eq!(Reattach::after_reset(newer, Offset(0), &sim.text).unwrap_err(), Interruption::UnknownRecord(RECORD_VERSION + 1));
}

// ---------------------------------------------------------------------------------------
// A lost connection: re-attach in place

#[test]
fn a_lost_connection_reattaches_in_place_checking_everything_this_relay_wrote() {
    let events = awkward_answer();
    for format in [Format::Text, Format::Ui] {
        let whole = uninterrupted(format, &events);
        for cut in [1, 2, 15, 40, 77, events.len() - 1] {
            let (mut sim, relay) = pumped(format, &events[..cut], 6);
            let record = sim.record.clone().unwrap();
            let reattach = relay.reattach().expect("a background relay with a known id re-attaches");
            assert_eq!(reattach.record().mark, record.mark);
            let mut relay = relay_of(reattach.handle_answer(200));
            assert_eq!(sim.run(&mut relay, after(&events, record.mark.after), 6), Some(PumpStep::Complete));
            assert_eq!(sim.text, whole, "{format:?}: connection lost after {cut} events");
        }
    }
}

#[test]
fn in_place_the_replay_must_match_what_readers_were_given_not_only_the_durable_text() {
    let events = responses_events(&[], &tokens(19, 40), &[]);
    let mut sim = Sim::default();
    let mut relay = Relay::new(&background_request(), Format::Text, "msg-1", Offset(0));
    sim.run(&mut relay, &events[..30], 1000); // nothing durable: everything is the live tail
    assert_eq!(sim.durable, Offset(0));
    let mut replay = events.clone();
    let last_delta = (0..30).rev().find(|&i| replay[i].0 == "response.output_text.delta").unwrap();
    let mut v: Value = serde_json::from_str(&replay[last_delta].1).unwrap();
    v["delta"] = json!("different");
    replay[last_delta].1 = v.to_string();
    let mark = sim.record.as_ref().unwrap().mark.after;
    let mut relay = relay_of(relay.reattach().unwrap().handle_answer(200));
    let written = sim.text.clone();
    assert!(matches!(sim.run(&mut relay, after(&replay, mark), 1000), Some(PumpStep::Interrupted(Interruption::ReplayDiffers { .. }))));
    assert_eq!(sim.text, written);
}

#[test]
fn re_attaching_gives_up_after_three_that_bring_nothing_new_and_counts_again_after_new_text() {
    let events = responses_events(&[], &tokens(23, 30), &[]);
    let (mut sim, mut relay) = pumped(Format::Text, &events[..10], 1000);
    let mark = sim.record.as_ref().unwrap().mark.after.map_or(0, |n| n as usize + 1);
    for _ in 0..MAX_REATTACHES {
        relay = relay_of(relay.reattach().expect("within the limit").handle_answer(200));
        // Each replay reproduces the text written (no new text), then the connection drops again.
        assert_eq!(sim.run(&mut relay, &events[mark..10], 1000), None);
    }
    let mut relay = match relay.reattach() {
        Err(relay) => *relay,
        Ok(_) => panic!("a fourth fruitless re-attach"),
    };
    // A relay that never learned the response id cannot re-attach at all.
    let mut fresh = Relay::new(&background_request(), Format::Text, "msg-1", Offset(0));
    fresh
        .handle_event("response.in_progress", r#"{"type":"response.in_progress","sequence_number":0,"response":{"status":"in_progress"}}"#);
    assert!(fresh.reattach().is_err());
    // New text resets the count.
    sim.run(&mut relay, &events[10..12], 1000);
    assert!(relay.reattach().is_ok());
}

// ---------------------------------------------------------------------------------------
// The answer to a re-attach: refused, retried, expired

#[test]
fn a_refused_reattach_is_retried_with_backoff_then_interrupted_and_a_denial_at_once() {
    let events = responses_events(&[], &tokens(29, 10), &[]);
    let (sim, _) = pumped(Format::Text, &events[..5], 1);
    let record = sim.record.clone().unwrap();
    let mut reattach = Reattach::after_reset(record.clone(), Offset(0), &sim.text).unwrap();
    let mut delays = Vec::new();
    let last = loop {
        match reattach.handle_answer(503) {
            ReattachNext::Retry { reattach: again, after_ms } => {
                delays.push(after_ms);
                reattach = again;
            }
            other => break other,
        }
    };
    assert_eq!(delays, [Millis(250), Millis(500)], "{MAX_REATTACHES} attempts in all");
    assert!(matches!(last, ReattachNext::Interrupt(Interruption::Refused { status: 503 })));
    for status in [400, 401, 403] {
        let next = Reattach::after_reset(record.clone(), Offset(0), &sim.text).unwrap().handle_answer(status);
        assert!(matches!(next, ReattachNext::Interrupt(Interruption::Refused { status: s }) if s == status), "{status}");
    }
}

/// A stored response object as `GET /v1/responses/{id}` answers it.
fn stored(status: &str, text: &str) -> Vec<u8> {
    json!({
        "id": ID, "object": "response", "status": status, "background": true,
        "error": if status == "failed" { json!({"message": "boom"}) } else { Value::Null },
        "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "output": [
            {"id": "rs_1", "type": "reasoning", "summary": []},
            {"id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]},
        ],
    })
    .to_string()
    .into_bytes()
}

fn retrieve_after_expiry(format: Format, cut: usize, status: u16) -> (Sim, rindle_streams::engine::pump::Retrieve, Vec<Event>) {
    let events = responses_events(&[], &tokens(31, 120), &[]);
    let (mut sim, _) = pumped(format, &events[..cut], 9);
    sim.reset();
    let record = sim.record.clone().unwrap();
    match Reattach::after_reset(record, Offset(0), &sim.text).unwrap().handle_answer(status) {
        ReattachNext::Retrieve(retrieve) => {
            assert_eq!(retrieve.call().url, format!("{ENDPOINT}/{ID}"));
            assert_eq!(retrieve.call().method, CallMethod::Get);
            (sim, retrieve, events)
        }
        other => panic!("expected a retrieve, got {other:?}"),
    }
}

#[test]
fn an_expired_replay_finishes_a_text_stream_from_the_stored_response_checked_like_a_replay() {
    let whole = uninterrupted(Format::Text, &responses_events(&[], &tokens(31, 120), &[]));
    for status in [404, 410] {
        let (mut sim, retrieve, _) = retrieve_after_expiry(Format::Text, 90, status);
        let Retrieved { push, step } = retrieve.handle_answer(200, &stored("completed", &whole));
        assert_eq!(step, PumpStep::Complete);
        sim.text.push_str(&push);
        assert_eq!(sim.text, whole);
    }
    // The stored text differs inside the written text: interrupted, nothing pushed.
    let (sim, retrieve, _) = retrieve_after_expiry(Format::Text, 90, 404);
    let mut other = utf16::slice(&whole, Offset(0), sim.durable - Offset(3)).to_owned();
    other.push_str("XYZ and more");
    let got = retrieve.handle_answer(200, &stored("completed", &other));
    assert_eq!(
        got,
        Retrieved { push: String::new(), step: PumpStep::Interrupted(Interruption::ReplayDiffers { at: sim.durable - Offset(3) }) }
    );
    // Shorter than the written text.
    let (sim, retrieve, _) = retrieve_after_expiry(Format::Text, 90, 404);
    let got = retrieve.handle_answer(200, &stored("completed", utf16::slice(&whole, Offset(0), sim.durable - Offset(5))));
    assert_eq!(got.step, PumpStep::Interrupted(Interruption::ReplayShort { missing: Offset(5) }));
    // Failed and incomplete end as the live pump would have: the rest, then error.
    for (status, message) in [("failed", "boom"), ("incomplete", "max_output_tokens")] {
        let (_, retrieve, _) = retrieve_after_expiry(Format::Text, 90, 404);
        let got = retrieve.handle_answer(200, &stored(status, &whole));
        assert_eq!(got.step, PumpStep::Failed(PumpFailure::Upstream(message.into())), "{status}");
        assert!(!got.push.is_empty());
    }
}

#[test]
fn an_expired_replay_is_interrupted_when_the_stored_response_cannot_finish_the_stream() {
    let whole = uninterrupted(Format::Text, &responses_events(&[], &tokens(31, 120), &[]));
    let interrupted = |i| Retrieved { push: String::new(), step: PumpStep::Interrupted(i) };
    for status in ["in_progress", "queued", "cancelled"] {
        let (_, retrieve, _) = retrieve_after_expiry(Format::Text, 90, 404);
        assert_eq!(retrieve.handle_answer(200, &stored(status, &whole)), interrupted(Interruption::Expired { status: status.into() }));
    }
    let (_, retrieve, _) = retrieve_after_expiry(Format::Ui, 90, 404);
    assert_eq!(retrieve.handle_answer(200, &stored("completed", &whole)), interrupted(Interruption::ExpiredUi));
    let (_, retrieve, _) = retrieve_after_expiry(Format::Text, 90, 404);
    assert_eq!(retrieve.handle_answer(404, b"{}"), interrupted(Interruption::Gone { status: 404 }));
    let (_, retrieve, _) = retrieve_after_expiry(Format::Text, 90, 404);
    assert_eq!(retrieve.handle_answer(500, b"{}"), interrupted(Interruption::Refused { status: 500 }));
    let (_, retrieve, _) = retrieve_after_expiry(Format::Text, 90, 404);
    assert!(matches!(retrieve.handle_answer(200, b"not json").step, PumpStep::Interrupted(Interruption::Unreadable(_))));
}

// ---------------------------------------------------------------------------------------
// Requests

#[test]
fn a_background_pump_request_streams_and_names_its_credential() {
    let secrets = PumpSecrets::parse("MOCK_KEY=http://127.0.0.1:8788,OTHER").unwrap();
    let parse = |json: String| PumpRequest::parse(json.as_bytes(), &PumpUpstreams::Loopback, &secrets).map_err(|e| e.to_string());
    let body = r#"{"stream":true,"background":true}"#;
    let ok = parse(format!(r#"{{"format":"openai-responses","url":"{ENDPOINT}","auth":{{"secret":"MOCK_KEY"}},"body":{body}}}"#)).unwrap();
    assert!(ok.background());
    assert!(
        parse(format!(r#"{{"format":"openai-responses","url":"{ENDPOINT}","body":{body}}}"#)).unwrap().background(),
        "no credential at all is allowed"
    );
    let refusals = [
        (
            format!(r#"{{"format":"openai-responses","url":"{ENDPOINT}","auth":{{"secret":"NOPE"}},"body":{body}}}"#),
            "bad pump request: auth.secret \"NOPE\" is not on the PUMP_SECRETS allow-list",
        ),
        (
            format!(r#"{{"format":"openai-responses","url":"http://127.0.0.1:9999/v1/responses","auth":{{"secret":"MOCK_KEY"}},"body":{body}}}"#),
            "bad pump request: auth.secret MOCK_KEY may be sent only to http://127.0.0.1:8788/",
        ),
        (
            format!(r#"{{"format":"openai-responses","url":"{ENDPOINT}","auth":{{"secret":"OTHER"}},"headers":{{"Authorization":"Bearer k"}},"body":{{}}}}"#),
            "bad pump request: auth.secret names the credential: header \"Authorization\" may not carry another",
        ),
        (
            format!(r#"{{"format":"openai-responses","url":"{ENDPOINT}","body":{{"background":true}}}}"#),
            "bad pump request: a background pump streams its response: the body must have \"stream\": true",
        ),
        (
            format!(r#"{{"format":"openai-responses","url":"{ENDPOINT}","headers":{{"authorization":"Bearer k"}},"body":{body}}}"#),
            "bad pump request: a background pump names its credential with auth.secret (it re-attaches after a reset and stores no key), not in header \"authorization\"",
        ),
    ];
    for (json, message) in refusals {
        assert_eq!(parse(json.clone()).unwrap_err(), message, "{json}");
    }
    assert!(parse(format!(r#"{{"format":"openai-responses","url":"{ENDPOINT}","auth":{{"secret":"OTHER","header":"x"}}}}"#)).is_err());
    assert!(parse(format!(r#"{{"format":"openai-responses","url":"{ENDPOINT}","auth":"OTHER"}}"#)).is_err());
}
