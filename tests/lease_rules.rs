//! The lease alarm's rules (SPEC §7) and the revival's (SPEC §10), on the core's own machines
//! ([`LeaseAlarm`], [`Revival`]) against real SQLite, driven as the shell drives them
//! (`support::run_alarm`, `support::run_revival`). Each rule is named for what it guards
//! against; where a test would have failed before its code, the note says how.

mod support;

use rindle_streams::engine::durable::Tables;
use rindle_streams::engine::host::config::StreamConfig;
use rindle_streams::engine::host::hook::{SealCause, StreamNotice};
use rindle_streams::engine::host::time::{Millis, Timestamp};
use rindle_streams::engine::live::lease::{mark_window, Holding, Release, Renewal, Revived};
use rindle_streams::engine::live::{Caller, LiveStream, RevivalEnd, Revivals, Turn, Window};
use rindle_streams::engine::text::utf16::Offset;
use rindle_streams::engine::wire::frame::EndStatus;
use rindle_streams::engine::wire::ui::Format;
use std::rc::Rc;
use support::driver::Driver;
use support::{run_alarm, run_revival, SqliteDb, Step, Store, StoredStream};

const ID: &str = "m1";
const TOKEN: &str = "host-A";
const ARMED: Timestamp = Timestamp(1_000_000);

fn db() -> (Rc<SqliteDb>, Tables) {
    let db = Rc::new(SqliteDb::new());
    db.insert_message(ID);
    let tables = support::tables(&db);
    (db, tables)
}

/// A row this object marked and checkpointed ("hello"), then lost: nothing holds it here.
fn abandoned() -> (Rc<SqliteDb>, Tables) {
    let (db, tables) = db();
    db.batch(&[db.sql().mark_streaming(ID, TOKEN, Format::Text)]).unwrap();
    db.batch(&db.sql().append(ID, Offset(0), Offset(5), "hello", Some(TOKEN))).unwrap();
    (db, tables)
}

/// What the lease stored when the open armed it.
fn keys() -> StoredStream {
    StoredStream { armed_at: Some(ARMED), format: Some(Format::Text), ..support::armed(ID, Some(TOKEN)) }
}

/// Long after the lease was armed: no mark of its open can land any more.
fn later() -> Timestamp {
    ARMED + mark_window(&StreamConfig::default()) + Millis(1)
}

fn cfg() -> StreamConfig {
    StreamConfig::default()
}

/// One alarm in an instance that holds nothing, every step answered truthfully unless `steps`
/// says otherwise.
fn alarm(tables: &Tables, storage: &mut StoredStream, now: Timestamp, steps: &[Step]) -> support::AlarmRun {
    run_alarm(&mut Revivals::default(), tables, &cfg(), storage, false, Holding::Nothing, "fresh-1", now, &mut steps.iter().copied())
        .expect("no step dies")
}

fn rebuilt(run: support::AlarmRun) -> LiveStream {
    assert_eq!(run.ended, Err(Renewal::Alive), "rebuilt");
    run.revived.expect("the revival hands over the stream")
}

/// Without it a storage error was taken for "nothing armed" and released: the row stayed
/// `streaming` for ever.
#[test]
fn a_storage_error_renews_the_lease_and_never_releases_it() {
    let (db, tables) = abandoned();
    let mut storage = keys();
    let run = run_alarm(
        &mut Revivals::default(),
        &tables,
        &cfg(),
        &mut storage,
        true,
        Holding::Nothing,
        "fresh-1",
        later(),
        &mut std::iter::empty(),
    )
    .unwrap();
    assert!(matches!(run.ended, Err(Renewal::StorageFailed(_))), "{:?}", run.ended);
    assert_eq!(storage, keys(), "nothing forgotten on unknown keys");
    assert_eq!(db.status(ID), "streaming");
    // The renewed alarm, its storage back, rebuilds the stream.
    let stream = rebuilt(alarm(&tables, &mut storage, later(), &[]));
    assert_eq!((stream.seq(), stream.durable_seq()), (Offset(5), Offset(5)));
}

#[test]
fn nothing_armed_releases_without_a_store_call() {
    let (_, tables) = abandoned();
    let mut storage = StoredStream::default();
    let run = alarm(&tables, &mut storage, later(), &[Step::Fail]);
    assert_eq!(run.ended, Ok(Release::NothingArmed));
}

/// A revival step that fails (or times out: the shell answers it as failed) renews and never
/// seals: the window has not passed, and the producer may still resume. Before the revival was
/// the engine's, a failed rebuild fell through to the lease's own seal, `interrupted` at once.
#[test]
fn a_failed_revival_step_renews_and_never_seals() {
    // The steps: read the keys, read the row, store the claim's token, claim, store the outcome.
    for at in 0..5 {
        for fault in [Step::Fail, Step::ApplyThenLose] {
            let (db, tables) = abandoned();
            let mut storage = keys();
            let mut steps = vec![Step::Ok; at];
            steps.push(fault);
            let run = alarm(&tables, &mut storage, later(), &steps);
            assert!(matches!(run.ended, Err(Renewal::RevivalFailed(_))), "step {at} {fault:?}: {:?}", run.ended);
            assert!(run.revived.is_none());
            assert_eq!((db.status(ID), db.durable_text(ID)), ("streaming".into(), "hello".into()), "step {at} {fault:?}");
            // The next alarm rebuilds it, whatever the failed step left behind.
            let stream = rebuilt(alarm(&tables, &mut storage, later(), &[]));
            assert_eq!(stream.durable_seq(), Offset(5), "step {at} {fault:?}");
        }
    }
}

/// The instance dies at any step of its revival (before or after the step applied); the next
/// instance's revival rebuilds the stream and holds the row. Before the claim's token was stored
/// first, a claim that committed just before the reset left the next life comparing a stale
/// token: `NotOurs`, and the row stayed `streaming` for ever.
#[test]
fn an_instance_that_dies_at_any_revival_step_is_followed_by_one_that_rebuilds() {
    for at in 0..5 {
        for death in [Step::Die, Step::DieAfterApply] {
            let (db, tables) = abandoned();
            let mut storage = keys();
            let mut steps = vec![Step::Ok; at];
            steps.push(death);
            let died = run_revival(&tables, &cfg(), &mut storage, "fresh-1", later(), &mut steps.into_iter());
            assert!(died.is_none(), "step {at}: the instance died");
            let end = run_revival(&tables, &cfg(), &mut storage, "fresh-2", later(), &mut std::iter::empty());
            let Some(RevivalEnd::Revived(stream)) = end else { panic!("step {at} {death:?}: {end:?}") };
            assert_eq!(stream.durable_seq(), Offset(5));
            assert_eq!(db.message_column(ID, "host").as_text(), Some("fresh-2"), "step {at} {death:?}: the row is the new instance's");
            assert_eq!(storage.host_token.as_deref(), Some("fresh-2"));
            assert!(storage.claiming.is_empty(), "the claim's outcome is stored");
        }
    }
}

/// A revival's claim that timed out commits late, between the next revival's row read and its
/// claim: the row then holds a token this object stored (the earlier revival's), and the next
/// revival claims it from there. Before, it knew only the open's token and the last `claiming`
/// one as its own, took the moved row for `NotOurs`, and the alarm released it: the row stayed
/// `streaming` under the lost revival's token for ever.
#[test]
fn a_revivals_late_claim_landing_between_the_next_ones_read_and_claim_is_recognized() {
    let (db, tables) = abandoned();
    let mut storage = keys();
    // R1 stores its token and sends its claim, which does not answer in time (it has not
    // committed yet); the instance is given up.
    let died = run_revival(&tables, &cfg(), &mut storage, "fresh-1", later(), &mut [Step::Ok, Step::Ok, Step::Ok, Step::Die].into_iter());
    assert!(died.is_none());
    let late_claim = db.sql().claim_host(ID, TOKEN, "fresh-1").unwrap();
    // R2 reads the row (held by the open's token), stores its own token; R1's claim lands just
    // before R2's claim is sent.
    let mut land = |call: usize| {
        if call == 3 {
            assert_eq!(db.batch(std::slice::from_ref(&late_claim)).unwrap(), vec![1], "R1's claim lands");
        }
    };
    let end = support::run_revival_between(&tables, &cfg(), &mut storage, "fresh-2", later(), &mut std::iter::empty(), &mut land);
    let Some(RevivalEnd::Revived(stream)) = end else { panic!("R2 rebuilds the stream: {end:?}") };
    assert_eq!(stream.durable_seq(), Offset(5));
    assert_eq!(db.message_column(ID, "host").as_text(), Some("fresh-2"), "claimed from R1's token");
    assert_eq!(storage.host_token.as_deref(), Some("fresh-2"));
}

/// The lost instance's checkpoint lands between the revival's row read and its claim: the
/// stream is rebuilt from the row as the claim's own transaction left it (nothing fenced by the
/// old token can land after the claim), so its durable length is the row's.
#[test]
fn the_stream_is_rebuilt_from_the_row_as_the_claim_left_it() {
    let (db, tables) = abandoned();
    let mut storage = keys();
    let late = db.sql().append(ID, Offset(5), Offset(8), "abc", Some(TOKEN));
    let mut land = |call: usize| {
        if call == 3 {
            assert_eq!(db.batch(&late).unwrap(), vec![1, 1], "the lost instance's checkpoint lands before the claim");
        }
    };
    let end = support::run_revival_between(&tables, &cfg(), &mut storage, "fresh-1", later(), &mut std::iter::empty(), &mut land);
    let Some(RevivalEnd::Revived(stream)) = end else { panic!("{end:?}") };
    assert_eq!((stream.seq(), stream.durable_seq(), stream.retained_text().1), (Offset(8), Offset(8), "helloabc"));
    assert_eq!(db.batch(&late).unwrap(), vec![0, 0], "and nothing of the old token lands after the claim");
}

/// Each claimant draws its own token: two instances claiming from one token cannot both win.
/// With the deterministic next token both claims applied (`host IN (old, new)`) and both
/// instances believed they held the row.
#[test]
fn two_claimants_from_one_token_cannot_both_win() {
    let (db, tables) = abandoned();
    let (mut first, mut second) = (keys(), keys());
    let a = run_revival(&tables, &cfg(), &mut first, "fresh-a", later(), &mut std::iter::empty());
    let b = run_revival(&tables, &cfg(), &mut second, "fresh-b", later(), &mut std::iter::empty());
    assert!(matches!(a, Some(RevivalEnd::Revived(_))));
    assert!(matches!(b, Some(RevivalEnd::Nothing(Release::NotOurs { holder: Some(ref h) })) if h == "fresh-a"), "{b:?}");
    assert_eq!(db.message_column(ID, "host").as_text(), Some("fresh-a"));
}

/// A duplicated answer (a late failure after the real one) and a replayed claim change nothing.
#[test]
fn duplicated_store_answers_and_replayed_claims_are_harmless() {
    for at in 1..5 {
        let (db, tables) = abandoned();
        let mut storage = keys();
        let mut steps = vec![Step::Ok; at];
        steps.push(Step::Duplicate);
        let end = run_revival(&tables, &cfg(), &mut storage, "fresh-1", later(), &mut steps.into_iter());
        assert!(matches!(end, Some(RevivalEnd::Revived(_))), "step {at}: {end:?}");
        assert_eq!(db.message_column(ID, "host").as_text(), Some("fresh-1"));
    }
}

/// Without `armedAt` the alarm released a row not yet `streaming` while the open's mark was
/// still in flight; the mark then landed and the row stayed `streaming` with no alarm.
#[test]
fn a_row_not_yet_streaming_keeps_the_lease_while_a_mark_may_be_in_flight() {
    let (row, tables) = db();
    let mut storage = keys();
    let run = alarm(&tables, &mut storage, ARMED + Millis(10_000), &[]);
    assert_eq!(run.ended, Err(Renewal::MarkMayBeInFlight));
    // The mark lands after all: the next alarm rebuilds the stream, which waits for its producer.
    row.batch(&[row.sql().mark_streaming(ID, TOKEN, Format::Text)]).unwrap();
    rebuilt(alarm(&tables, &mut storage, ARMED + Millis(20_000), &[]));
    // A row never marked is released once no mark can land, and the keys are forgotten.
    let (_, tables) = db();
    let mut storage = keys();
    assert_eq!(alarm(&tables, &mut storage, later(), &[]).ended, Ok(Release::NotStreaming { status: "pending".into() }));
    assert_eq!(storage, StoredStream::default());
}

#[test]
fn another_producers_row_and_a_row_without_a_token_are_left_alone() {
    let (db, tables) = abandoned();
    db.exec("UPDATE messages SET host = 'host-B' WHERE id = 'm1'");
    let mut storage = keys();
    assert_eq!(alarm(&tables, &mut storage, later(), &[]).ended, Ok(Release::NotOurs { holder: Some("host-B".into()) }));
    let (db, tables) = abandoned();
    let mut storage = StoredStream { host_token: None, ..keys() };
    assert_eq!(alarm(&tables, &mut storage, later(), &[]).ended, Ok(Release::TokenUnknown));
    assert_eq!(db.status(ID), "streaming");
}

/// The window measures the producer's absence, not the instance's: the larger of
/// `RESUME_WINDOW_MS` from the rebuild and what remains of `IDLE_TIMEOUT_MS` since the
/// producer's last write; an earlier rebuild's window is kept; none configured, none waited.
#[test]
fn the_window_is_the_larger_of_the_resume_window_and_what_remains_of_the_idle_timeout() {
    let cfg = StreamConfig { resume_window_ms: Millis(30_000), idle_timeout_ms: Millis(300_000), ..cfg() };
    let now = Timestamp(1_000_000);
    let reset = Window::of(&cfg, None, Some(now - Millis(290_000)), now);
    assert_eq!(reset, Window { until: now + Millis(30_000), cause: SealCause::ResumeWindowExpired }, "a producer idle 290 s");
    let idle = Window::of(&cfg, None, Some(now - Millis(120_000)), now);
    assert_eq!(idle, Window { until: now + Millis(180_000), cause: SealCause::IdleProducer }, "evicted after 120 s of a tool call");
    assert_eq!(Window::of(&cfg, Some(idle), Some(now), now + Millis(5)), idle, "a second rebuild keeps the first one's");
    let no_idle = StreamConfig { idle_timeout_ms: Millis::ZERO, ..cfg.clone() };
    assert_eq!(Window::of(&no_idle, None, Some(now), now).cause, SealCause::ResumeWindowExpired);
    let none = StreamConfig { resume_window_ms: Millis::ZERO, ..cfg };
    assert_eq!(Window::of(&none, None, Some(now), now), Window { until: now, cause: SealCause::LeaseExpired });
}

/// An idle producer's stream evicted mid-tool-call is rebuilt with the window its idle timeout
/// leaves, and sealed only when that runs out, naming the cause: measured before on Postgres, an
/// eviction about 2 minutes into a pause sealed the answer `interrupted` 30 s later, claiming
/// the object had been reset.
#[test]
fn a_stream_evicted_while_its_producer_is_idle_waits_for_the_rest_of_the_idle_timeout() {
    let cfg = StreamConfig { checkpoint_chars: Offset(1), ..StreamConfig::default() };
    let mut d = Driver::open(cfg.clone());
    // The producer writes a minute after its open: a window counted from the lease's arming
    // (`armedAt`, 0) would end a minute early.
    d.advance(60_000);
    d.push("thinking…");
    d.answer_all();
    let last_write = d.now;
    d.advance(cfg.lease_ms.0); // a renewal stores the producer's last write
    assert_eq!(d.storage.last_write, Some(last_write));
    d.advance(120_000 - cfg.lease_ms.0);
    assert_eq!(d.alarm_after_reset(&cfg), Err(Renewal::Alive));
    let idle_end = last_write + cfg.idle_timeout_ms;
    assert_eq!(d.stream.resume_by(), Some(idle_end), "not now + RESUME_WINDOW_MS");
    d.advance(idle_end.0 - d.now.0 - 1);
    assert_eq!(d.db.status("m1"), "streaming", "the producer may still come back");
    d.advance(1);
    d.answer_all();
    assert_eq!(d.db.status("m1"), "interrupted");
    let notices: Vec<_> = d.events.iter().flat_map(|e| StreamNotice::of("m1", e)).collect();
    assert!(notices.iter().any(|n| matches!(n, StreamNotice::Interrupted { cause: SealCause::IdleProducer, .. })), "{notices:?}");
    assert_eq!(d.db.message_column("m1", "error").as_text(), Some("the producer sent nothing for 300 s"));
}

/// A reader comes before the open (a supported flow): its revival finds nothing armed. The
/// producer's open then arms the lease and its mark commits, but the reply is lost and the next
/// attempts fail in a store blip: the open ends failed and the stream retires, the row
/// `streaming` under the open's token. The lease alarm that follows must rebuild the row, never
/// take the reader's earlier "nothing to rebuild" for its own. Before, the shell remembered that
/// answer for the instance's life and the alarm got it: it released (keys and alarm deleted),
/// and nothing would ever seal the row.
#[test]
fn a_remembered_nothing_never_makes_the_alarm_release_a_row_an_open_marked_later() {
    let mut revivals = Revivals::default();
    let (db, tables) = db();
    let mut storage = StoredStream::default();
    let Turn::Run(reader) = revivals.begin(Caller::Request, false) else { panic!("the reader runs the first revival") };
    let end = run_revival(&tables, &cfg(), &mut storage, "fresh-0", ARMED, &mut std::iter::empty());
    assert!(matches!(end, Some(RevivalEnd::Nothing(Release::NothingArmed))), "{end:?}");
    revivals.finish(reader, end.as_ref().map(Revived::from).as_ref());
    // The open: installed here, its lease armed, its mark committed with the reply lost, then a
    // store blip until it gives up.
    let mut d = Driver::opening(Rc::clone(&db), cfg(), TOKEN);
    revivals.stream_installed();
    d.answer(support::Fault::None); // the probe
    d.arm_lease(Ok(()));
    assert_eq!(d.answer(support::Fault::CommitThenLoseReply), rindle_streams::engine::host::store::OpKind::MarkStreaming);
    while !d.retired {
        d.advance(1_000);
        if !d.pending.is_empty() {
            d.answer(support::Fault::FailBeforeCommit);
        }
    }
    assert_eq!(db.status(ID), "streaming");
    let mut storage = d.storage.clone();
    assert_eq!(storage.host_token.as_deref(), Some(TOKEN), "the lease stays armed: the mark may have landed");
    // The alarm, in the same instance (it holds no stream: the open retired).
    let run = support::run_alarm(
        &mut revivals,
        &tables,
        &cfg(),
        &mut storage,
        false,
        Holding::Nothing,
        "fresh-1",
        later(),
        &mut std::iter::empty(),
    )
    .expect("no step dies");
    let stream = rebuilt(run);
    assert_eq!(db.message_column(ID, "host").as_text(), Some("fresh-1"), "the row is the rebuilt stream's, which its window seals");
    assert!(stream.resume_by().is_some());
}

/// The producer writes a character a second for `secs` seconds, each committed.
fn write_for(d: &mut Driver, secs: u64) {
    for _ in 0..secs {
        d.push("x");
        d.answer_all();
        d.advance(1_000);
    }
}

/// The window never ends before the producer's last write + `IDLE_TIMEOUT_MS`, however the
/// reset falls: right after a pause that followed a long run of writes (no renewal has seen the
/// producer quiet yet), and after a pause that followed an earlier pause the lease stored. Before,
/// the lease stored the last write only once a renewal found the producer quiet and never
/// forgot it, and a revival without one counted from `armedAt`: the first reset waited 30 s from
/// the rebuild where the producer's idle timeout had 298 s left, the second counted from the first
/// pause.
#[test]
fn the_window_never_ends_before_the_last_write_plus_the_idle_timeout() {
    let cfg = StreamConfig { checkpoint_chars: Offset(1), ..StreamConfig::default() };
    for earlier_pause in [false, true] {
        let mut d = Driver::open(cfg.clone());
        write_for(&mut d, 100);
        if earlier_pause {
            d.advance(20_000); // a tool call: the lease stores the last write
            assert!(d.storage.last_write.is_some());
        }
        write_for(&mut d, 300);
        let last_write = d.now - Millis(1_000);
        d.advance(1_000); // the reset falls 2 s into the next pause
        assert_eq!(d.alarm_after_reset(&cfg), Err(Renewal::Alive));
        // What it costs: one put when a renewal first finds the producer quiet, one delete at
        // its first write after; none while it writes (the last pause is 2 s old: not seen yet).
        let pauses = u32::from(earlier_pause);
        assert_eq!((d.last_write_puts, d.last_write_deletes), (pauses, pauses), "earlier pause {earlier_pause}");
        let until = d.stream.resume_by().expect("a window");
        assert!(
            until >= last_write + cfg.idle_timeout_ms,
            "earlier pause {earlier_pause}: the window ends at {until:?}, the producer wrote last at {last_write:?}"
        );
    }
}

/// A write of the last write that fails (here the delete at the producer's first write after a
/// pause) leaves the storage in doubt: the next renewal deletes it again, so the stale last write
/// cannot shorten the window of a reset that falls later. Before, the failure was only logged: the
/// earlier pause's last write stayed stored, and the window ended 300 s too early.
#[test]
fn a_failed_write_of_the_last_write_is_written_again_at_the_next_renewal() {
    let cfg = StreamConfig { checkpoint_chars: Offset(1), ..StreamConfig::default() };
    let mut d = Driver::open(cfg.clone());
    write_for(&mut d, 10);
    d.advance(20_000); // a tool call: the lease stores the last write
    let paused_at = d.storage.last_write.expect("the pause's last write is stored");
    d.failing_last_writes = 1; // the delete at the next write fails
    write_for(&mut d, 300);
    assert_eq!(d.last_write_deletes, 2, "the failed delete was made again at the next renewal");
    assert_eq!(d.storage.last_write, None, "the stale last write ({paused_at:?}) is gone");
    let last_write = d.now - Millis(1_000);
    d.advance(1_000);
    assert_eq!(d.alarm_after_reset(&cfg), Err(Renewal::Alive));
    let until = d.stream.resume_by().expect("a window");
    assert!(until >= last_write + cfg.idle_timeout_ms, "the window ends at {until:?}, the producer wrote last at {last_write:?}");
}

/// A late reply (after the shell answered the call as timed out) changes nothing.
#[test]
fn a_late_reply_after_a_timeout_is_ignored() {
    let (db, tables) = abandoned();
    let mut storage = keys();
    let mut revival = rindle_streams::engine::live::Revival::start(cfg(), "fresh-1".into());
    let _ = revival.poll_output();
    revival.handle_keys(Ok(storage.clone()));
    let Some(rindle_streams::engine::live::RevivalOutput::Store(read)) = revival.poll_output() else { panic!("the row is read") };
    let timed_out = read.failed(rindle_streams::engine::host::store::StoreError::MayHaveCommitted("no answer in 15000 ms".into()));
    let late = support::answer(&tables, ID, read, support::Fault::None);
    revival.handle_store(timed_out, later());
    assert!(matches!(revival.take_end(), Some(RevivalEnd::Failed(_))));
    revival.handle_store(late, later());
    assert!(revival.poll_output().is_none() && revival.take_end().is_none(), "decided once");
    assert_eq!(db.status(ID), "streaming", "the next alarm rebuilds it");
    rebuilt(alarm(&tables, &mut storage, later(), &[]));
}

/// With no resume window the rebuilt stream seals at once, through its one sealer, and the
/// hook hears `LeaseExpired`.
#[test]
fn without_a_resume_window_the_rebuilt_stream_seals_at_once_as_lease_expired() {
    let (db, tables) = abandoned();
    let at_once = StreamConfig { resume_window_ms: Millis::ZERO, ..cfg() };
    let mut storage = keys();
    let run = run_alarm(
        &mut Revivals::default(),
        &tables,
        &at_once,
        &mut storage,
        false,
        Holding::Nothing,
        "fresh-1",
        later(),
        &mut std::iter::empty(),
    )
    .unwrap();
    let mut d = Driver::with_stream(rebuilt(run), Rc::clone(&db));
    d.now = later();
    d.advance(0);
    d.answer_all();
    assert_eq!((db.status(ID), db.durable_text(ID)), ("interrupted".into(), "hello".into()));
    let notices: Vec<_> = d.events.iter().flat_map(|e| StreamNotice::of(ID, e)).collect();
    assert_eq!(notices, [StreamNotice::Interrupted { stream_id: ID.into(), durable_seq: Offset(5), cause: SealCause::LeaseExpired }]);
    assert_eq!(d.stream.state(), rindle_streams::engine::live::StreamState::Ended(EndStatus::Interrupted));
}
