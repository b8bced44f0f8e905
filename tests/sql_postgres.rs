//! The plane's SQL in the Postgres dialect, executed on a real PostgreSQL (the cluster
//! `scripts/pg.sh` starts; `RINDLE_PG_URL`), bound as the Worker's executor binds it: every
//! statement of the plan does what the protocol needs, under replay and under two hosts racing.
//!
//! Without `RINDLE_PG_URL` these tests say loudly that they did not run and return (a plain
//! `cargo test` on a machine without the cluster); `scripts/test.sh` always starts the cluster,
//! sets it, and sets `RINDLE_PG_REQUIRED`, under which a missing URL fails them: there they run
//! or fail, never skip.

mod support;

use postgres::Client;
use rindle_streams::engine::durable::{
    judge_host, judge_probe, ColumnNames, ColumnValue, Dialect, MappedSql, OpenProbe, OpenRefused, Row, RowState, Statement, TableMapping,
    TablesOp, Value,
};
use rindle_streams::engine::host::config::StreamConfig;
use rindle_streams::engine::host::store::{Checkpoint, ReadState, RowGuard, StoreError};
use rindle_streams::engine::host::time::Timestamp;
use rindle_streams::engine::live::lease::{self, Release};
use rindle_streams::engine::live::RevivalEnd;
use rindle_streams::engine::text::utf16::{self, Offset};
use rindle_streams::engine::wire::frame::EndStatus;
use rindle_streams::engine::wire::ui::Format;
use std::rc::Rc;
use support::pg::{self, PgDb};
use support::{Fault, Store};

const ID: &str = "m1";

/// A fresh schema with the example row `m1`; returns from the test (after a loud note) when no
/// cluster is configured.
macro_rules! db {
    ($test:expr) => {
        match PgDb::new($test) {
            Some(db) => {
                db.insert_message(ID);
                Rc::new(db)
            }
            None => return,
        }
    };
    ($test:expr, streaming) => {{
        let db = db!($test);
        mark(&db);
        db
    }};
}

/// The producer holding the example row in these tests.
const HOST: &str = "A";

/// Marks the example row `streaming` under [`HOST`], as its open would.
fn mark(db: &PgDb) {
    assert_eq!(db.batch(&[db.sql.mark_streaming(ID, HOST, Format::Text)]).unwrap(), vec![1]);
}

fn seq(db: &PgDb) -> ColumnValue {
    db.message_column(ID, "seq")
}

/// A checkpoint's statement as the row's holder sends it.
fn append(db: &PgDb, from: u64, to: u64, text: &str) -> Vec<u64> {
    let batch = db.sql.append(ID, Offset(from), Offset(to), text, Some(HOST));
    db.batch(&batch).unwrap()
}

fn state(seq: u64, cancel: bool) -> RowState {
    RowState { seq: Offset(seq), cancel }
}

/// Performs `op` on row `id` through the mapped tables on `db`, as they answer a stream.
fn perform<Op: TablesOp>(db: &Rc<PgDb>, id: &str, op: &Op) -> Result<Op::Reply, StoreError> {
    support::perform(&support::tables(db), id, op, Fault::None)
}

/// What one checkpoint answers (the row as its own transaction left it).
fn checkpoint(db: &Rc<PgDb>, from: u64, to: u64, text: &str) -> RowState {
    perform(db, ID, &Checkpoint { from: Offset(from), to: Offset(to), text: text.into(), host_token: Some(HOST.into()) }).unwrap()
}

#[test]
fn the_chunk_migration_is_exactly_the_generated_ddl() {
    let generated: String =
        MappedSql::new(TableMapping::example(), Dialect::Postgres).chunk_table_ddl().iter().map(|s| format!("{s};\n")).collect();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/postgres/0002_message_chunks.sql");
    assert_eq!(std::fs::read_to_string(path).unwrap(), generated);
}

#[test]
fn the_postgres_dialect_has_its_placeholders_types_and_one_checkpoint_statement() {
    let pg = MappedSql::new(TableMapping::example(), Dialect::Postgres);
    let ddl = pg.chunk_table_ddl();
    assert!(ddl[0].contains("\"seq\" bigint NOT NULL") && ddl[0].contains("\"text\" text NOT NULL"), "{}", ddl[0]);
    let [checkpoint] = <[Statement; 1]>::try_from(pg.append(ID, Offset(0), Offset(5), "hello", Some(HOST))).expect("one statement");
    assert_eq!(
        checkpoint.sql,
        r#"WITH "swapped" AS (UPDATE "messages" SET "seq" = $1 WHERE "id" = $2 AND "status" = $3 AND "seq" = $4 AND "host" = $5 RETURNING 1) INSERT INTO "message_chunks" ("id", "streamId", "seq", "text") SELECT $6, $7, $8, $9 FROM "swapped""#
    );
    assert_eq!(pg.request_cancel(ID).unwrap().params[0], Value::Bool(true));
}

#[test]
fn every_statement_of_the_plan_runs_on_postgres() {
    let db = db!("every_statement");
    let sql = db.sql.clone();
    let probe = &db.query(&sql.probe_open(ID))[0];
    assert_eq!((probe["seq"].clone(), probe["status"].clone()), (ColumnValue::Integer(0), ColumnValue::Text("pending".into())));
    assert_eq!(db.batch(&[sql.mark_streaming(ID, "A", Format::Text)]).unwrap(), vec![1]);
    assert_eq!(db.query(&sql.read_host(ID).unwrap())[0]["host"], ColumnValue::Text("A".into()));
    assert_eq!(checkpoint(&db, 0, 5, "hello"), state(5, false));
    assert_eq!(perform(&db, ID, &ReadState).unwrap(), state(5, false));
    assert_eq!(db.batch(&[sql.request_cancel(ID).unwrap()]).unwrap(), vec![1]);
    assert_eq!(perform(&db, ID, &ReadState).unwrap(), state(5, true), "a boolean flag reads as true");
    let chunks = db.query(&sql.read_chunks(ID));
    assert_eq!((chunks[0]["seq"].clone(), chunks[0]["text"].clone()), (ColumnValue::Integer(5), ColumnValue::Text("hello".into())));
    let guard = |seq: u64| RowGuard { durable_seq: Offset(seq), host_token: Some("A".into()) };
    db.batch(&sql.seal(ID, None, EndStatus::Cancelled, None, &guard(5))).unwrap();
    assert_eq!(db.status(ID), "cancelled");
    db.exec("UPDATE messages SET status = 'streaming'");
    db.batch(&sql.seal(ID, Some("hello!"), EndStatus::Cancelled, Some("stopped"), &guard(5))).unwrap();
    let row = &db.query(&sql.read_row(ID))[0];
    assert_eq!(row["body"], ColumnValue::Text("hello!".into()));
    assert_eq!(row["seq"], ColumnValue::Integer(6));
    assert_eq!(row["error"], ColumnValue::Text("stopped".into()));
    assert_eq!(db.chunk_count(ID), 0);
}

#[test]
fn the_append_inserts_the_slice_and_swaps_the_length() {
    let db = db!("append", streaming);
    append(&db, 0, 5, "hello");
    assert_eq!(seq(&db), ColumnValue::Integer(5));
    append(&db, 5, 7, "😀");
    assert_eq!(db.durable_text(ID), "hello😀");
    assert_eq!(db.chunk_count(ID), 2);
}

#[test]
fn the_guarded_insert_is_idempotent() {
    let db = db!("idempotent", streaming);
    let batch = db.sql.append(ID, Offset(0), Offset(5), "hello", Some(HOST));
    db.batch(&batch).unwrap();
    for _ in 0..3 {
        assert_eq!(db.batch(&batch).unwrap().iter().sum::<u64>(), 0, "a replay changes nothing");
    }
    assert_eq!(db.chunk_count(ID), 1);
    assert_eq!(seq(&db), ColumnValue::Integer(5));
    assert_eq!(db.durable_text(ID), "hello");
}

#[test]
fn a_stale_re_cover_lands_no_overlapping_chunk() {
    let db = db!("stale_re_cover", streaming);
    append(&db, 0, 5, "hello");
    // A slice whose `from` lags the row (its predecessor's ack was lost): another chunk id, kept
    // out by the CAS on `seq = from` alone.
    assert_eq!(append(&db, 0, 8, "hello wo").iter().sum::<u64>(), 0);
    assert_eq!(db.chunk_count(ID), 1);
    assert_eq!(db.durable_text(ID), "hello");
}

#[test]
fn the_read_back_is_the_truth() {
    let db = db!("read_back", streaming);
    assert_eq!(checkpoint(&db, 0, 5, "hello"), state(5, false), "the write's own effect");
    assert_eq!(checkpoint(&db, 0, 5, "hello"), state(5, false), "a replay reads the same length");
    assert_eq!(checkpoint(&db, 0, 8, "hello wo"), state(5, false), "a stale re-cover reads what the row holds");
    // Another writer moved the row: the read-back reports the row, not what this write meant.
    db.exec("UPDATE messages SET seq = 9 WHERE id = 'm1'");
    assert_eq!(checkpoint(&db, 5, 7, "😀"), state(9, false), "a lost CAS reads the row's length");
    assert_eq!(db.chunk_count(ID), 1, "and lands no chunk");
    db.batch(&[db.sql.request_cancel(ID).unwrap()]).unwrap();
    assert_eq!(checkpoint(&db, 9, 11, "😀"), state(11, true), "and the cancel flag");
}

#[test]
fn a_failed_checkpoint_half_writes_nothing() {
    let db = db!("half_write", streaming);
    append(&db, 0, 5, "hello");
    // PostgreSQL's text cannot hold U+0000, so this statement fails inside the transaction: the
    // whole checkpoint rolls back (SQLite would store it; see docs/POSTGRES.md).
    let err = perform(&db, ID, &Checkpoint { from: Offset(5), to: Offset(8), text: "a\0b".into(), host_token: None }).unwrap_err();
    assert!(matches!(&err, StoreError::NotCommitted(e) if e.starts_with("22021")), "{err:?}");
    assert_eq!(seq(&db), ColumnValue::Integer(5));
    assert_eq!(db.chunk_count(ID), 1);
    assert_eq!(checkpoint(&db, 5, 8, "a b"), state(8, false), "and the next attempt lands");
}

#[test]
fn the_open_probe_and_mark_refuse_what_they_must() {
    let db = db!("open");
    let probe = |db: &PgDb| {
        let row = db.query(&db.sql.probe_open(ID)).into_iter().next();
        judge_probe(
            row.map(|r| OpenProbe {
                seq: r["seq"].clone(),
                status: match &r["status"] {
                    ColumnValue::Text(s) => Some(s.clone()),
                    _ => None,
                },
            })
            .as_ref(),
        )
    };
    assert_eq!(probe(&db), Ok(()));
    db.batch(&[db.sql.mark_streaming(ID, "A", Format::Text)]).unwrap();
    assert_eq!(db.batch(&[db.sql.mark_streaming(ID, "B", Format::Text)]).unwrap(), vec![0], "B finds the row held");
    assert_eq!(probe(&db), Err(OpenRefused::AlreadyStreaming));
    db.exec("ALTER TABLE messages ALTER COLUMN status DROP NOT NULL; UPDATE messages SET status = NULL WHERE id = 'm1'");
    assert_eq!(db.batch(&[db.sql.mark_streaming(ID, "C", Format::Text)]).unwrap(), vec![1], "a NULL status is claimed");
    let missing = db.query(&db.sql.probe_open("nobody"));
    assert!(missing.is_empty());
}

/// The mark refuses a sealed row by itself, with or without a host column (see the SQLite test
/// of the same name).
#[test]
fn a_mark_never_re_marks_a_sealed_row() {
    let mut without_host = TableMapping::example();
    without_host.host = None;
    for (n, mapping) in [TableMapping::example(), without_host].into_iter().enumerate() {
        let Some(db) = PgDb::with_schema(&format!("mark_sealed_{n}"), &pg::migration_sql(), mapping) else { return };
        for status in [EndStatus::Complete, EndStatus::Cancelled, EndStatus::Error, EndStatus::Interrupted] {
            let id = format!("m-{}", status.as_str());
            db.insert_message(&id);
            db.checkpoint_row(&id, "abc");
            db.seal_row(&id, Some("abc"), status, None);
            let host_before = db.message_column(&id, "host");
            assert_eq!(db.batch(&[db.sql.mark_streaming(&id, "late", Format::Text)]).unwrap(), vec![0], "{status:?}");
            assert_eq!((db.status(&id), db.message_column(&id, "host")), (status.as_str().to_owned(), host_before), "{status:?}");
        }
    }
}

/// Waits until the backend `pid` waits for a lock: the racing host is blocked behind the first
/// one's uncommitted write (polling the server's own view of it, not the clock).
fn await_lock_wait(observer: &mut Client, pid: i32) {
    for _ in 0..10_000 {
        let rows = observer.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", &[&pid]).unwrap();
        if !rows.is_empty() {
            return;
        }
        std::thread::yield_now();
    }
    panic!("backend {pid} never waited for the lock");
}

fn backend_pid(client: &mut Client) -> i32 {
    client.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

/// Host A runs `a` in an open transaction; host B runs `b` in its own, which must block behind
/// A's; A commits; B finishes. Returns B's change counts and read-back.
fn race(db: &PgDb, a: &[Statement], b: Vec<Statement>, b_read: Option<Statement>) -> (Vec<u64>, Vec<Row>) {
    let (mut host_a, mut host_b, mut observer) = (db.connect_again(), db.connect_again(), db.connect_again());
    let b_pid = backend_pid(&mut host_b);
    let mut tx = host_a.transaction().unwrap();
    for s in a {
        let (changes, _) = pg::transact_in(&mut tx, std::slice::from_ref(s), None).unwrap();
        assert_eq!(changes, vec![1], "A's write lands: {}", s.sql);
    }
    std::thread::scope(|scope| {
        let b_done = scope.spawn(move || pg::transact(&mut host_b, &b, b_read.as_ref()));
        await_lock_wait(&mut observer, b_pid);
        tx.commit().unwrap();
        b_done.join().unwrap().unwrap()
    })
}

#[test]
fn the_open_cas_race_between_two_hosts_has_one_winner() {
    let db = db!("open_race");
    let (changes, _) = race(&db, &[db.sql.mark_streaming(ID, "A", Format::Text)], vec![db.sql.mark_streaming(ID, "B", Format::Text)], None);
    assert_eq!(changes, vec![0], "B's mark, re-checked after A committed, claims nothing");
    let host = match &db.query(&db.sql.read_host(ID).unwrap())[0]["host"] {
        ColumnValue::Text(h) => h.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(judge_host("A", Some(&host)), Ok(()));
    assert_eq!(judge_host("B", Some(&host)), Err(OpenRefused::LostRace { holder: Some("A".into()) }));
}

#[test]
fn two_hosts_racing_one_checkpoint_land_exactly_one_slice() {
    // Same `from`, different slices (a split brain: two instances each believe they hold the
    // stream). B's transaction starts while A's is uncommitted; whatever B saw then, it must land
    // nothing once A's commit moved the row.
    let db = db!("checkpoint_race", streaming);
    let b_read = Some(db.sql.read_state(ID));
    let (changes, rows) = race(
        &db,
        &db.sql.append(ID, Offset(0), Offset(5), "hello", Some(HOST)),
        db.sql.append(ID, Offset(0), Offset(8), "hello wo", Some(HOST)),
        b_read,
    );
    assert_eq!(changes.iter().sum::<u64>(), 0, "B changed nothing: {changes:?}");
    assert_eq!(rows[0]["seq"], ColumnValue::Integer(5), "B's read-back tells it the truth");
    assert_eq!(db.chunk_count(ID), 1);
    assert_eq!(db.durable_text(ID), "hello");
}

#[test]
fn two_hosts_racing_the_same_slice_land_it_once() {
    let db = db!("same_slice_race", streaming);
    let batch = db.sql.append(ID, Offset(0), Offset(5), "hello", Some(HOST));
    let (changes, _) = race(&db, &batch, batch.clone(), None);
    assert_eq!(changes.iter().sum::<u64>(), 0, "{changes:?}");
    assert_eq!(db.chunk_count(ID), 1);
    assert_eq!(db.durable_text(ID), "hello");
}

/// Every checkpoint carries the fence on Postgres too (see the SQLite test of the same name).
#[test]
fn a_checkpoint_applies_only_to_a_row_streaming_under_its_host_token() {
    let late = |db: &PgDb, id: &str, token: &str| db.batch(&db.sql.append(id, Offset(3), Offset(6), "xyz", Some(token))).unwrap();
    let db = db!("checkpoint_fence");
    for (id, case) in [("m-claimed", "claimed"), ("m-sealed", "sealed")] {
        db.insert_message(id);
        db.batch(&[db.sql.mark_streaming(id, "A", Format::Text)]).unwrap();
        db.batch(&db.sql.append(id, Offset(0), Offset(3), "abc", Some("A"))).unwrap();
        match case {
            "claimed" => db.batch(&[db.sql.claim_host(id, "A", "B").unwrap()]).map(drop).unwrap(),
            _ => db.seal_row(id, Some("abc"), EndStatus::Complete, None),
        }
        assert_eq!(late(&db, id, "A"), vec![0], "{case}");
        let chunks = if case == "claimed" { 1 } else { 0 };
        let status = if case == "claimed" { "streaming" } else { "complete" };
        assert_eq!((db.status(id), db.durable_text(id), db.chunk_count(id)), (status.into(), "abc".into(), chunks), "{case}");
    }
    assert_eq!(late(&db, "m-claimed", "B"), vec![1], "the holder's own checkpoint lands");
    assert_eq!(db.durable_text("m-claimed"), "abcxyz");
}

#[test]
fn compaction_writes_the_body_and_deletes_the_chunks_in_one_transaction() {
    let db = db!("compaction");
    append(&db, 0, 3, "abc");
    append(&db, 3, 6, "def");
    db.seal_row(ID, Some("abcdef😀"), EndStatus::Complete, None);
    assert_eq!(db.chunk_count(ID), 0);
    assert_eq!(db.message_column(ID, "body"), ColumnValue::Text("abcdef😀".into()));
    assert_eq!(seq(&db), ColumnValue::Integer(8), "the length is in UTF-16 units");
    assert_eq!(db.status(ID), "complete");
    assert_eq!(db.message_column(ID, "error"), ColumnValue::Null);
    // Compaction repairs a row whose checkpoints failed, and a late replay after it lands nothing.
    assert_eq!(append(&db, 0, 3, "abc").iter().sum::<u64>(), 0);
    assert_eq!(db.durable_text(ID), "abcdef😀");
}

#[test]
fn surrogate_pairs_and_grapheme_clusters_at_chunk_edges() {
    let db = db!("surrogates", streaming);
    // Chunk edges right before and after astral characters, and a ZWJ sequence and a combining
    // mark cut across chunks, as the checkpoint slicer cuts them.
    let slices = ["a😀", "😀b", "👩", "\u{200D}💻", "e", "\u{301}", "🇫", "🇷", "𝄞"];
    let mut from = Offset(0);
    let mut produced = String::new();
    for s in slices {
        let to = from + utf16::len(s);
        assert_eq!(checkpoint(&db, from.0, to.0, s), state(to.0, false));
        produced.push_str(s);
        from = to;
    }
    assert_eq!(db.durable_text(ID), produced);
    let seqs: Vec<_> = db.query(&db.sql.read_chunks(ID)).iter().map(|r| r["seq"].as_offset().unwrap()).collect();
    assert_eq!(seqs, [3, 6, 8, 11, 12, 13, 15, 17, 19].map(Offset));
    db.seal_row(ID, Some(&produced), EndStatus::Complete, None);
    assert_eq!(seq(&db), ColumnValue::Integer(utf16::len(&produced).0 as i64));
    assert_eq!(db.durable_text(ID), produced);
}

#[test]
fn bodies_of_2_mb_checkpoint_and_compact() {
    let db = db!("two_mb", streaming);
    let unit = "the stream 😀 日本語 ";
    let body = unit.repeat(2 * 1024 * 1024 / unit.len() + 1);
    assert!(body.len() >= 2 * 1024 * 1024);
    let n = utf16::len(&body).0;
    assert_eq!(checkpoint(&db, 0, n, &body), state(n, false), "one slice of 2 MB");
    assert_eq!(db.durable_text(ID), body);
    let tail = "👍🏽";
    let whole = format!("{body}{tail}");
    db.seal_row(ID, Some(&whole), EndStatus::Complete, None);
    assert_eq!(db.chunk_count(ID), 0);
    assert_eq!(seq(&db), ColumnValue::Integer(utf16::len(&whole).0 as i64));
    assert_eq!(db.durable_text(ID), whole);
}

/// The revival on Postgres: an abandoned row is rebuilt from one durable read and claimed;
/// its window passes and the one sealer seals it `interrupted` from its durable text, compacted
/// or in place.
#[test]
fn an_abandoned_row_is_rebuilt_and_sealed_interrupted_from_its_durable_text() {
    for seals_in_place in [false, true] {
        let db = db!(if seals_in_place { "abandoned_in_place" } else { "abandoned_compacted" });
        // The object marked the row and checkpointed, then died: nothing holds the stream.
        db.batch(&[db.sql.mark_streaming(ID, "host-A", Format::Text)]).unwrap();
        db.checkpoint_row(ID, "hello");
        db.checkpoint_row(ID, "😀");
        let cfg = StreamConfig {
            max_compact_bytes: if seals_in_place { 4 } else { 1_900_000 },
            resume_window_ms: rindle_streams::engine::host::time::Millis::ZERO,
            ..StreamConfig::default()
        };
        let tables = support::tables(&db);
        let mut storage = support::armed(ID, Some("host-A"));
        let end = support::run_revival(&tables, &cfg, &mut storage, "fresh-1", Timestamp(0), &mut std::iter::empty());
        let Some(RevivalEnd::Revived(mut stream)) = end else { panic!("rebuilt: {end:?}") };
        assert_eq!(db.message_column(ID, "host"), ColumnValue::Text("fresh-1".into()), "claimed");
        support::drive_until_ended(&mut stream, &tables, Timestamp(0));
        assert_eq!(db.status(ID), "interrupted");
        assert_eq!(db.durable_text(ID), "hello😀", "the durable text, neither more nor less");
        assert_eq!(seq(&db), ColumnValue::Integer(7));
        assert!(matches!(db.message_column(ID, "error"), ColumnValue::Text(e) if e == lease::INTERRUPTED));
        assert_eq!(db.chunk_count(ID), if seals_in_place { 2 } else { 0 });
        let probe = &db.query(&db.sql.probe_open(ID))[0];
        let probe = OpenProbe { seq: probe["seq"].clone(), status: Some("interrupted".into()) };
        assert!(judge_probe(Some(&probe)).is_err());
    }
}

/// A revival's late claim landing between the next revival's read and its claim, on Postgres
/// (where a stuck call is dropped while its statement runs on): the next revival recognizes the
/// token as its own and claims the row from it (see the test of the same name in lease_rules.rs).
#[test]
fn a_revivals_late_claim_landing_between_the_next_ones_read_and_claim_is_recognized() {
    let db = db!("late_claim");
    db.batch(&[db.sql.mark_streaming(ID, "host-A", Format::Text)]).unwrap();
    db.checkpoint_row(ID, "hello");
    let tables = support::tables(&db);
    let cfg = StreamConfig::default();
    let mut storage = support::armed(ID, Some("host-A"));
    let first = [support::Step::Ok, support::Step::Ok, support::Step::Ok, support::Step::Die];
    assert!(support::run_revival(&tables, &cfg, &mut storage, "fresh-1", Timestamp(0), &mut first.into_iter()).is_none());
    let late_claim = db.sql.claim_host(ID, "host-A", "fresh-1").unwrap();
    let mut land = |call: usize| {
        if call == 3 {
            assert_eq!(db.batch(std::slice::from_ref(&late_claim)).unwrap(), vec![1], "the first revival's claim lands");
        }
    };
    let end = support::run_revival_between(&tables, &cfg, &mut storage, "fresh-2", Timestamp(0), &mut std::iter::empty(), &mut land);
    assert!(matches!(end, Some(RevivalEnd::Revived(ref s)) if s.durable_seq() == Offset(5)), "{end:?}");
    assert_eq!(db.message_column(ID, "host"), ColumnValue::Text("fresh-2".into()));
}

/// A Stop on the row before a reset, on Postgres (a boolean cancel column): the rebuild reads it
/// and seals the stream `cancelled`, and a resume learns it (see the SQLite test in
/// survival_rules.rs).
#[test]
fn a_stop_on_the_row_seals_the_rebuilt_stream_cancelled() {
    let db = db!("stop_before_reset");
    db.batch(&[db.sql.mark_streaming(ID, "host-A", Format::Text)]).unwrap();
    db.checkpoint_row(ID, "abc");
    db.batch(&[db.sql.request_cancel(ID).unwrap()]).unwrap();
    let tables = support::tables(&db);
    let mut storage = support::armed(ID, Some("host-A"));
    let end = support::run_revival(&tables, &StreamConfig::default(), &mut storage, "fresh-1", Timestamp(0), &mut std::iter::empty());
    let Some(RevivalEnd::Revived(mut stream)) = end else { panic!("rebuilt: {end:?}") };
    support::drive_until_ended(&mut stream, &tables, Timestamp(0));
    assert_eq!((db.status(ID), db.durable_text(ID)), ("cancelled".into(), "abc".into()));
    let refused = stream.resume(Some(1), None, Timestamp(0)).unwrap_err();
    assert!(matches!(refused, rindle_streams::engine::live::ResumeRefused::Closed { status: EndStatus::Cancelled, .. }), "{refused:?}");
}

#[test]
fn another_hosts_row_is_not_rebuilt() {
    let db = db!("not_ours");
    db.batch(&[db.sql.mark_streaming(ID, "host-B", Format::Text)]).unwrap();
    let tables = support::tables(&db);
    let mut storage = support::armed(ID, Some("host-A"));
    let end = support::run_revival(&tables, &StreamConfig::default(), &mut storage, "fresh-1", Timestamp(0), &mut std::iter::empty());
    assert!(matches!(end, Some(RevivalEnd::Nothing(Release::NotOurs { holder: Some(ref h) })) if h == "host-B"), "{end:?}");
}

#[test]
fn values_are_bound_never_spliced() {
    let db = db!("bound", streaming);
    let hostile = "'); DROP TABLE messages; -- \"quoted\" ?1 $1 \\ E'\\x00'";
    let n = utf16::len(hostile);
    let batch = db.sql.append(ID, Offset(0), n, hostile, Some(HOST));
    for s in &batch {
        assert!(!s.sql.contains("DROP") && !s.sql.contains(ID), "{}", s.sql);
    }
    db.batch(&batch).unwrap();
    assert_eq!(db.durable_text(ID), hostile);
}

/// An app's existing table, as Drizzle's chatbot template makes it: a `uuid` key, an `integer`
/// length, a `varchar` status, an integer cancel flag, an enum for the role, quoted names.
#[test]
fn an_existing_schema_with_its_own_column_types_works() {
    let names =
        ColumnNames::from_json(r#"{"key":"id","body":"content","seq":"streamSeq","status":"streamStatus","cancel":"stop","error":"errorText","host":"streamHost"}"#)
            .unwrap();
    let mapping = TableMapping::new("Message", "MessageChunk", &names).unwrap();
    let sql = MappedSql::new(mapping.clone(), Dialect::Postgres);
    let schema = format!(
        "CREATE TYPE role AS ENUM ('user', 'assistant');
         CREATE TABLE \"Message\" (\"id\" uuid PRIMARY KEY, \"chatId\" uuid NOT NULL, \"role\" role NOT NULL, \"content\" text NOT NULL DEFAULT '',
           \"streamStatus\" varchar(32), \"streamSeq\" integer NOT NULL DEFAULT 0, \"stop\" integer NOT NULL DEFAULT 0, \"errorText\" varchar,
           \"streamHost\" varchar(64), \"createdAt\" timestamp NOT NULL DEFAULT now());
         {};",
        sql.chunk_table_ddl().join(";\n")
    );
    let Some(db) = PgDb::with_schema("existing_schema", &schema, mapping).map(Rc::new) else { return };
    let id = "0b5f3a52-8f9e-4f53-9a8e-2f1d2b7c9e10";
    db.exec(&format!("INSERT INTO \"Message\" (id, \"chatId\", role) VALUES ('{id}', gen_random_uuid(), 'assistant')"));
    let probe = &db.query(&sql.probe_open(id))[0];
    assert_eq!((probe["seq"].clone(), probe["status"].clone()), (ColumnValue::Integer(0), ColumnValue::Null));
    assert_eq!(db.batch(&[sql.mark_streaming(id, "A", Format::Text)]).unwrap(), vec![1]);
    assert_eq!(
        perform(&db, id, &Checkpoint { from: Offset(0), to: Offset(2), text: "hi".into(), host_token: Some("A".into()) }).unwrap(),
        state(2, false)
    );
    db.batch(&[sql.request_cancel(id).unwrap()]).unwrap();
    assert_eq!(perform(&db, id, &ReadState).unwrap(), state(2, true), "an integer flag set to 1");
    db.seal_row(id, Some("hi!"), EndStatus::Cancelled, Some("stopped"));
    let row = &db.query(&sql.read_row(id))[0];
    assert_eq!(row["body"], ColumnValue::Text("hi!".into()));
    assert_eq!(row["seq"], ColumnValue::Integer(3));
    assert_eq!(row["status"], ColumnValue::Text("cancelled".into()));
    assert_eq!(row["error"], ColumnValue::Text("stopped".into()));
    assert!(db.query(&sql.read_chunks(id)).is_empty());
    // The one-statement durable read binds the uuid key and the text stream column apart.
    let durable = rindle_streams::engine::durable::durable_of_rows(&db.query(&sql.read_durable(id))).unwrap();
    assert_eq!((durable.text.as_str(), durable.seq, durable.status.as_str()), ("hi!", Offset(3), "cancelled"));
}

#[test]
fn a_status_column_of_an_enum_type_reads_as_text() {
    let schema =
        pg::migration_sql().replace("\"status\" text NOT NULL DEFAULT 'pending'", "\"status\" stream_status NOT NULL DEFAULT 'pending'");
    let schema =
        format!("CREATE TYPE stream_status AS ENUM ('pending', 'streaming', 'complete', 'cancelled', 'error', 'interrupted');\n{schema}");
    let Some(db) = PgDb::with_schema("enum_status", &schema, TableMapping::example()) else { return };
    db.insert_message(ID);
    assert_eq!(db.batch(&[db.sql.mark_streaming(ID, "A", Format::Text)]).unwrap(), vec![1]);
    assert_eq!(db.status(ID), "streaming");
    db.seal_row(ID, None, EndStatus::Complete, None);
    assert_eq!(db.query(&db.sql.read_row(ID))[0]["status"], ColumnValue::Text("complete".into()));
}

#[test]
fn the_chat_reads_run_on_postgres() {
    let db = db!("chat_reads");
    let tables = support::tables(&db);
    let streaming = |chat: &str| support::block_on(tables.streaming_in_chat(chat)).unwrap();
    assert_eq!(streaming("chat-1"), None, "pending is not streaming");
    db.batch(&[db.sql.mark_streaming(ID, "A", Format::Text)]).unwrap();
    assert_eq!(streaming("chat-1").as_deref(), Some(ID));
    assert_eq!(streaming("x' OR '1'='1"), None, "bound, never spliced");
    assert_eq!(support::block_on(tables.chat_of(ID)).unwrap().as_deref(), Some("chat-1"));
    assert_eq!(support::block_on(tables.chat_of("nope")).unwrap(), None);
    // The feed's check (SPEC §11): the chat's answers streaming, and the named ones.
    db.exec("INSERT INTO messages (id, chat_id, role, status, seq) VALUES ('done', 'chat-1', 'assistant', 'complete', 9), ('elsewhere', 'chat-2', 'assistant', 'streaming', 1)");
    let mut rows = support::block_on(tables.chat_answers("chat-1", &["done".into(), "gone".into()])).unwrap().unwrap();
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    let rows: Vec<_> = rows.into_iter().map(|r| (r.id, r.status, r.seq.0)).collect();
    assert_eq!(rows, [("done".into(), "complete".into(), 9), (ID.into(), "streaming".into(), 0)]);
}

#[test]
fn every_statement_is_small_and_every_value_a_parameter() {
    let long = "x".repeat(128);
    let names = ColumnNames { body: Some(long.clone()), ..Default::default() };
    let sql = MappedSql::new(TableMapping::new(&long, &long, &names).unwrap(), Dialect::Postgres);
    let big = "y".repeat(200_000);
    let mut all = sql.append(ID, Offset(0), Offset(1), &big, Some("t"));
    all.extend(sql.seal(
        ID,
        Some(&big),
        EndStatus::Complete,
        Some("e"),
        &RowGuard { durable_seq: Offset(0), host_token: Some("t".into()) },
    ));
    all.extend([sql.probe_open(ID), sql.read_state(ID), sql.read_row(ID), sql.read_chunks(ID)]);
    for s in all {
        assert!(s.sql.len() < 2_000, "{} bytes of SQL text", s.sql.len());
        assert!(!s.sql.contains('?'), "{}", s.sql);
    }
}

#[test]
fn the_durable_read_is_one_statement_and_a_revival_claim_has_one_winner() {
    use rindle_streams::engine::durable::durable_of_rows;
    use rindle_streams::engine::host::store::ClaimHost;
    let db = db!("durable_read_claim");
    let read = || durable_of_rows(&db.query(&db.sql.read_durable(ID))).unwrap();
    assert_eq!(db.batch(&[db.sql.mark_streaming(ID, "A", Format::Text)]).unwrap(), vec![1]);
    checkpoint(&db, 0, 3, "a😀");
    checkpoint(&db, 3, 8, "👍🏽b");
    let durable = read();
    assert_eq!((durable.text.as_str(), durable.seq, durable.status.as_str()), ("a😀👍🏽b", Offset(8), "streaming"));
    assert_eq!(durable.format, Some(Format::Text), "the format column the open wrote");
    // The claim wins from the token the row holds, a replay of it finds its own claim (its first
    // reply lost), and a second claimant from the same token changes nothing and reads the
    // winner's.
    // The claim answers the row as its own transaction left it: its holder and its text.
    let winner = perform(&db, ID, &ClaimHost { old: "A".into(), new: "fresh-1".into() }).unwrap();
    assert_eq!((winner.host_holder().as_deref(), winner.durable.map(|d| d.text)), (Some("fresh-1"), Some("a😀👍🏽b".to_owned())));
    let replay = perform(&db, ID, &ClaimHost { old: "A".into(), new: "fresh-1".into() }).unwrap();
    assert_eq!(replay.host_holder().as_deref(), Some("fresh-1"));
    let loser = perform(&db, ID, &ClaimHost { old: "A".into(), new: "fresh-2".into() }).unwrap();
    assert_eq!(loser.host_holder().as_deref(), Some("fresh-1"), "the loser sees the winner's token");
    db.seal_row(ID, Some("a😀👍🏽b"), EndStatus::Interrupted, None);
    assert_eq!((read().text.as_str(), read().status.as_str()), ("a😀👍🏽b", "interrupted"));
}

/// The durable read under a concurrent writer: a rehydrating instance's read runs while the lost
/// instance's compaction (the body written, the chunk rows deleted) commits on another
/// connection, in the middle of the read (it runs as a portal: its first row fetched, then the
/// commit, then the rest). One statement sees one snapshot: the whole text. The same commit
/// between two statements (the row, then the chunks) is caught losing it.
#[test]
fn the_durable_read_holds_one_snapshot_while_a_compaction_commits_in_its_middle() {
    use rindle_streams::engine::durable::durable_of_rows;
    let db = db!("durable_read_snapshot");
    let text = "a😀👍🏽b";
    let lost_instance = |id: &str| {
        if id != ID {
            db.insert_message(id);
        }
        assert_eq!(db.batch(&[db.sql.mark_streaming(id, "A", Format::Text)]).unwrap(), vec![1]);
        db.batch(&db.sql.append(id, Offset(0), Offset(3), "a😀", Some("A"))).unwrap();
        db.batch(&db.sql.append(id, Offset(3), Offset(8), "👍🏽b", Some("A"))).unwrap();
    };
    let compact = |id: &str| db.seal_row(id, Some(text), EndStatus::Complete, None);
    lost_instance(ID);
    let statement = db.sql.read_durable(ID);
    let mut reader = db.connect_again();
    let rows = {
        let mut tx = reader.transaction().unwrap();
        let prepared = tx.prepare(&statement.sql).unwrap();
        let bound = rindle_streams::engine::durable::postgres::bind(&statement.params);
        let params: Vec<&(dyn postgres::types::ToSql + Sync)> = bound.iter().map(|b| b as &(dyn postgres::types::ToSql + Sync)).collect();
        let portal = tx.bind(&prepared, &params).unwrap();
        let mut rows = tx.query_portal(&portal, 1).unwrap();
        assert_eq!(rows.len(), 1, "the read is under way");
        compact(ID); // commits on the test's own connection, in the middle of the read
        rows.extend(tx.query_portal(&portal, 0).unwrap());
        tx.commit().unwrap();
        rows.iter().map(|r| rindle_streams::engine::durable::postgres::row(r).unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(db.status(ID), "complete", "the compaction did commit meanwhile");
    let seen = durable_of_rows(&rows).unwrap();
    assert_eq!((seen.text.as_str(), seen.seq), (text, Offset(8)), "one snapshot: the whole text, whichever side of the commit");

    // Two statements with the same commit between them: the row from before it (no body yet),
    // the chunks from after it (deleted): the text is lost. What one statement rules out.
    let other = "m2";
    lost_instance(other);
    let row = pg::query(&mut reader, &db.sql.read_row(other)).unwrap();
    compact(other);
    let chunks = pg::query(&mut reader, &db.sql.read_chunks(other)).unwrap();
    let body = match &row[0]["body"] {
        ColumnValue::Text(t) => t.clone(),
        _ => String::new(),
    };
    assert_eq!(
        (body.as_str(), chunks.len()),
        ("", 0),
        "two snapshots, the row before the compaction and the chunks after it: the text is lost"
    );
}

/// Two instances rehydrating from the same lost token at once: the first claim holds its
/// transaction open, the second (another token of its own) waits behind it (seen in
/// `pg_stat_activity`), then re-checks and claims nothing, and reads the winner's token.
#[test]
fn two_instances_claiming_from_one_lost_token_at_once_have_one_winner() {
    let db = db!("claim_race");
    assert_eq!(db.batch(&[db.sql.mark_streaming(ID, "A", Format::Text)]).unwrap(), vec![1]);
    let claim = |new: &str| db.sql.claim_host(ID, "A", new).expect("a host column is mapped");
    let (changes, rows) = race(&db, &[claim("A~first")], vec![claim("A~second")], db.sql.read_host(ID));
    assert_eq!(changes, vec![0], "the second claim, re-checked after the first committed, claims nothing");
    assert_eq!(rows[0]["host"], ColumnValue::Text("A~first".into()), "and it reads the winner's token");
    assert_eq!(db.message_column(ID, "host"), ColumnValue::Text("A~first".into()));
}

/// Every seal is guarded on Postgres too (one statement: the chunk delete hangs off the guarded
/// update): it lands only on a row still `streaming`, at the believed length, held by the token.
#[test]
fn every_seal_is_guarded_by_streaming_the_durable_length_and_the_host_token() {
    let guard = |seq: u64, token: &str| RowGuard { durable_seq: Offset(seq), host_token: Some(token.into()) };
    for compacts in [true, false] {
        let body = compacts.then_some("abc");
        let db = db!(if compacts { "guarded_compacted" } else { "guarded_in_place" });
        db.batch(&[db.sql.mark_streaming(ID, "A", Format::Text)]).unwrap();
        append(&db, 0, 3, "abc");
        db.batch(&db.sql.seal(ID, body, EndStatus::Interrupted, Some("lost"), &guard(3, "A"))).unwrap();
        assert_eq!((db.status(ID), db.durable_text(ID)), ("interrupted".into(), "abc".into()));
        assert_eq!(db.chunk_count(ID), if compacts { 0 } else { 1 });
        for case in ["other", "sealed", "longer"] {
            let id = format!("m-{case}");
            db.insert_message(&id);
            db.batch(&[db.sql.mark_streaming(&id, if case == "other" { "B" } else { "A" }, Format::Text)]).unwrap();
            db.checkpoint_row(&id, "abc");
            match case {
                "sealed" => db.seal_row(&id, None, EndStatus::Complete, None),
                "longer" => drop(db.batch(&db.sql.append(&id, Offset(3), Offset(6), "def", Some("A"))).unwrap()),
                _ => {}
            }
            db.batch(&db.sql.seal(&id, body, EndStatus::Interrupted, Some("lost"), &guard(3, "A"))).unwrap();
            let expected = match case {
                "sealed" => ("complete", "abc", 1),
                "longer" => ("streaming", "abcdef", 2),
                _ => ("streaming", "abc", 1),
            };
            assert_eq!(
                (db.status(&id), db.durable_text(&id), db.chunk_count(&id)),
                (expected.0.into(), expected.1.into(), expected.2),
                "{id}"
            );
        }
    }
}

#[test]
fn names_of_63_bytes_work_and_two_long_chunk_tables_get_two_indexes() {
    // PostgreSQL cuts identifiers to 63 bytes without an error: the configuration refuses a
    // longer name (`TableMapping::check_for`), and the chunk index's derived name stays within
    // 63 bytes, distinct for two tables that share a long prefix.
    let long = |tag: &str| format!("{tag}{}", "c".repeat(63 - tag.len()));
    let (first, second) = (long("a_"), long("b_"));
    assert_eq!(first.len(), 63);
    let names = ColumnNames { body: Some("b".repeat(63)), ..ColumnNames::default() };
    let mapping = |chunks: &str| TableMapping::new("messages", chunks, &names).unwrap();
    assert!(mapping(&first).check_for(Dialect::Postgres).is_ok());
    assert!(TableMapping::new("messages", &format!("{first}x"), &names).unwrap().check_for(Dialect::Postgres).is_err());
    let ddl = |chunks: &str| MappedSql::new(mapping(chunks), Dialect::Postgres).chunk_table_ddl().join(";\n");
    let body = "b".repeat(63);
    let schema = format!(
        "CREATE TABLE messages (id text PRIMARY KEY, chat_id text, role text, \"{body}\" text NOT NULL DEFAULT '', status text, seq bigint NOT NULL DEFAULT 0);\n{};\n{};",
        ddl(&first),
        ddl(&second)
    );
    let Some(db) = PgDb::with_schema("long_names", &schema, mapping(&first)).map(Rc::new) else { return };
    db.insert_message(ID);
    mark(&db);
    assert_eq!(checkpoint(&db, 0, 2, "hi"), state(2, false));
    assert_eq!(db.durable_text(ID), "hi");
    let indexes = db.query(&Statement {
        sql: "SELECT indexname AS name FROM pg_indexes WHERE schemaname = current_schema() AND indexname LIKE '%stream_seq' ORDER BY 1"
            .into(),
        params: vec![],
    });
    let indexes: Vec<_> = indexes.iter().map(|r| r["name"].clone()).collect();
    assert_eq!(indexes.len(), 2, "one index per chunk table: {indexes:?}");
    for name in &indexes {
        let ColumnValue::Text(name) = name else { panic!("{name:?}") };
        assert!(name.len() <= 63 && name.ends_with("_stream_seq"), "{name}");
    }
}
