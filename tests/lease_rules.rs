//! The lease alarm's rules (SPEC §7), on the core's own machine ([`LeaseAlarm`]) against real
//! SQLite: the shell (edge/lease.rs) and the simulator drive this same machine. Each rule is
//! named for what it guards against, and fails without its code (noted per test).

mod support;

use rindle_streams::engine::durable::Tables;
use rindle_streams::engine::host::config::StreamConfig;
use rindle_streams::engine::host::hook::{SealCause, StreamNotice};
use rindle_streams::engine::host::store::StoreError;
use rindle_streams::engine::host::time::{Millis, Timestamp};
use rindle_streams::engine::live::lease::{mark_window, AlarmOutput, ArmedLease, Holding, LeaseAlarm, Release, Renewal, StorageError};
use rindle_streams::engine::text::utf16::Offset;
use rindle_streams::engine::wire::frame::EndStatus;
use std::rc::Rc;
use support::{run_alarm, Fault, SqliteDb, Store};

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
    db.batch(&[db.sql().mark_streaming(ID, TOKEN)]).unwrap();
    db.batch(&db.sql().append(ID, Offset(0), Offset(5), "hello")).unwrap();
    (db, tables)
}

fn keys() -> Result<ArmedLease, StorageError> {
    Ok(ArmedLease { stream_id: Some(ID.into()), host_token: Some(TOKEN.into()), armed_at: Some(ARMED) })
}

/// Long after the lease was armed: no mark of its open can land any more.
fn later() -> Timestamp {
    ARMED + mark_window(&StreamConfig::default()) + Millis(1)
}

fn alarm(tables: &Tables, keys: Result<ArmedLease, StorageError>, now: Timestamp, faults: &[Fault]) -> support::AlarmRun {
    run_alarm(tables, ID, &StreamConfig::default(), keys, &|| Holding::Nothing, now, &mut faults.iter().copied())
}

/// Without it `stored()` turned a storage error into "nothing armed" and released: the row
/// stayed `streaming` for ever.
#[test]
fn a_storage_error_renews_the_lease_and_never_releases_it() {
    let (db, tables) = abandoned();
    let run = alarm(&tables, Err(StorageError("storage unavailable".into())), later(), &[]);
    assert!(matches!(run.ended, Err(Renewal::StorageFailed(_))), "{:?}", run.ended);
    assert_eq!(db.status(ID), "streaming", "nothing decided on unknown keys");
    // The renewed alarm, its storage back, seals the row.
    let run = alarm(&tables, keys(), later(), &[]);
    assert_eq!(run.ended, Ok(Release::NotStreaming { status: "interrupted".into() }));
    assert_eq!((db.status(ID), db.durable_text(ID)), ("interrupted".into(), "hello".into()));
}

#[test]
fn nothing_armed_releases_without_a_store_call() {
    let (_, tables) = abandoned();
    let run = alarm(&tables, Ok(ArmedLease::default()), later(), &[Fault::FailBeforeCommit]);
    assert_eq!(run.ended, Ok(Release::NothingArmed));
}

/// A store call that fails (or times out: the shell answers it `MayHaveCommitted`) renews; the
/// row never leaves `streaming` unsealed.
#[test]
fn a_failed_row_read_or_seal_renews_and_the_next_alarm_seals() {
    let (db, tables) = abandoned();
    for faults in [&[Fault::FailBeforeCommit][..], &[Fault::None, Fault::FailBeforeCommit]] {
        let run = alarm(&tables, keys(), later(), faults);
        assert!(matches!(run.ended, Err(Renewal::StoreFailed(_))), "{:?}", run.ended);
        assert_eq!(db.status(ID), "streaming");
    }
    // A seal that committed but whose reply was lost (a timeout) renews too; the next alarm
    // finds the row sealed and releases.
    let run = alarm(&tables, keys(), later(), &[Fault::None, Fault::CommitThenLoseReply]);
    assert!(matches!(run.ended, Err(Renewal::StoreFailed(StoreError::MayHaveCommitted(_)))), "{:?}", run.ended);
    assert_eq!(db.status(ID), "interrupted");
    let run = alarm(&tables, keys(), later(), &[]);
    assert_eq!(run.ended, Ok(Release::NotStreaming { status: "interrupted".into() }));
}

/// Without `armedAt` the alarm released a row not yet `streaming` while the open's mark was
/// still in flight; the mark then landed and the row stayed `streaming` with no alarm.
#[test]
fn a_row_not_yet_streaming_keeps_the_lease_while_a_mark_may_be_in_flight() {
    let (row, tables) = db();
    let run = alarm(&tables, keys(), ARMED + Millis(10_000), &[]);
    assert_eq!(run.ended, Err(Renewal::MarkMayBeInFlight));
    // The mark lands after all: the next alarm seals the row.
    row.batch(&[row.sql().mark_streaming(ID, TOKEN)]).unwrap();
    let run = alarm(&tables, keys(), ARMED + Millis(20_000), &[]);
    assert_eq!(run.ended, Ok(Release::NotStreaming { status: "interrupted".into() }));
    assert_eq!(row.status(ID), "interrupted");
    // A row never marked is released once no mark can land.
    let (_, tables) = db();
    assert_eq!(alarm(&tables, keys(), later(), &[]).ended, Ok(Release::NotStreaming { status: "pending".into() }));
}

/// Without the guard the lease's seal overwrote a row its producer sealed `complete` between
/// the alarm's read and its write (and a compaction deleted the chunk rows that were its text).
#[test]
fn the_interrupted_seal_never_overwrites_a_row_sealed_meanwhile() {
    let (db, tables) = abandoned();
    let mut alarm = LeaseAlarm::fire(StreamConfig::default());
    let mut notices = Vec::new();
    let mut sealed_meanwhile = false;
    let ended = loop {
        match alarm.poll_output().expect("the run ends with a renewal or a release") {
            AlarmOutput::ReadKeys => alarm.handle_keys(keys(), &Holding::Nothing, later()),
            AlarmOutput::Store(request) => {
                if request.kind() == rindle_streams::engine::host::store::OpKind::Seal && !sealed_meanwhile {
                    // The producer, alive elsewhere after all, seals first.
                    db.batch(&[db.sql().seal_in_place(ID, EndStatus::Complete, None)]).unwrap();
                    sealed_meanwhile = true;
                }
                let answer = support::answer(&tables, ID, request, Fault::None);
                alarm.handle_store(answer, &Holding::Nothing, later());
            }
            AlarmOutput::Notice(n) => notices.push(n),
            AlarmOutput::Renew(r) => panic!("renewed: {r:?}"),
            AlarmOutput::Release(r) => break r,
            AlarmOutput::SealRepaired => panic!("nothing to repair"),
        }
    };
    assert!(sealed_meanwhile);
    assert_eq!(ended, Release::NotStreaming { status: "complete".into() });
    assert_eq!((db.status(ID), db.durable_text(ID), db.chunk_count(ID)), ("complete".into(), "hello".into(), 1));
    assert!(notices.is_empty(), "no interrupted notice for a seal that did not apply: {notices:?}");
}

/// The hook hears the true cause: the lease's seal is `LeaseExpired` (the idle producer's and
/// the pump's own causes are in live_rules).
#[test]
fn the_lease_seal_is_told_to_the_hook_as_lease_expired() {
    let (_, tables) = abandoned();
    let run = alarm(&tables, keys(), later(), &[]);
    assert_eq!(run.notices, [StreamNotice::Interrupted { stream_id: ID.into(), durable_seq: Offset(5), cause: SealCause::LeaseExpired }]);
}

/// A late reply (after the shell answered the call as timed out) changes nothing.
#[test]
fn a_late_reply_after_a_timeout_is_ignored() {
    let (db, tables) = abandoned();
    let mut alarm = LeaseAlarm::fire(StreamConfig::default());
    let _ = alarm.poll_output();
    alarm.handle_keys(keys(), &Holding::Nothing, later());
    let Some(AlarmOutput::Store(read)) = alarm.poll_output() else { panic!("the row is read") };
    let timed_out = read.failed(StoreError::MayHaveCommitted("no answer in 15000 ms".into()));
    let late = support::answer(&tables, ID, read, Fault::None);
    alarm.handle_store(timed_out, &Holding::Nothing, later());
    assert!(matches!(alarm.poll_output(), Some(AlarmOutput::Renew(Renewal::StoreFailed(_)))));
    alarm.handle_store(late, &Holding::Nothing, later());
    assert!(alarm.poll_output().is_none() && alarm.is_done());
    assert_eq!(db.status(ID), "streaming", "the next alarm seals it");
}
