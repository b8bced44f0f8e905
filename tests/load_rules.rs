//! The rules of a busy database (SPEC §13), one named test each, driving the real state machine
//! against real SQLite in virtual time: the cadence stretches under slow round trips and
//! overloads and stays exactly as configured on a quiet database; load is retried with jittered
//! back-off and never fails a flush, an open or a close that commits within `STORE_PATIENCE_MS`;
//! a refusal keeps SPEC §5's fixed retries.

mod support;

use rindle_streams::engine::host::config::StreamConfig;
use rindle_streams::engine::host::store::{OpKind, StoreError};
use rindle_streams::engine::host::time::{Millis, Timestamp};
use rindle_streams::engine::live::{CheckpointError, FlushError, OpenOutcome, SealReport, LOAD_BACKOFF_MAX};
use rindle_streams::engine::text::utf16::Offset;
use rindle_streams::engine::wire::frame::EndStatus;
use std::collections::VecDeque;
use support::driver::{Driver, STREAM, TOKEN};
use support::{Fault, SqliteDb, Store};

fn overloaded() -> StoreError {
    StoreError::Overloaded("D1_ERROR: D1 DB is overloaded. Requests queued for too long.".into())
}

/// Fails the next request with `error` and moves time on until the stream sends its next one;
/// returns how long it waited.
fn fail_and_wait(d: &mut Driver, error: StoreError) -> Millis {
    let failed_at = d.now;
    d.fail_next(error);
    while d.pending.is_empty() {
        let due = d.stream.poll_timeout().expect("a retry is due");
        d.advance((due - d.now).0);
    }
    d.now - failed_at
}

/// One checkpoint request as the database saw it: when it was sent, and its slice.
type Sent = (Timestamp, Offset, Offset);

/// A producer writing 10 characters every 50 ms for `seconds`, every store request answered
/// `round_trip(now)` after it was sent; returns the checkpoints sent.
fn at_a_pace(d: &mut Driver, seconds: u64, round_trip: impl Fn(Timestamp) -> u64) -> Vec<Sent> {
    let mut sent_at: VecDeque<Timestamp> = VecDeque::new();
    let mut checkpoints = vec![];
    let end = d.now + Millis(seconds * 1000);
    while d.now < end {
        if d.now.0 % 50 == 0 {
            d.push("abcdefghij");
        }
        while sent_at.len() < d.pending.len() {
            if let Some(c) = d.pending.get(sent_at.len()).and_then(|r| match r {
                rindle_streams::engine::host::store::StoreRequest::Checkpoint(c) => Some(c.op()),
                _ => None,
            }) {
                checkpoints.push((d.now, c.from, c.to));
            }
            sent_at.push_back(d.now);
        }
        if sent_at.front().is_some_and(|&at| d.now - at >= Millis(round_trip(at))) {
            sent_at.pop_front();
            d.answer(Fault::None);
            continue;
        }
        d.advance(10);
    }
    checkpoints
}

#[test]
fn a_quiet_database_keeps_todays_cadence_exactly() {
    let quiet = |_| 120; // well within CHECKPOINT_SLOW_MS (250)
    let mut adaptive = Driver::open(StreamConfig::default());
    let mut fixed = Driver::open(StreamConfig { checkpoint_max_stretch: 1, ..StreamConfig::default() });
    let a = at_a_pace(&mut adaptive, 20, quiet);
    let f = at_a_pace(&mut fixed, 20, quiet);
    assert_eq!(a, f, "the same checkpoints at the same moments as the fixed cadence");
    assert!(a.len() >= 20, "{} checkpoints in 20 s at 200 characters a second", a.len());
    assert!(a.windows(2).all(|w| w[1].0 - w[0].0 <= Millis(750 + 120)), "the 750 ms interval, not stretched");
    assert_eq!(adaptive.stream.checkpoint_stretch(), 1.0);
}

#[test]
fn slow_round_trips_stretch_the_cadence_and_a_quiet_database_brings_it_back() {
    let mut d = Driver::open(StreamConfig::default());
    let slow = at_a_pace(&mut d, 30, |_| 500);
    let stretched = d.stream.checkpoint_stretch();
    assert!((3.9..=4.1).contains(&stretched), "500 ms round trips (a whole CHECKPOINT_SLOW_MS past it) stretch 4 times: {stretched}");
    let late = slow.iter().filter(|(at, ..)| *at >= Timestamp(15_000)).collect::<Vec<_>>();
    assert!(late.windows(2).all(|w| w[1].0 - w[0].0 >= Millis(3_000)), "fewer, larger checkpoints: {late:?}");
    assert!(late.iter().all(|(_, from, to)| *to - *from >= Offset(512)), "each carries more text: {late:?}");
    let quiet = at_a_pace(&mut d, 200, |_| 20);
    assert_eq!(d.stream.checkpoint_stretch(), 1.0, "quiet again: the configured cadence");
    let last = &quiet[quiet.len() - 4..];
    assert!(last.windows(2).all(|w| w[1].0 - w[0].0 <= Millis(800)), "750 ms from the next change: {last:?}");
    let _flushed = d.flush();
    d.answer_all();
    assert_eq!(d.db.durable_text(STREAM), "abcdefghij".repeat(d.stream.seq().0 as usize / 10), "the same text, whatever the cadence");
}

#[test]
fn an_overload_is_retried_with_jitter_and_never_fails_a_flush_that_commits_later() {
    let mut d = Driver::open(StreamConfig::default());
    d.push("hello");
    let flush = d.flush();
    let mut delays = vec![];
    while d.now < Timestamp(20_000) {
        assert_eq!(d.peek_kind(), Some(OpKind::Checkpoint), "the same round, again (turned away before it ran: no read-back)");
        delays.push(fail_and_wait(&mut d, overloaded()));
    }
    for (i, delay) in delays.iter().enumerate() {
        let full = Millis(50 << i.min(10)).min(LOAD_BACKOFF_MAX);
        assert!(*delay >= full / 2 && *delay <= full, "retry {i} after {delay}, within [{}, {full}]", full / 2);
    }
    assert_eq!(d.outcome(flush), None, "the flush still waits: the write may yet commit");
    d.answer(Fault::None);
    assert_eq!(d.outcome(flush), Some(&Ok(Offset(5))));
    assert!(d.stream.checkpoint_stretch() > 1.0, "the overloads stretched the cadence");

    // Seeded differently, a stream that failed at the same moments comes back at other ones.
    let mut other = Driver::open(StreamConfig::default());
    other.stream.seed_jitter(42);
    other.push("hello");
    let _flushed = other.flush();
    other.fail_next(overloaded());
    other.advance(50);
    other.fail_next(overloaded());
    let mut same = Driver::open(StreamConfig::default());
    same.push("hello");
    let _flushed = same.flush();
    same.fail_next(overloaded());
    same.advance(50);
    same.fail_next(overloaded());
    assert_ne!(other.stream.poll_timeout(), same.stream.poll_timeout(), "the jitter comes from the host's seed");
}

#[test]
fn a_flush_under_load_is_answered_once_the_patience_runs_out_and_the_round_goes_on() {
    let cfg = StreamConfig { store_patience_ms: Millis(5_000), ..StreamConfig::default() };
    let mut d = Driver::open(cfg);
    d.push("hello");
    let flush = d.flush();
    let started = d.now;
    while d.outcome(flush).is_none() {
        fail_and_wait(&mut d, overloaded());
    }
    let waited = d.now - started;
    assert!(waited >= Millis(5_000) && waited <= Millis(5_000) + LOAD_BACKOFF_MAX, "answered after {waited}");
    match d.outcome(flush) {
        Some(Err(FlushError::CheckpointFailed { seq, durable_seq, reason: CheckpointError::Store(StoreError::Overloaded(_)) })) => {
            assert_eq!((*seq, *durable_seq), (Offset(5), Offset(0)))
        }
        other => panic!("{other:?}"),
    }
    // The text stays, and the next round commits it.
    d.advance(20_000);
    d.answer_all();
    assert_eq!(d.stream.durable_seq(), Offset(5));
    assert_eq!(d.db.durable_text(STREAM), "hello");
}

#[test]
fn a_timeout_is_load_and_its_read_back_decides_what_landed() {
    let mut d = Driver::open(StreamConfig::default());
    d.push("hello");
    let flush = d.flush();
    d.answer(Fault::CommitThenLoseReply); // the write commits; its answer is lost
    for _ in 0..6 {
        assert_eq!(d.peek_kind(), Some(OpKind::ReadState), "it may have committed: read the row");
        fail_and_wait(&mut d, StoreError::TimedOut(Millis(15_000))); // the read-back gets no answer in time
        assert_eq!(d.fail_next(StoreError::TimedOut(Millis(15_000))), OpKind::Checkpoint, "the replay, no answer either");
    }
    assert_eq!(d.outcome(flush), None, "six timeouts in a row: still within the patience");
    d.answer_all();
    assert_eq!(d.outcome(flush), Some(&Ok(Offset(5))));
    assert_eq!(d.db.chunk_count(STREAM), 1, "the replays did not duplicate the chunk");
}

#[test]
fn an_open_under_load_waits_and_opens() {
    let db = SqliteDb::new();
    db.insert_message(STREAM);
    let mut d = Driver::opening(db, StreamConfig::default(), TOKEN);
    for _ in 0..8 {
        assert_eq!(d.peek_kind(), Some(OpKind::ProbeOpen));
        fail_and_wait(&mut d, overloaded());
    }
    d.answer(Fault::None);
    d.arm_lease(Ok(()));
    for _ in 0..8 {
        assert_eq!(d.peek_kind(), Some(OpKind::MarkStreaming));
        fail_and_wait(&mut d, overloaded());
    }
    d.answer_all();
    let opened = d.settled.values().find_map(|s| <OpenOutcome as support::driver::Settles>::of(s)).cloned();
    assert_eq!(opened, Some(Ok(())), "opened after {} of overloads", d.now - Timestamp(0));
    assert_eq!(d.db.status(STREAM), "streaming");
}

#[test]
fn a_close_under_load_waits_and_seals_complete() {
    let mut d = Driver::open(StreamConfig::default());
    d.push("the whole answer");
    let close = d.close();
    let started = d.now;
    while d.now - started < Millis(12_000) {
        assert_eq!(d.peek_kind(), Some(OpKind::Seal));
        fail_and_wait(&mut d, overloaded());
    }
    assert_eq!(d.outcome(close), None, "the close waits: the seal may yet commit");
    d.answer_all();
    let report = SealReport { status: EndStatus::Complete, seq: Offset(16), durable_seq: Offset(16) };
    assert_eq!(d.outcome(close), Some(&Ok(report)));
    assert_eq!((d.db.status(STREAM), d.db.durable_text(STREAM)), ("complete".into(), "the whole answer".into()));
}

#[test]
fn a_refusal_keeps_its_three_fixed_retries_and_without_patience_so_does_load() {
    for (cfg, error) in [
        (StreamConfig::default(), StoreError::NotCommitted("D1_ERROR: constraint failed".into())),
        (StreamConfig { store_patience_ms: Millis::ZERO, ..StreamConfig::default() }, overloaded()),
    ] {
        let mut d = Driver::open(cfg);
        d.push("hello");
        let flush = d.flush();
        for delay in [50, 100, 200] {
            d.fail_next(error.clone());
            if d.peek_kind() == Some(OpKind::ReadState) {
                d.fail_next(error.clone()); // tables read a refused write back: it fails too
            }
            assert_eq!(d.stream.poll_timeout(), Some(d.now + Millis(delay)), "SPEC §5's schedule, unjittered");
            d.advance(delay);
        }
        d.fail_next(error.clone());
        if d.peek_kind() == Some(OpKind::ReadState) {
            d.fail_next(error.clone());
        }
        assert!(matches!(d.outcome(flush), Some(Err(FlushError::CheckpointFailed { .. }))), "{error}: {:?}", d.outcome(flush));
    }
}
