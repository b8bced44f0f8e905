//! The plane's SQL, executed on real SQLite (bundled): every statement does what the protocol
//! needs, including under replay, and nothing is spliced into SQL text.

mod support;

use rindle_streams::engine::durable::{ColumnNames, ColumnValue, Dialect, MappedSql, RowState, TableMapping};
use rindle_streams::engine::host::store::{Checkpoint, RowGuard};
use rindle_streams::engine::text::utf16::Offset;
use rindle_streams::engine::wire::frame::EndStatus;
use rindle_streams::engine::wire::ui::Format;
use std::rc::Rc;
use support::{Fault, SqliteDb, Store};

const ID: &str = "m1";

fn example() -> SqliteDb {
    let db = SqliteDb::new();
    db.insert_message(ID);
    db
}

/// The producer holding the example row in these tests.
const HOST: &str = "A";

/// The example row, marked `streaming` under [`HOST`] as its open would.
fn streaming() -> SqliteDb {
    let db = example();
    assert_eq!(db.batch(&[db.sql.mark_streaming(ID, HOST, Format::Text)]).unwrap(), vec![1]);
    db
}

fn seq(db: &SqliteDb) -> ColumnValue {
    db.message_column(ID, "seq")
}

#[test]
fn the_chunk_migration_is_exactly_the_generated_ddl() {
    let generated: String =
        MappedSql::new(TableMapping::example(), Dialect::Sqlite).chunk_table_ddl().iter().map(|s| format!("{s};\n")).collect();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/0002_message_chunks.sql");
    assert_eq!(std::fs::read_to_string(path).unwrap(), generated);
}

#[test]
fn the_append_batch_inserts_the_slice_and_swaps_the_length() {
    let db = streaming();
    let changes = db.batch(&db.sql.append(ID, Offset(0), Offset(5), "hello", Some(HOST))).unwrap();
    assert_eq!(changes, vec![1, 1]);
    assert_eq!(seq(&db), ColumnValue::Integer(5));
    assert_eq!(db.durable_text(ID), "hello");
    let changes = db.batch(&db.sql.append(ID, Offset(5), Offset(7), "😀", Some(HOST))).unwrap();
    assert_eq!(changes, vec![1, 1]);
    assert_eq!(db.durable_text(ID), "hello😀");
}

#[test]
fn a_replayed_append_changes_nothing() {
    let db = streaming();
    let batch = db.sql.append(ID, Offset(0), Offset(5), "hello", Some(HOST));
    db.batch(&batch).unwrap();
    assert_eq!(db.batch(&batch).unwrap(), vec![0, 0]);
    assert_eq!(db.chunk_count(ID), 1);
    assert_eq!(seq(&db), ColumnValue::Integer(5));
}

#[test]
fn a_stale_re_cover_lands_no_overlapping_chunk() {
    let db = streaming();
    db.batch(&db.sql.append(ID, Offset(0), Offset(5), "hello", Some(HOST))).unwrap();
    // A slice whose `from` lags the row (its predecessor's ack was lost) has a different chunk
    // id, so only the `seq = from` guard keeps it out.
    assert_eq!(db.batch(&db.sql.append(ID, Offset(0), Offset(8), "hello wo", Some(HOST))).unwrap(), vec![0, 0]);
    assert_eq!(db.chunk_count(ID), 1);
    assert_eq!(db.durable_text(ID), "hello");
}

#[test]
fn the_read_back_returns_the_length_and_the_cancel_flag() {
    let db = streaming();
    db.batch(&db.sql.append(ID, Offset(0), Offset(3), "abc", Some(HOST))).unwrap();
    let row = &db.query(&db.sql.read_state(ID))[0];
    assert_eq!((row["seq"].clone(), row["cancel"].clone()), (ColumnValue::Integer(3), ColumnValue::Integer(0)));
    db.batch(&[db.sql.request_cancel(ID).unwrap()]).unwrap();
    assert!(db.query(&db.sql.read_state(ID))[0]["cancel"].is_truthy());
}

#[test]
fn a_checkpoint_plan_reads_the_row_back_in_its_own_transaction() {
    let db = Rc::new(streaming());
    let tables = support::tables(&db);
    let run = |from, to, text: &str| {
        let slice = Checkpoint { from: Offset(from), to: Offset(to), text: text.into(), host_token: Some(HOST.into()) };
        support::perform(&tables, ID, &slice, Fault::None).unwrap()
    };
    let state = |seq| RowState { seq: Offset(seq), cancel: false };
    assert_eq!(run(0, 5, "hello"), state(5), "the write's own effect");
    assert_eq!(run(0, 5, "hello"), state(5), "a replay reads the same length");
    assert_eq!(run(0, 8, "hello wo"), state(5), "a stale re-cover reads what the row holds");
    db.batch(&[db.sql.request_cancel(ID).unwrap()]).unwrap();
    assert_eq!(run(5, 7, "😀"), RowState { seq: Offset(7), cancel: true }, "and the cancel flag");
    assert_eq!(db.durable_text(ID), "hello😀");
}

#[test]
fn the_open_probe_and_host_cas_pick_exactly_one_winner() {
    let db = example();
    let probe = &db.query(&db.sql.probe_open(ID))[0];
    assert_eq!(probe["seq"], ColumnValue::Integer(0));
    assert_eq!(probe["status"], ColumnValue::Text("pending".into()));
    assert_eq!(db.batch(&[db.sql.mark_streaming(ID, "A", Format::Text)]).unwrap(), vec![1]);
    assert_eq!(db.batch(&[db.sql.mark_streaming(ID, "B", Format::Text)]).unwrap(), vec![0], "B finds the row held");
    assert_eq!(db.query(&db.sql.read_host(ID).unwrap())[0]["host"], ColumnValue::Text("A".into()));
    assert_eq!(db.status(ID), "streaming");
}

#[test]
fn the_open_write_claims_a_row_whose_status_is_null() {
    let schema = support::migration_sql().replace("\"status\" TEXT NOT NULL DEFAULT 'pending'", "\"status\" TEXT");
    let db = SqliteDb::with_schema(&schema, TableMapping::example());
    db.exec("INSERT INTO messages (id, chat_id, role, status) VALUES ('m1', 'c', 'assistant', NULL)");
    assert_eq!(db.batch(&[db.sql.mark_streaming(ID, "A", Format::Text)]).unwrap(), vec![1]);
}

/// The mark refuses a sealed row by itself: a late retry of an open's mark (its first attempt
/// committed, its reply lost) that lands after the row was sealed must not make it `streaming`
/// again, with or without a host column. Before, its swap (`status IS NULL OR status <>
/// 'streaming'`) re-marked a sealed row, and only the open's probe stood in the way.
#[test]
fn a_mark_never_re_marks_a_sealed_row() {
    let mut without_host = TableMapping::example();
    without_host.host = None;
    for mapping in [TableMapping::example(), without_host] {
        for status in [EndStatus::Complete, EndStatus::Cancelled, EndStatus::Error, EndStatus::Interrupted] {
            let db = SqliteDb::with_schema(&support::migration_sql(), mapping.clone());
            db.insert_message(ID);
            db.checkpoint_row(ID, "abc");
            db.seal_row(ID, Some("abc"), status, None);
            let host_before = db.message_column(ID, "host");
            assert_eq!(db.batch(&[db.sql.mark_streaming(ID, "late", Format::Text)]).unwrap(), vec![0], "{status:?}");
            assert_eq!((db.status(ID), db.message_column(ID, "host")), (status.as_str().to_owned(), host_before), "{status:?}");
        }
    }
}

/// Every checkpoint carries the fence, as every seal does: it applies only to a row still
/// `streaming` under its host token. A lost instance's checkpoint committing late can then
/// neither splice its producer's text after what a rebuilt stream (another token, its own
/// producer) holds, nor grow a row sealed meanwhile, nor leave a chunk row behind. Before, the
/// guard was `seq = from` alone: both late checkpoints applied.
#[test]
fn a_checkpoint_applies_only_to_a_row_streaming_under_its_host_token() {
    let late = |db: &SqliteDb, token: &str| db.batch(&db.sql.append(ID, Offset(3), Offset(6), "xyz", Some(token))).unwrap();
    // Rebuilt at "abc" and claimed by B: A's late checkpoint changes nothing.
    let db = streaming();
    db.batch(&db.sql.append(ID, Offset(0), Offset(3), "abc", Some(HOST))).unwrap();
    db.exec("UPDATE messages SET host = 'B' WHERE id = 'm1'");
    assert_eq!(late(&db, "A"), vec![0, 0]);
    assert_eq!((db.durable_text(ID), db.chunk_count(ID)), ("abc".into(), 1));
    assert_eq!(late(&db, "B"), vec![1, 1], "the holder's own checkpoint lands");
    // Sealed at "abc": a late checkpoint of its own host neither grows it nor leaves a chunk row.
    let db = streaming();
    db.batch(&db.sql.append(ID, Offset(0), Offset(3), "abc", Some(HOST))).unwrap();
    db.seal_row(ID, Some("abc"), EndStatus::Complete, None);
    assert_eq!(late(&db, "A"), vec![0, 0]);
    assert_eq!(
        (db.status(ID), seq(&db), db.durable_text(ID), db.chunk_count(ID)),
        ("complete".into(), ColumnValue::Integer(3), "abc".into(), 0)
    );
}

#[test]
fn compaction_writes_the_body_and_deletes_the_chunks_in_one_batch() {
    let db = streaming();
    db.batch(&db.sql.append(ID, Offset(0), Offset(3), "abc", Some(HOST))).unwrap();
    db.batch(&db.sql.append(ID, Offset(3), Offset(6), "def", Some(HOST))).unwrap();
    db.seal_row(ID, Some("abcdef😀"), EndStatus::Complete, None);
    assert_eq!(db.chunk_count(ID), 0);
    assert_eq!(db.message_column(ID, "body"), ColumnValue::Text("abcdef😀".into()));
    assert_eq!(seq(&db), ColumnValue::Integer(8), "the length is in UTF-16 units");
    assert_eq!(db.status(ID), "complete");
    assert_eq!(db.message_column(ID, "error"), ColumnValue::Null);
}

#[test]
fn compaction_repairs_a_row_whose_checkpoints_failed() {
    let db = streaming();
    db.batch(&db.sql.append(ID, Offset(0), Offset(3), "abc", Some(HOST))).unwrap();
    db.seal_row(ID, Some("abcdefgh"), EndStatus::Error, Some("boom"));
    assert_eq!(db.durable_text(ID), "abcdefgh");
    assert_eq!(db.message_column(ID, "error"), ColumnValue::Text("boom".into()));
}

#[test]
fn a_seal_in_place_keeps_the_chunks_as_the_durable_text() {
    let db = streaming();
    db.batch(&db.sql.append(ID, Offset(0), Offset(3), "abc", Some(HOST))).unwrap();
    db.seal_row(ID, None, EndStatus::Interrupted, None);
    assert_eq!(db.status(ID), "interrupted");
    assert_eq!(db.durable_text(ID), "abc");
}

#[test]
fn values_are_bound_never_spliced() {
    let db = streaming();
    let hostile = "'); DROP TABLE messages; -- \"quoted\" ?1 $1";
    let batch = db.sql.append(ID, Offset(0), Offset(hostile.len() as u64), hostile, Some(HOST));
    for s in &batch {
        assert!(!s.sql.contains("DROP") && !s.sql.contains(ID), "{}", s.sql);
    }
    db.batch(&batch).unwrap();
    assert_eq!(db.durable_text(ID), hostile);
}

#[test]
fn a_chunk_table_named_up_to_the_longest_name_gets_its_index_and_works() {
    // A 118-byte chunk table name made the index name (+ `_stream_seq`) too long: a panic.
    for len in [52, 53, 117, 118, 128] {
        let chunks = format!("chunks-é{}", "x".repeat(len - "chunks-é".len()));
        let mapping = TableMapping::new("messages", &chunks, &ColumnNames::default()).unwrap();
        let sql = MappedSql::new(mapping.clone(), Dialect::Sqlite);
        let ddl = sql.chunk_table_ddl();
        let index = ddl[1].split('"').nth(1).unwrap().to_owned();
        assert!(index.len() <= 128, "{len}: {index}");
        let schema = format!(
            "CREATE TABLE messages (id TEXT PRIMARY KEY, body TEXT NOT NULL DEFAULT '', status TEXT, seq INTEGER NOT NULL DEFAULT 0);\n{};",
            ddl.join(";\n")
        );
        let db = SqliteDb::with_schema(&schema, mapping);
        db.exec("INSERT INTO messages (id) VALUES ('m1')");
        db.checkpoint_row(ID, "hi");
        assert_eq!(db.durable_text(ID), "hi", "{len}");
        let indexes = db.query(&rindle_streams::engine::durable::Statement {
            sql: format!("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = '{chunks}' AND sql IS NOT NULL"),
            params: vec![],
        });
        assert_eq!(
            indexes.iter().map(|r| r["name"].clone()).collect::<Vec<_>>(),
            vec![ColumnValue::Text(index)],
            "{len}: the index is there"
        );
    }
}

#[test]
fn custom_names_are_quoted_and_work() {
    let names = ColumnNames::from_json(r#"{"key":"msg id","body":"Body Text","seq":"len","cancel":"stop?"}"#).unwrap();
    let mapping = TableMapping::new("chat messages", "chunk rows", &names).unwrap();
    let sql = MappedSql::new(mapping.clone(), Dialect::Sqlite);
    let schema = format!(
        "CREATE TABLE \"chat messages\" (\"msg id\" TEXT PRIMARY KEY, \"Body Text\" TEXT NOT NULL DEFAULT '', status TEXT, len INTEGER NOT NULL DEFAULT 0, \"stop?\" INTEGER NOT NULL DEFAULT 0);\n{};",
        sql.chunk_table_ddl().join(";\n")
    );
    let db = SqliteDb::with_schema(&schema, mapping);
    db.exec("INSERT INTO \"chat messages\" (\"msg id\") VALUES ('m1')");
    db.checkpoint_row(ID, "hi");
    db.seal_row(ID, Some("hi!"), EndStatus::Complete, None);
    let row = &db.query(&db.sql.read_row(ID))[0];
    assert_eq!(row["body"], ColumnValue::Text("hi!".into()));
    assert_eq!(row["seq"], ColumnValue::Integer(3));
    assert_eq!(row["error"], ColumnValue::Null, "no error column mapped: NULL");
}

#[test]
fn the_row_read_carries_the_error_for_the_ui_error_ending() {
    let db = SqliteDb::new();
    db.insert_message(ID);
    db.seal_row(ID, Some("{\"type\":\"start\"}\n"), EndStatus::Error, Some("the model timed out"));
    let row = &db.query(&db.sql.read_row(ID))[0];
    assert_eq!(row["status"], ColumnValue::Text("error".into()));
    assert_eq!(row["error"], ColumnValue::Text("the model timed out".into()));
}

#[test]
fn every_statement_is_far_under_d1s_statement_limit() {
    let long = "x".repeat(128);
    let names = ColumnNames { body: Some(long.clone()), ..Default::default() };
    let sql = MappedSql::new(TableMapping::new(&long, &long, &names).unwrap(), Dialect::Sqlite);
    let big = "y".repeat(200_000);
    let mut all = sql.append(ID, Offset(0), Offset(1), &big, Some("t"));
    all.extend(sql.seal(
        ID,
        Some(&big),
        EndStatus::Complete,
        Some("e"),
        &RowGuard { durable_seq: Offset(0), host_token: Some("t".into()) },
    ));
    all.push(sql.probe_open(ID));
    all.push(sql.read_state(ID));
    for s in all {
        assert!(s.sql.len() < 2_000, "{} bytes of SQL text", s.sql.len());
        assert!(s.params.len() < 100);
    }
}

#[test]
fn a_chat_lookup_finds_the_chats_streaming_answer_and_only_that() {
    let db = example();
    let lookup = |chat: &str| db.query(&db.sql.streaming_in_chat(chat).unwrap()).first().map(|r| r["id"].clone());
    assert_eq!(lookup("chat-1"), None, "pending is not streaming");
    db.exec("UPDATE messages SET status = 'streaming' WHERE id = 'm1'");
    assert_eq!(lookup("chat-1"), Some(ColumnValue::Text(ID.into())));
    assert_eq!(lookup("chat-2"), None);
    assert_eq!(lookup("x' OR '1'='1"), None, "bound, never spliced");
    db.exec("UPDATE messages SET status = 'complete' WHERE id = 'm1'");
    assert_eq!(lookup("chat-1"), None);
    assert_eq!(db.query(&db.sql.chat_of(ID).unwrap())[0]["chat"], ColumnValue::Text("chat-1".into()));
    assert!(db.query(&db.sql.chat_of("nope").unwrap()).is_empty());
    let unmapped = MappedSql::new(TableMapping::new("messages", "message_chunks", &ColumnNames::default()).unwrap(), Dialect::Sqlite);
    assert!(unmapped.streaming_in_chat("c").is_none() && unmapped.chat_of(ID).is_none(), "no chat column, no lookup");
}

#[test]
fn the_tables_chat_reads_answer_through_the_executor() {
    let db = Rc::new(example());
    let tables = support::tables(&db);
    let streaming = |chat: &str| support::block_on(tables.streaming_in_chat(chat)).unwrap();
    assert_eq!(streaming("chat-1"), None, "pending is not streaming");
    db.exec("UPDATE messages SET status = 'streaming' WHERE id = 'm1'");
    assert_eq!(streaming("chat-1").as_deref(), Some(ID));
    assert_eq!(streaming("chat-2"), None);
    assert_eq!(support::block_on(tables.chat_of(ID)).unwrap().as_deref(), Some("chat-1"));
    assert_eq!(support::block_on(tables.chat_of("nope")).unwrap(), None);
}

/// The feed's check (SPEC §11): the chat's answers `streaming`, and the named ones whatever they
/// became, with status and length; nothing of another chat, nothing unnamed that has ended.
#[test]
fn a_chats_answers_are_read_for_its_feed() {
    let db = Rc::new(example());
    let tables = support::tables(&db);
    db.exec(
        "INSERT INTO messages (id, chat_id, role, status, seq) VALUES ('s1', 'chat-1', 'assistant', 'streaming', 3), \
         ('done', 'chat-1', 'assistant', 'complete', 9), ('old', 'chat-1', 'assistant', 'complete', 2), \
         ('elsewhere', 'chat-2', 'assistant', 'streaming', 1), ('other-done', 'chat-2', 'assistant', 'complete', 1)",
    );
    let read = |open: &[&str]| {
        let open: Vec<String> = open.iter().map(|s| s.to_string()).collect();
        let mut rows = support::block_on(tables.chat_answers("chat-1", &open)).unwrap().unwrap();
        rows.sort_by(|a, b| a.id.cmp(&b.id));
        rows.into_iter().map(|r| (r.id, r.status, r.seq.0)).collect::<Vec<_>>()
    };
    assert_eq!(read(&[]), [("s1".into(), "streaming".into(), 3)]);
    assert_eq!(read(&["done", "gone", "other-done"]), [("done".into(), "complete".into(), 9), ("s1".into(), "streaming".into(), 3)]);
    let many: Vec<String> = (0..100).map(|i| format!("x{i}")).collect();
    let statement = db.sql.chat_answers("chat-1", &many).unwrap();
    assert_eq!(statement.params.len(), 2 + rindle_streams::engine::durable::MAX_CHECKED_ANSWERS, "bounded: D1 binds at most 100");
    let unmapped = MappedSql::new(TableMapping::new("messages", "message_chunks", &ColumnNames::default()).unwrap(), Dialect::Sqlite);
    assert!(unmapped.chat_answers("chat-1", &[]).is_none(), "no chat column, no check");
}

#[test]
fn the_durable_read_is_one_statement_over_the_row_and_its_chunks() {
    let db = streaming();
    let read = || rindle_streams::engine::durable::durable_of_rows(&db.query(&db.sql.read_durable(ID))).unwrap();
    assert!(db.sql.read_durable(ID).sql.contains("UNION ALL"), "one statement, one snapshot");
    assert_eq!((read().text, read().seq), (String::new(), Offset(0)), "a row without chunks");
    db.batch(&db.sql.append(ID, Offset(0), Offset(4), "a😀b", Some(HOST))).unwrap();
    db.batch(&db.sql.append(ID, Offset(4), Offset(6), "cd", Some(HOST))).unwrap();
    assert_eq!((read().text, read().seq, read().status), ("a😀bcd".to_owned(), Offset(6), "streaming".to_owned()));
    db.seal_row(ID, Some("a😀bcd!"), EndStatus::Error, Some("boom"));
    let sealed = read();
    assert_eq!((sealed.text.as_str(), sealed.seq, sealed.error.as_deref()), ("a😀bcd!", Offset(7), Some("boom")));
    assert_eq!(rindle_streams::engine::durable::durable_of_rows(&db.query(&db.sql.read_durable("nope"))), None, "no row");
}

/// A revival's claim: from the token the row holds to the claimant's own fresh one, once. Two
/// claimants from one token cannot both win (each names its own new token; only the first finds
/// the old one), and a replay after a lost reply finds its own claim by reading the holder.
#[test]
fn a_revival_claims_the_row_from_the_token_it_holds_and_only_one_claimant_wins() {
    let db = example();
    db.batch(&[db.sql.mark_streaming(ID, "A", Format::Text)]).unwrap();
    let first = db.sql.claim_host(ID, "A", "fresh-1").unwrap();
    assert_eq!(db.batch(std::slice::from_ref(&first)).unwrap(), vec![1]);
    assert_eq!(db.batch(&[first]).unwrap(), vec![0], "a replay changes nothing");
    assert_eq!(db.message_column(ID, "host"), ColumnValue::Text("fresh-1".into()), "and finds its own claim");
    assert_eq!(db.batch(&[db.sql.claim_host(ID, "A", "fresh-2").unwrap()]).unwrap(), vec![0], "a second claimant from A wins nothing");
    assert_eq!(db.message_column(ID, "host"), ColumnValue::Text("fresh-1".into()));
    db.seal_row(ID, None, EndStatus::Interrupted, None);
    assert_eq!(db.batch(&[db.sql.claim_host(ID, "fresh-1", "fresh-3").unwrap()]).unwrap(), vec![0], "a sealed row is never claimed");
}

/// The durable read under a concurrent writer (two connections to one database file, as D1
/// serves two requests): the lost instance's compaction (the body written, the chunk rows
/// deleted) commits in the middle of a rehydrating instance's read, after its first row. One
/// statement sees one snapshot: the whole text. The same commit between two statements (the
/// row, then the chunks) is caught losing it.
#[test]
fn the_durable_read_holds_one_snapshot_while_a_compaction_commits_in_its_middle() {
    let (reader, writer, _file) = SqliteDb::shared_pair("durable_snapshot");
    let text = "a😀👍🏽b";
    let lost_instance = |id: &str| {
        reader.insert_message(id);
        assert_eq!(reader.batch(&[reader.sql.mark_streaming(id, "A", Format::Text)]).unwrap(), vec![1]);
        reader.batch(&reader.sql.append(id, Offset(0), Offset(3), "a😀", Some("A"))).unwrap();
        reader.batch(&reader.sql.append(id, Offset(3), Offset(8), "👍🏽b", Some("A"))).unwrap();
    };
    let compact = |id: &str| writer.seal_row(id, Some(text), EndStatus::Complete, None);
    lost_instance(ID);
    let rows = reader.query_stepped(&reader.sql.read_durable(ID), || {
        compact(ID);
    });
    assert_eq!(writer.status(ID), "complete", "the compaction did commit meanwhile");
    let seen = rindle_streams::engine::durable::durable_of_rows(&rows).unwrap();
    assert_eq!((seen.text.as_str(), seen.seq), (text, Offset(8)), "one snapshot: the whole text, whichever side of the commit");

    let other = "m2";
    lost_instance(other);
    let row = reader.query(&reader.sql.read_row(other));
    compact(other);
    let chunks = reader.query(&reader.sql.read_chunks(other));
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

/// Two instances rehydrating from the same lost token at once, on two connections: the first
/// claim holds the write lock, the second (another token of its own) waits for it (seen in its
/// busy handler), then claims nothing and reads the winner's token.
#[test]
fn two_instances_claiming_from_one_lost_token_at_once_have_one_winner() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SECOND_WAITED: AtomicBool = AtomicBool::new(false);
    fn waiting(_: i32) -> bool {
        SECOND_WAITED.store(true, Ordering::SeqCst);
        std::thread::yield_now();
        true // try again: the first claim's commit frees the lock
    }
    let (first, second, _file) = SqliteDb::shared_pair("claim_race");
    first.insert_message(ID);
    assert_eq!(first.batch(&[first.sql.mark_streaming(ID, "A", Format::Text)]).unwrap(), vec![1]);
    let claim = |db: &SqliteDb, new: &str| db.sql.claim_host(ID, "A", new).expect("a host column is mapped");
    first.conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    assert_eq!(SqliteDb::execute_on(&first.conn, &claim(&first, "A~first")), 1, "the first claim lands");
    second.conn.busy_handler(Some(waiting)).unwrap();
    let (second_claim, read_host) = (claim(&second, "A~second"), second.sql.read_host(ID).unwrap());
    let (changes, host) = std::thread::scope(|scope| {
        let racing = scope.spawn(move || {
            second.conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            let changes = SqliteDb::execute_on(&second.conn, &second_claim);
            let host = support::rows_of(&second.conn, &read_host).unwrap();
            second.conn.execute_batch("COMMIT").unwrap();
            (changes, host)
        });
        while !SECOND_WAITED.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        first.conn.execute_batch("COMMIT").unwrap();
        racing.join().unwrap()
    });
    assert_eq!(changes, 0, "the second claim, run after the first committed, claims nothing");
    assert_eq!(host[0]["host"], ColumnValue::Text("A~first".into()), "and it reads the winner's token");
}

/// Every seal is guarded: it lands on a row still `streaming`, at the durable length its sealer
/// believes, and held by its token, and on no other. Without the length the seal of a stream
/// rebuilt at "abc" overwrote a row a late checkpoint had taken to "abcdef" (the durable text
/// shrank); without the status a row sealed `complete` in place by its producer would be
/// overwritten and lose its chunk rows; without the token another host's row would be sealed.
#[test]
fn every_seal_is_guarded_by_streaming_the_durable_length_and_the_host_token() {
    let guard = |seq: u64, token: &str| RowGuard { durable_seq: Offset(seq), host_token: Some(token.into()) };
    for compacts in [true, false] {
        let body = compacts.then_some("abc");
        let streaming_at_abc = |host: &str| {
            let db = example();
            db.batch(&[db.sql.mark_streaming(ID, host, Format::Text)]).unwrap();
            db.batch(&db.sql.append(ID, Offset(0), Offset(3), "abc", Some(host))).unwrap();
            db
        };
        // Ours, streaming at the believed length: sealed, and the chunks compacted.
        let db = streaming_at_abc("A");
        db.batch(&db.sql.seal(ID, body, EndStatus::Interrupted, Some("lost"), &guard(3, "A"))).unwrap();
        assert_eq!((db.status(ID), db.durable_text(ID)), ("interrupted".into(), "abc".into()));
        assert_eq!(db.chunk_count(ID), if compacts { 0 } else { 1 });
        // A late checkpoint took the row to "abcdef": untouched, nothing shrinks, chunks kept.
        let db = streaming_at_abc("A");
        db.batch(&db.sql.append(ID, Offset(3), Offset(6), "def", Some("A"))).unwrap();
        let changes = db.batch(&db.sql.seal(ID, body, EndStatus::Interrupted, Some("lost"), &guard(3, "A"))).unwrap();
        assert!(changes.iter().all(|&n| n == 0), "{changes:?}");
        assert_eq!((db.status(ID), db.durable_text(ID), db.chunk_count(ID)), ("streaming".into(), "abcdef".into(), 2));
        // Sealed `complete` in place by its producer meanwhile: untouched, chunks kept.
        let db = streaming_at_abc("A");
        db.seal_row(ID, None, EndStatus::Complete, None);
        let changes = db.batch(&db.sql.seal(ID, body, EndStatus::Interrupted, Some("lost"), &guard(3, "A"))).unwrap();
        assert!(changes.iter().all(|&n| n == 0), "{changes:?}");
        assert_eq!((db.status(ID), db.durable_text(ID), db.chunk_count(ID)), ("complete".into(), "abc".into(), 1));
        // Another host's row: untouched.
        let db = streaming_at_abc("B");
        db.batch(&db.sql.seal(ID, body, EndStatus::Interrupted, Some("lost"), &guard(3, "A"))).unwrap();
        assert_eq!((db.status(ID), db.chunk_count(ID)), ("streaming".into(), 1));
    }
}
