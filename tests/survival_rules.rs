//! One named test per rule of SPEC §10 (surviving the object): rehydration, the producer's
//! resume and its fence, the resume window, a cancel in the gap, and parked readers. Each drives
//! the pure state machine against real SQLite in virtual time, as `live_rules.rs` does.

mod support;

use rindle_streams::engine::host::config::StreamConfig;
use rindle_streams::engine::host::hook::{SealCause, StreamNotice};
use rindle_streams::engine::host::store::RowGuard;
use rindle_streams::engine::host::time::{Millis, Timestamp};
use rindle_streams::engine::live::{
    Fenced, LiveStream, Producer, Rehydration, ResumeGrant, ResumeRefused, StreamEvent, StreamState, Taker, Window,
};
use rindle_streams::engine::text::reading::DurableText;
use rindle_streams::engine::text::utf16::{self, Offset};
use rindle_streams::engine::wire::frame::{EndStatus, Frame};
use rindle_streams::engine::wire::ui::Format;
use std::rc::Rc;
use support::driver::{Driver, UiEvent, STREAM, TOKEN};
use support::{SqliteDb, Store};

const WINDOW: u64 = 30_000;

/// No idle timeout unless a test sets one: a rebuilt stream's window here is the resume
/// window (with one, a producer whose last write is unknown gets what remains of it from the
/// rebuild).
fn cfg() -> StreamConfig {
    StreamConfig { checkpoint_chars: Offset(8), idle_timeout_ms: Millis::ZERO, ..StreamConfig::default() }
}

fn ui_cfg() -> StreamConfig {
    StreamConfig { format: Format::Ui, ui_checkpoint_chars: Offset(8), ..StreamConfig::default() }
}

fn line(delta: &str) -> String {
    format!("{{\"type\":\"text-delta\",\"id\":\"t\",\"delta\":{}}}\n", serde_json::to_string(delta).unwrap())
}

/// The row a lost instance left: `streaming`, `durable` checkpointed.
fn lost_row(durable: &str) -> Rc<SqliteDb> {
    let db = SqliteDb::new();
    db.insert_message(STREAM);
    db.batch(&[db.sql.mark_streaming(STREAM, TOKEN, Format::Text)]).unwrap();
    if !durable.is_empty() {
        db.batch(&db.sql.append(STREAM, Offset(0), utf16::len(durable), durable, Some(TOKEN))).unwrap();
    }
    Rc::new(db)
}

/// A fresh instance's stream rebuilt from the row's one-statement durable read, at `now`.
fn rehydrated(durable: &str, cfg: StreamConfig, epoch: u64) -> Driver {
    let db = lost_row(durable);
    let read = support::block_on(support::tables(&db).read_durable(STREAM)).unwrap().expect("the row");
    assert_eq!(read.status, "streaming");
    let stream = LiveStream::rehydrate(STREAM, cfg, from_row(read, epoch, None, None), Timestamp(0));
    Driver::with_stream(stream, db)
}

/// What a revival hands over: the row's durable text, the stored epoch, the window (stored, or
/// the resume window from now), the token the row is held by.
fn from_row(read: DurableText, epoch: u64, window: Option<Window>, host_token: Option<&str>) -> Rehydration {
    let window = Window::of(&cfg(), window, None, Timestamp(0));
    Rehydration {
        durable: read,
        epoch,
        granted_to: None,
        meta: None,
        window,
        host_token: host_token.map(str::to_owned),
        last_write: None,
        cancelled: false,
    }
}

/// A resume by the producer that holds the stream (it sends the stream's current epoch).
fn resume(d: &mut Driver) -> Result<ResumeGrant, ResumeRefused> {
    let r = d.stream.resume(Some(d.stream.epoch()), None, d.now);
    d.drain();
    r
}

fn sealed_with(d: &Driver) -> Option<(EndStatus, Option<SealCause>)> {
    d.events.iter().find_map(|e| match e {
        StreamEvent::Sealed { status, cause, .. } => Some((*status, *cause)),
        _ => None,
    })
}

// ---- rehydration

#[test]
fn a_rehydrated_stream_is_live_at_the_durable_text_with_its_lease_armed() {
    let d = rehydrated("héllo 😀", cfg(), 3);
    let d_len = utf16::len("héllo 😀");
    assert_eq!((d.stream.state(), d.stream.seq(), d.stream.durable_seq()), (StreamState::Live, d_len, d_len));
    assert!(d.stream.rehydrated());
    assert_eq!(d.stream.epoch(), 3, "the epoch the lost instance stored");
    assert_eq!(d.renewals, 1, "the lease is renewed at once");
    assert_eq!(d.stream.resume_by(), Some(Timestamp(WINDOW)));
    assert!(d.pending.is_empty(), "nothing to write: the text is durable");
}

#[test]
fn a_reader_of_a_rehydrated_stream_gets_the_durable_text() {
    let mut d = rehydrated("héllo 😀", cfg(), 1);
    let r = d.subscribe(Offset(1));
    assert_eq!(
        d.read(r),
        vec![
            Frame::Open { stream_id: STREAM.into(), from: Offset(1), seq: Offset(8), durable_seq: Offset(8), ended: false },
            Frame::Chunk { from: Offset(1), seq: Offset(8), text: "éllo 😀".into() },
            Frame::Durable { seq: Offset(8) },
        ]
    );
}

// ---- the fence

#[test]
fn a_write_to_a_rehydrated_stream_before_its_resume_is_refused_resume_required() {
    let d = rehydrated("abc", cfg(), 1);
    let required = Err(Fenced::ResumeRequired { seq: Offset(3), durable_seq: Offset(3) });
    assert_eq!(d.stream.admit(None), required);
    assert_eq!(d.stream.admit(Some(1)), required, "even the lost connection's own epoch");
}

#[test]
fn a_resume_fences_the_connection_it_replaces() {
    let mut d = Driver::open(cfg());
    assert_eq!((d.stream.epoch(), d.stream.admit(None), d.stream.admit(Some(1))), (1, Ok(()), Ok(())));
    d.push("ab");
    let grant = resume(&mut d).unwrap();
    assert_eq!(grant, ResumeGrant { seq: Offset(2), durable_seq: Offset(0), format: Format::Text, epoch: 2 }, "the live seq");
    assert_eq!(d.stream.admit(Some(1)), Err(Fenced::Superseded { current: 2 }));
    assert_eq!(d.stream.admit(None), Err(Fenced::Superseded { current: 2 }), "no header once a resume happened");
    assert_eq!(d.stream.admit(Some(7)), Err(Fenced::Superseded { current: 2 }), "an epoch never issued");
    assert_eq!(d.stream.admit(Some(2)), Ok(()));
}

#[test]
fn a_resume_is_idempotent_in_effect_it_fences_again_and_answers_the_same_seq() {
    let mut d = rehydrated("abc", cfg(), 1);
    let first = resume(&mut d).unwrap();
    let second = resume(&mut d).unwrap();
    assert_eq!((first.seq, first.epoch, second.seq, second.epoch), (Offset(3), 2, Offset(3), 3));
    assert_eq!(d.stream.admit(Some(2)), Err(Fenced::Superseded { current: 3 }), "two producers resuming: one continues");
}

// ---- S and P across the reset

#[test]
fn the_resumed_producer_continues_at_d_and_s_and_p_hold_over_the_durable_text_and_what_follows() {
    let mut d = rehydrated("a😀b", cfg(), 1);
    let r = d.subscribe(Offset(0));
    let _ = d.read(r);
    let grant = resume(&mut d).unwrap();
    assert_eq!((grant.seq, grant.durable_seq, grant.epoch), (Offset(4), Offset(4), 2));
    let mut last_durable = d.stream.durable_seq();
    for piece in ["c👍🏽", "d", "ZWJ👩‍👩‍👧", "end"] {
        assert_eq!(d.stream.admit(Some(grant.epoch)), Ok(()));
        d.push(piece);
        d.answer_all();
        assert!(d.stream.durable_seq() >= last_durable, "P: durableSeq never falls");
        last_durable = d.stream.durable_seq();
    }
    let _ = d.close();
    d.answer_all();
    let whole = "a😀bc👍🏽dZWJ👩‍👩‍👧end";
    assert_eq!((d.db.status(STREAM), d.db.durable_text(STREAM)), ("complete".to_owned(), whole.to_owned()));
    let text: String = d
        .read(r)
        .into_iter()
        .filter_map(|f| match f {
            Frame::Chunk { text, .. } => Some(text),
            _ => None,
        })
        .collect();
    assert_eq!(text, &whole["a😀b".len()..], "S: the reader saw the durable text, then exactly what followed");
}

#[test]
fn a_ui_stream_resumes_at_a_line_end_and_its_unfinished_line_is_dropped_for_the_resend() {
    let mut d = Driver::open(ui_cfg());
    let first = line("hi");
    d.push_ndjson(first.as_bytes()).unwrap();
    d.push_ndjson(b"{\"type\":\"text-de").unwrap(); // the connection is lost mid-line
    let grant = resume(&mut d).unwrap();
    assert_eq!(grant.seq, utf16::len(&first), "a line end");
    let second = line("🙂");
    d.push_ndjson(second.as_bytes()).unwrap();
    let _ = d.close();
    d.answer_all();
    assert_eq!(d.db.durable_text(STREAM), format!("{first}{second}"), "the lost fragment never enters the text");
}

#[test]
fn a_ui_checkpoint_ends_at_a_line_end_so_a_rehydrated_ui_stream_resumes_at_one() {
    let cfg = StreamConfig { max_slice_bytes: 100, ..ui_cfg() };
    let mut d = Driver::open(cfg);
    let lines: String = (0..6).map(|i| line(&format!("part {i} 😀"))).collect();
    d.push_ndjson(lines.as_bytes()).unwrap();
    while let Some(ck) = d.peek_checkpoint() {
        assert!(ck.text.ends_with('\n'), "a slice ends at a line end: {:?}", ck.text);
        d.answer(support::Fault::None);
    }
    assert_eq!(d.stream.durable_seq(), utf16::len(&lines));
}

// ---- the window

#[test]
fn a_producer_that_never_resumes_is_sealed_interrupted_when_the_window_passes_with_the_durable_text() {
    let mut d = rehydrated("saved 😀", cfg(), 1);
    d.advance(WINDOW - 1);
    assert_eq!(d.stream.state(), StreamState::Live);
    d.advance(1);
    d.answer_all();
    assert_eq!(d.stream.state(), StreamState::Ended(EndStatus::Interrupted));
    assert_eq!(sealed_with(&d), Some((EndStatus::Interrupted, Some(SealCause::ResumeWindowExpired))));
    assert_eq!((d.db.status(STREAM), d.db.durable_text(STREAM)), ("interrupted".to_owned(), "saved 😀".to_owned()));
    let notices = d.events.iter().flat_map(|e| StreamNotice::of(STREAM, e)).collect::<Vec<_>>();
    assert!(notices.iter().any(|n| matches!(n, StreamNotice::Interrupted { cause: SealCause::ResumeWindowExpired, .. })));
    assert_eq!(
        resume(&mut d),
        Err(ResumeRefused::Closed { status: EndStatus::Interrupted, seq: Offset(8), durable_seq: Offset(8) }),
        "a late resume learns the status"
    );
}

#[test]
fn a_resume_within_the_window_closes_it() {
    let mut d = rehydrated("abc", StreamConfig { idle_timeout_ms: Millis::ZERO, ..cfg() }, 1);
    d.advance(WINDOW - 1);
    resume(&mut d).unwrap();
    d.advance(10 * WINDOW);
    assert_eq!(d.stream.state(), StreamState::Live);
}

#[test]
fn a_second_rehydration_keeps_the_window_the_first_one_started() {
    let db = lost_row("abc");
    let read = support::block_on(support::tables(&db).read_durable(STREAM)).unwrap().unwrap();
    let stored = Window { until: Timestamp(5_000), cause: SealCause::ResumeWindowExpired };
    let from = from_row(read, 2, Some(stored), None);
    let mut d = Driver::with_stream(LiveStream::rehydrate(STREAM, cfg(), from, Timestamp(0)), db);
    d.advance(5_000);
    d.answer_all();
    assert_eq!(d.stream.state(), StreamState::Ended(EndStatus::Interrupted));
}

#[test]
fn a_cancel_in_the_gap_seals_cancelled_and_the_resuming_producer_learns_it() {
    let mut d = rehydrated("abc", cfg(), 1);
    d.stream.cancel();
    d.drain();
    d.answer_all();
    assert_eq!(d.db.status(STREAM), "cancelled");
    assert_eq!(sealed_with(&d), Some((EndStatus::Cancelled, None)));
    assert_eq!(resume(&mut d), Err(ResumeRefused::Closed { status: EndStatus::Cancelled, seq: Offset(3), durable_seq: Offset(3) }));
}

/// A Stop accepted just before a reset (the reader's cancel answered 200, the row's flag set)
/// reaches the producer when it comes back: the rebuild reads the flag and seals the stream
/// `cancelled`, so its resume is refused `closed`/`cancelled`. Before, the durable read did not
/// read the cancel column and the rebuilt stream started uncancelled: the producer's resume with
/// its epoch was granted (`{seq: 3, epoch: 2}`), its next append answered `cancelled: false`, and
/// its close sealed the row `complete` with `abcdef`.
#[test]
fn a_stop_accepted_before_a_reset_seals_the_rebuilt_stream_cancelled() {
    let mut d = Driver::open(cfg());
    d.push("abc");
    let _ = d.flush();
    d.answer_all();
    d.stream.cancel(); // the reader's POST cancel: the live stream, then the row's flag
    d.drain();
    d.db.batch(&[d.db.sql.request_cancel(STREAM).unwrap()]).unwrap();
    assert_eq!(d.alarm_after_reset(&cfg()), Err(rindle_streams::engine::live::lease::Renewal::Alive), "rebuilt");
    d.answer_all();
    let refused = d.stream.resume(Some(1), None, d.now);
    assert_eq!(refused, Err(ResumeRefused::Closed { status: EndStatus::Cancelled, seq: Offset(3), durable_seq: Offset(3) }));
    assert_eq!((d.db.status(STREAM), d.db.durable_text(STREAM)), ("cancelled".into(), "abc".into()));
}

#[test]
fn a_watch_held_in_the_gap_answers_the_cancel_that_seals_it() {
    // A producer's watch reaches the rebuilt stream before the producer's resume does: it is
    // held, and a cancel in the gap (which seals at once: no producer is there to close) answers it.
    let mut d = rehydrated("abc", cfg(), 1);
    assert_eq!(d.stream.watch(), None, "the gap: held");
    d.stream.cancel();
    d.drain();
    assert!(d.stream.watch().is_some_and(|a| a.cancelled), "cancelled while the seal commits");
    d.answer_all();
    let sealed = d.stream.watch().expect("sealed");
    assert_eq!((sealed.status, sealed.cancelled, sealed.seq), (Some(EndStatus::Cancelled), true, Offset(3)));
}

#[test]
fn a_cancel_after_the_resume_reaches_the_producer_as_before() {
    let mut d = rehydrated("abc", cfg(), 1);
    resume(&mut d).unwrap();
    d.stream.cancel();
    d.drain();
    assert_eq!(d.stream.state(), StreamState::Live, "the producer is told on its next receipt");
    assert!(d.push("d").cancelled);
}

// ---- parked readers

#[test]
fn a_reader_past_the_rehydrated_seq_is_parked_until_the_resent_text_reaches_it() {
    let mut d = rehydrated("abc", cfg(), 1);
    let r = d.subscribe(Offset(6));
    assert_eq!(d.read(r), vec![], "parked: no clamped replay, no absent");
    let grant = resume(&mut d).unwrap();
    assert_eq!(grant.seq, Offset(3));
    d.push("de");
    assert_eq!(d.read(r), vec![], "still short of its offset");
    d.wakes.clear();
    d.push("fgh");
    assert!(d.wakes.contains(&r), "woken when the text reaches it");
    assert_eq!(
        d.read(r),
        vec![
            Frame::Open { stream_id: STREAM.into(), from: Offset(6), seq: Offset(8), durable_seq: Offset(3), ended: false },
            Frame::Chunk { from: Offset(6), seq: Offset(8), text: "gh".into() },
        ],
        "served from exactly its offset"
    );
    d.push("i");
    assert_eq!(d.read(r), vec![Frame::Chunk { from: Offset(8), seq: Offset(9), text: "i".into() }]);
}

#[test]
fn a_ui_reader_past_the_rehydrated_seq_is_served_from_exactly_its_line() {
    let (a, b, c) = (line("one"), line("two 😀"), line("three"));
    let mut d = rehydrated(&a, ui_cfg(), 1);
    let after_b = utf16::len(&a) + utf16::len(&b);
    let r = d.subscribe_ui(after_b);
    assert_eq!(d.read_ui(r), None, "parked");
    resume(&mut d).unwrap();
    d.push_ndjson(b.as_bytes()).unwrap();
    d.push_ndjson(c.as_bytes()).unwrap();
    let events = d.read_ui(r).expect("released");
    let lines: Vec<_> = events.iter().filter(|e| e.id.is_some()).map(|e: &UiEvent| format!("{}\n", e.data)).collect();
    assert_eq!(lines, vec![c.clone()], "no duplicated chunk: only the lines after its offset");
}

#[test]
fn a_parked_reader_gets_the_interrupted_ending_when_the_producer_never_returns() {
    let mut d = rehydrated("abc", cfg(), 1);
    let r = d.subscribe(Offset(10));
    d.advance(WINDOW);
    d.answer_all();
    let frames = d.read(r);
    assert!(matches!(frames.first(), Some(Frame::Open { from: Offset(3), seq: Offset(3), .. })), "{frames:?}");
    assert!(matches!(frames.last(), Some(Frame::End { status: EndStatus::Interrupted, seq: Offset(3), .. })), "{frames:?}");
}

#[test]
fn a_reader_past_the_end_of_a_stream_never_rehydrated_still_joins_at_the_end() {
    let mut d = Driver::open(cfg());
    d.push("abc");
    let r = d.subscribe(Offset(10));
    assert!(matches!(d.read(r)[..], [Frame::Open { from: Offset(3), .. }]));
}

#[test]
fn a_ui_reader_parked_past_the_text_is_told_at_the_end_that_its_lines_were_not_all_saved() {
    let (a, b) = (line("one"), line("two"));
    let mut d = rehydrated(&a, ui_cfg(), 1);
    let held = utf16::len(&a) + utf16::len(&b);
    let r = d.subscribe_ui(held);
    d.stream.cancel();
    d.drain();
    d.answer_all();
    let events = d.read_ui(r).expect("the end");
    let ending = events.iter().find(|e| e.ending).expect("an ending");
    let saved = utf16::len(&a);
    assert_eq!(
        ending.data,
        format!(
            r#"{{"type":"error","errorText":"only part of the answer shown was saved ({saved} of {held} UTF-16 units): the stream ended cancelled; reload to see the saved answer"}}"#
        ),
        "not a plain abort: the reader holds a line the store does not"
    );
}

#[test]
fn a_ui_line_longer_than_a_slice_is_checkpointed_whole() {
    let mut d = Driver::open(StreamConfig { max_slice_bytes: 16, ..ui_cfg() });
    let long = line("a line far longer than sixteen bytes 😀");
    d.push_ndjson(long.as_bytes()).unwrap();
    let ck = d.peek_checkpoint().expect("a checkpoint");
    assert_eq!(ck.text, long, "one whole line, past the cap, never a cut inside it");
}

#[test]
fn the_windows_seal_is_guarded_it_never_writes_a_row_another_instance_holds() {
    let db = lost_row("abc");
    let read = support::block_on(support::tables(&db).read_durable(STREAM)).unwrap().unwrap();
    // This instance believes it claimed the row with `X`, but the row is held by another token.
    let mut d = Driver::with_stream(LiveStream::rehydrate(STREAM, cfg(), from_row(read, 1, None, Some("X")), Timestamp(0)), db);
    let r = d.subscribe(Offset(0));
    d.advance(WINDOW);
    let seal = d.peek_seal().expect("the window's seal").clone();
    assert_eq!(seal.guard, RowGuard { durable_seq: Offset(3), host_token: Some("X".into()) });
    d.answer_all();
    assert_eq!(d.db.status(STREAM), "streaming", "the row another instance holds is left alone");
    assert!(matches!(d.read(r).last(), Some(Frame::Stale { .. })), "readers are told to rejoin, never an end the row lacks");
    assert_eq!(d.stream.holding(), rindle_streams::engine::live::lease::Holding::Sealed, "nothing here to retry");
}

// ---- the one sealer: every seal guarded by the durable length this stream believes

/// The lost instance's checkpoint of "def" commits after the new instance read "abc". Before
/// every seal was guarded by the durable length, the three seals of a rebuilt stream (the
/// window's expiry, the idle timeout, a cancel in the gap) wrote `body = "abc"`, `seq = 3` and
/// deleted the chunk rows: the durable text shrank from "abcdef" to "abc" (P broken), and where
/// no guard applied readers got `end {seq: 3}` while the row said something else. Now the seal
/// does not apply, the stream takes in the row's longer text (readers get it), and seals that.
#[test]
fn a_late_commit_after_the_rebuild_is_adopted_by_every_seal_of_the_rebuilt_stream_never_shrunk() {
    for ending in ["window", "idle", "cancel"] {
        let db = lost_row("abc");
        let read = support::block_on(support::tables(&db).read_durable(STREAM)).unwrap().unwrap();
        db.batch(&db.sql.append(STREAM, Offset(3), Offset(6), "def", Some(TOKEN))).unwrap(); // the late commit
                                                                                             // "idle": the producer's idle timeout ends after the resume window (it wrote just before
                                                                                             // the reset), so the window is the idle timeout's, and its seal names an idle producer.
        let idle = ending == "idle";
        let cfg = StreamConfig { idle_timeout_ms: Millis(if idle { 2 * WINDOW } else { 0 }), ..cfg() };
        let last_write = Some(Timestamp(0));
        let window = Window::of(&cfg, None, last_write, Timestamp(0));
        let from = Rehydration { window, last_write, ..from_row(read, 1, None, Some(TOKEN)) };
        let mut d = Driver::with_stream(LiveStream::rehydrate(STREAM, cfg, from, Timestamp(0)), db);
        let r = d.subscribe(Offset(0));
        let status = match ending {
            "window" => {
                d.advance(WINDOW);
                EndStatus::Interrupted
            }
            "idle" => {
                assert_eq!(window.cause, SealCause::IdleProducer);
                d.advance(2 * WINDOW);
                EndStatus::Interrupted
            }
            _ => {
                d.stream.cancel();
                d.drain();
                EndStatus::Cancelled
            }
        };
        d.answer_all();
        assert_eq!((d.db.status(STREAM), d.db.durable_text(STREAM)), (status.as_str().to_owned(), "abcdef".to_owned()), "{ending}");
        assert_eq!(d.db.chunk_count(STREAM), 0, "{ending}: compacted, nothing lost");
        let frames = d.read(r);
        let text: String =
            frames.iter().filter_map(|f| if let Frame::Chunk { text, .. } = f { Some(text.as_str()) } else { None }).collect();
        assert_eq!(text, "abcdef", "{ending}: S: the reader got the adopted text");
        assert!(matches!(frames.last(), Some(Frame::End { seq: Offset(6), status: s, .. }) if *s == status), "{ending}: {frames:?}");
    }
}

/// The lost instance's checkpoint of its producer's text was in flight at the reset and commits
/// after the rebuilt stream claimed the row and its producer wrote something else from `D`: it
/// lands nothing (its host token is not the row's any more), and the row holds exactly the
/// rebuilt stream's text. Before every checkpoint carried the host token, the late slice landed,
/// the rebuilt stream's close adopted it as its own durable text and the row ended
/// `complete` with two producers' text spliced.
#[test]
fn a_lost_instances_checkpoint_committing_after_the_rebuild_lands_nothing() {
    let mut d = Driver::open(cfg());
    d.push("12345678");
    d.answer_all();
    d.push("AAAAAAAA");
    let late = d.pending.pop_front().expect("the lost instance's checkpoint of [8, 16), in flight");
    assert_eq!(d.alarm_after_reset(&cfg()), Err(rindle_streams::engine::live::lease::Renewal::Alive));
    let grant = d.stream.resume(Some(1), None, d.now).unwrap();
    assert_eq!(grant.seq, Offset(8));
    d.push("BBBB");
    let late = support::answer(&d.tables, STREAM, late, support::Fault::None);
    drop(late); // its answer goes to an instance that is gone
    let close = d.close();
    d.answer_all();
    assert!(matches!(d.outcome(close), Some(Ok(r)) if r.status == EndStatus::Complete), "{:?}", d.outcome(close));
    assert_eq!((d.db.status(STREAM), d.db.durable_text(STREAM)), ("complete".into(), "12345678BBBB".into()));
    assert_eq!(d.db.chunk_count(STREAM), 0);
}

/// A seal that finds the row sealed by someone else (the lost instance's own seal, committed
/// late) ends the stream as the row says: readers get its status and length, never ours.
#[test]
fn a_seal_that_finds_the_row_sealed_meanwhile_ends_as_the_row_says() {
    let db = lost_row("abc");
    let read = support::block_on(support::tables(&db).read_durable(STREAM)).unwrap().unwrap();
    let mut d = Driver::with_stream(LiveStream::rehydrate(STREAM, cfg(), from_row(read, 1, None, Some(TOKEN)), Timestamp(0)), db);
    let r = d.subscribe(Offset(0));
    d.db.batch(&d.db.sql.append(STREAM, Offset(3), Offset(6), "def", Some(TOKEN))).unwrap();
    d.db.seal_row(STREAM, Some("abcdef!"), EndStatus::Complete, None); // the lost producer's seal lands
    d.advance(WINDOW);
    d.answer_all();
    assert_eq!((d.db.status(STREAM), d.db.durable_text(STREAM)), ("complete".to_owned(), "abcdef!".to_owned()));
    let frames = d.read(r);
    assert!(matches!(frames.last(), Some(Frame::End { seq: Offset(7), status: EndStatus::Complete, .. })), "{frames:?}");
    assert_eq!(d.stream.state(), StreamState::Ended(EndStatus::Complete));
}

/// The producer's own close after a checkpoint whose answer was lost though it committed: the
/// guarded seal does not apply, the stream adopts the row's length, and seals.
#[test]
fn the_producers_close_adopts_a_checkpoint_that_committed_without_an_answer() {
    let mut d = Driver::open(cfg());
    d.push("12345678");
    assert_eq!(d.peek_kind(), Some(rindle_streams::engine::host::store::OpKind::Checkpoint));
    d.answer(support::Fault::CommitThenLoseReply);
    d.fail_next(rindle_streams::engine::host::store::StoreError::MayHaveCommitted("the read-back timed out".into()));
    assert_eq!((d.stream.durable_seq(), d.db.durable_text(STREAM).as_str()), (Offset(0), "12345678"), "believed 0, the row holds 8");
    d.push("9");
    let close = d.close();
    d.answer_all();
    assert!(matches!(d.outcome(close), Some(Ok(r)) if r.durable_seq == Offset(9)), "{:?}", d.outcome(close));
    assert_eq!((d.db.status(STREAM), d.db.durable_text(STREAM)), ("complete".to_owned(), "123456789".to_owned()));
}

// ---- the fence across resets, and the pump

/// B resumed (epoch 2) replacing A; then a reset. Before the fence looked at the epoch first, A's
/// next write got `resume_required`, A resumed and took the stream back (epoch 3), and B was
/// told `superseded`; had B written past what A kept, A's helper failed B's answer.
#[test]
fn a_replaced_producer_stays_fenced_across_a_reset() {
    let d = rehydrated("abc", cfg(), 2);
    assert_eq!(d.stream.admit(Some(1)), Err(Fenced::Superseded { current: 2 }), "A: fenced, not asked to resume");
    assert_eq!(d.stream.admit(None), Err(Fenced::Superseded { current: 2 }), "a write without an epoch after a resume");
    assert_eq!(d.stream.admit(Some(2)), Err(Fenced::ResumeRequired { seq: Offset(3), durable_seq: Offset(3) }), "B resumes");
    let mut d = d;
    assert_eq!(d.stream.resume(Some(1), None, d.now), Err(ResumeRefused::Fenced(Fenced::Superseded { current: 2 })), "A cannot");
    let grant = d.stream.resume(Some(2), None, d.now).unwrap();
    assert_eq!((grant.epoch, grant.seq), (3, Offset(3)));
    assert_eq!(d.stream.admit(Some(3)), Ok(()));
}

/// A producer that lost the answer to its resume retries it with its old epoch and its id: it
/// gets the same grant, where another producer with that epoch is fenced.
#[test]
fn a_resume_retried_by_the_same_producer_after_a_lost_answer_gets_the_same_grant() {
    let mut d = rehydrated("abc", cfg(), 2);
    let first = d.stream.resume(Some(2), Some("producer-b"), d.now).unwrap();
    let again = d.stream.resume(Some(2), Some("producer-b"), d.now).unwrap();
    assert_eq!((first.epoch, again.epoch), (3, 3));
    assert_eq!(d.stream.resume(Some(2), Some("producer-a"), d.now), Err(ResumeRefused::Fenced(Fenced::Superseded { current: 3 })));
    assert_eq!(d.stream.resume(Some(2), None, d.now), Err(ResumeRefused::Fenced(Fenced::Superseded { current: 3 })));
}

/// A resume without an epoch comes from a producer that never learned one (its open's answer
/// was lost). A retried invocation P2 opens during a reset while P1 still runs: P2's open fails,
/// and its epoch-less resume must not take the stream P1 wrote. Before, it was granted (epoch 2,
/// at `seq` 3), P1 was fenced, and the row became P1's first characters followed by P2's whole
/// answer, sealed `complete`.
#[test]
fn a_resume_without_an_epoch_never_takes_a_stream_past_what_its_caller_wrote() {
    let mut d = rehydrated("abc", cfg(), 1);
    let refused = d.stream.resume(None, Some("p2"), d.now);
    assert_eq!(refused, Err(ResumeRefused::Fenced(Fenced::Superseded { current: 1 })), "a rebuilt stream is not P2's");
    assert_eq!(d.stream.resume(None, None, d.now), refused, "nor anyone's without an id");
    let grant = d.stream.resume(Some(1), Some("p1"), d.now).unwrap();
    assert_eq!((grant.seq, grant.epoch), (Offset(3), 2), "P1 continues");

    // The opener itself, after its open's answer was lost, names its id: the stream is its own,
    // across a reset too (the id is stored with the lease). A stranger may take a stream only
    // while nothing was written to it (it loses nothing), and only one this instance opened.
    let db = SqliteDb::new();
    db.insert_message(STREAM);
    let opener = Producer { host_token: TOKEN.into(), meta: None, chat: None, id: Some("p1".into()) };
    let (stream, _) = LiveStream::open(STREAM, cfg(), opener, Timestamp(0));
    let mut d = Driver::with_stream(stream, db);
    d.answer_all();
    assert_eq!(d.storage.producer.as_deref(), Some("p1"), "stored with the lease");
    d.push("abc");
    let _ = d.flush();
    d.answer_all();
    let superseded = Err(ResumeRefused::Fenced(Fenced::Superseded { current: 1 }));
    assert_eq!(d.stream.resume(None, Some("p2"), d.now), superseded);
    assert_eq!(d.alarm_after_reset(&cfg()), Err(rindle_streams::engine::live::lease::Renewal::Alive));
    assert_eq!(d.stream.resume(None, Some("p2"), d.now), superseded);
    let grant = d.stream.resume(None, Some("p1"), d.now).unwrap();
    assert_eq!((grant.seq, grant.epoch), (Offset(3), 2), "the opener's own stream");
    let mut untouched = Driver::open(cfg());
    assert_eq!(untouched.stream.resume(None, Some("p2"), untouched.now).map(|g| g.epoch), Ok(2), "nothing written: nothing lost");
}

/// A resume that finds no stream here (the revival found nothing to rebuild) is refused from the
/// row: a sealed row is `closed` with its status (its producer learns a Stop or the end), anything
/// else `not_open` (an open that never took opens again).
#[test]
fn a_resume_that_finds_no_stream_is_closed_for_a_sealed_row_and_not_open_otherwise() {
    let row = |status: &str| DurableText { text: "abc".into(), seq: Offset(3), status: status.into(), error: None, format: None };
    let closed = ResumeRefused::Closed { status: EndStatus::Cancelled, seq: Offset(3), durable_seq: Offset(3) };
    assert_eq!(ResumeRefused::of_row(Some(&row("cancelled"))), closed);
    for status in ["streaming", "pending"] {
        assert_eq!(ResumeRefused::of_row(Some(&row(status))), ResumeRefused::NotOpen, "{status}");
    }
    assert_eq!(ResumeRefused::of_row(None), ResumeRefused::NotOpen, "no row");
}

/// A producer's resume stands only once its epoch is stored (else 503, and its retry gets the
/// same grant); a pump's take-over goes on when the storage fails (logged).
#[test]
fn only_a_producers_resume_waits_for_its_epoch_to_be_stored() {
    assert!(Taker::Producer.needs_stored_epoch());
    assert!(!Taker::Pump.needs_stored_epoch());
}

/// The pump is a producer with an epoch of its own: while it runs, a producer's writes and
/// resumes are refused `pump_running`, and its own pushes are admitted only under its epoch.
/// Before, a `/resume` during a pump was granted a new epoch while the pump kept pushing, and
/// the two interleaved.
#[test]
fn the_pump_holds_an_epoch_producers_cannot_take_over() {
    let mut d = Driver::open(cfg());
    let pump = d.stream.start_pump(d.now).unwrap();
    assert_eq!(pump.epoch, 2);
    assert_eq!(d.stream.admit(Some(1)), Err(Fenced::PumpRunning));
    assert_eq!(d.stream.admit(Some(2)), Err(Fenced::PumpRunning), "not even with the pump's epoch");
    assert_eq!(d.stream.resume(Some(1), None, d.now), Err(ResumeRefused::Fenced(Fenced::PumpRunning)));
    assert_eq!(d.stream.admit_pump(2), Ok(()));
    assert_eq!(d.stream.admit_pump(1), Err(Fenced::Superseded { current: 2 }));
    assert_eq!(d.stream.admit_flush(Some(1)), Ok(()), "a flush writes no text: taken while the pump runs");
    // After a reset the re-attached pump takes the rebuilt stream again, fencing the producer.
    let mut rebuilt = rehydrated("abc", cfg(), 2);
    let again = rebuilt.stream.start_pump(rebuilt.now).unwrap();
    assert_eq!((again.epoch, rebuilt.stream.resume_by()), (3, None), "the window closes");
    assert_eq!(rebuilt.stream.admit(Some(2)), Err(Fenced::PumpRunning));
}

/// A rebuilt stream whose producer wrote last long ago waits the whole resume window: the idle
/// timeout (which the window already counts) does not seal it first.
#[test]
fn a_rebuilt_stream_waits_its_whole_window_even_when_the_idle_timeout_ends_sooner() {
    let db = lost_row("abc");
    let read = support::block_on(support::tables(&db).read_durable(STREAM)).unwrap().unwrap();
    let cfg = StreamConfig { idle_timeout_ms: Millis(300_000), ..cfg() };
    let now = Timestamp(1_000_000);
    let last_write = Some(now - Millis(290_000)); // 10 s of the idle timeout left, 30 s of window
    let window = Window::of(&cfg, None, last_write, now);
    let from = Rehydration { window, last_write, ..from_row(read, 1, None, None) };
    let mut d = Driver::with_stream(LiveStream::rehydrate(STREAM, cfg, from, now), db);
    d.now = now;
    d.advance(WINDOW - 1);
    assert_eq!(d.stream.state(), StreamState::Live, "not sealed by the idle timeout after 10 s");
    d.advance(1);
    d.answer_all();
    assert_eq!(sealed_with(&d), Some((EndStatus::Interrupted, Some(SealCause::ResumeWindowExpired))));
}
