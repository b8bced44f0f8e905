//! Test support: the plane's statements executed on real databases, with faults that a test
//! injects on purpose. SQLite (bundled) runs the very SQL the Worker sends to D1; PostgreSQL
//! ([`pg`]) runs the Postgres dialect on a real server. A store whose failures can be chosen is
//! the one stand-in in the native suite.
#![allow(dead_code)]

pub mod driver;
pub mod fleet;
pub mod pg;

use rindle_streams::engine::durable::{
    durable_of_rows, ColumnValue, Dialect, MappedSql, Row, SqlExecutor, Statement, TableMapping, Tables, TablesOp, Value,
};
use rindle_streams::engine::host::config::{CheckpointMode, StreamConfig};
use rindle_streams::engine::host::object_storage::kept_at_release;
pub use rindle_streams::engine::host::object_storage::StoredStream;
use rindle_streams::engine::host::store::{run_on_sink, OpKind, RowGuard, StoreAnswer, StoreError, StoreFuture, StoreRequest};
use rindle_streams::engine::host::time::Timestamp;
use rindle_streams::engine::live::lease::{AlarmOutput, Holding, LeaseAlarm, Release, Renewal, Revived, StorageError};
use rindle_streams::engine::live::{Caller, LiveStream, Revival, RevivalEnd, RevivalOutput, Revivals, Turn};
use rindle_streams::engine::wire::frame::EndStatus;
use rindle_streams::engine::wire::ui::Format;
use rusqlite::{params_from_iter, Connection};
use std::future::{ready, Future};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// The example schema, exactly as the Worker's migrations create it (`migrations/*.sql`, or
/// `migrations/postgres/*.sql` for Postgres).
pub fn migration_sql() -> String {
    migrations_in(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
}

/// The `.sql` files of `dir`, in name order, as one script.
pub fn migrations_in(dir: &str) -> String {
    let mut files: Vec<_> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "sql")).collect();
    files.sort();
    files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect::<Vec<_>>().join("\n")
}

/// A fault to inject into one store operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Run it and answer truthfully.
    None,
    /// Fail before anything commits.
    FailBeforeCommit,
    /// Commit, then lose the reply (the caller sees a failure). On a read: the read fails.
    CommitThenLoseReply,
}

/// A database the tests run the plan on. Each backend is also the engine's [`SqlExecutor`] (as
/// D1 is the Worker's), through which [`tables`] answer a stream; this trait is the tests' own
/// access to it: the backend supplies the transaction and the query, and everything the tests
/// read back (the durable text, a column, the lease's row) is built on those, once.
pub trait Store {
    fn sql(&self) -> &MappedSql;

    /// Runs `writes`, then `read` if any, as one transaction; returns each write's change count
    /// and the read's rows. A failure rolls the transaction back: nothing committed.
    fn transact(&self, writes: &[Statement], read: Option<&Statement>) -> Result<(Vec<u64>, Vec<Row>), StoreError>;

    /// Runs one query outside any transaction.
    fn try_query(&self, statement: &Statement) -> Result<Vec<Row>, StoreError>;

    /// Runs one query outside any transaction; panics on an error (the tests' own reads).
    fn query(&self, statement: &Statement) -> Vec<Row> {
        self.try_query(statement).unwrap_or_else(|e| panic!("{}: {e}", statement.sql))
    }

    /// Runs SQL text of the test's own (no parameters).
    fn exec(&self, sql: &str);

    /// What the app does before opening a stream: insert the message row.
    fn insert_message(&self, id: &str) {
        let p1 = self.sql().dialect().placeholder(1);
        let sql = format!("INSERT INTO messages (id, chat_id, role) VALUES ({p1}, 'chat-1', 'assistant') RETURNING id");
        assert_eq!(self.query(&Statement { sql, params: vec![Value::from(id)] }).len(), 1);
    }

    /// Empties both tables, for the next schedule.
    fn reset(&self) {
        self.exec("DELETE FROM message_chunks; DELETE FROM messages;");
    }

    /// Runs statements as one transaction; returns each statement's change count.
    fn batch(&self, statements: &[Statement]) -> Result<Vec<u64>, StoreError> {
        self.transact(statements, None).map(|(changes, _)| changes)
    }

    /// The durable text of `id` as a reader would get it: body plus chunk rows, read as the
    /// Worker reads it (one statement).
    fn durable_text(&self, id: &str) -> String {
        durable_of_rows(&self.query(&self.sql().read_durable(id))).map(|d| d.text).unwrap_or_default()
    }

    /// One column of the message row.
    fn message_column(&self, id: &str, column: &str) -> ColumnValue {
        let sql = format!("SELECT \"{column}\" AS v FROM messages WHERE id = {}", self.sql().dialect().placeholder(1));
        self.query(&Statement { sql, params: vec![Value::from(id)] })
            .into_iter()
            .next()
            .map(|r| r["v"].clone())
            .unwrap_or(ColumnValue::Null)
    }

    fn status(&self, id: &str) -> String {
        match self.message_column(id, "status") {
            ColumnValue::Text(s) => s,
            other => format!("{other:?}"),
        }
    }

    /// The fence of a write as the row's holder makes it, the row marked `streaming` first if it
    /// is not: its length and host token as they stand.
    fn holders_guard(&self, id: &str) -> RowGuard {
        if self.query(&self.sql().read_summary(id))[0]["status"] != ColumnValue::Text("streaming".into()) {
            self.batch(&[self.sql().mark_streaming(id, "test-host", Format::Text)]).unwrap();
        }
        let durable_seq = self.query(&self.sql().read_summary(id))[0]["seq"].as_offset().expect("a length");
        let host_token = self.sql().read_host(id).and_then(|read| match &self.query(&read)[0]["host"] {
            ColumnValue::Text(h) => Some(h.clone()),
            _ => None,
        });
        RowGuard { durable_seq, host_token }
    }

    /// Checkpoints `text` as the row's holder would, after what the row holds (marked
    /// `streaming` first if it is not): each statement's change count.
    fn checkpoint_row(&self, id: &str, text: &str) -> Vec<u64> {
        let guard = self.holders_guard(id);
        let to = guard.durable_seq + rindle_streams::engine::text::utf16::len(text);
        self.batch(&self.sql().append(id, guard.durable_seq, to, text, guard.host_token.as_deref())).unwrap()
    }

    /// Seals the row as its producer would, the guard matching the row as it stands (marked
    /// `streaming` first if it is not): for tests that need a sealed or compacted row.
    fn seal_row(&self, id: &str, body: Option<&str>, status: EndStatus, error: Option<&str>) {
        let guard = self.holders_guard(id);
        self.batch(&self.sql().seal(id, body, status, error, &guard)).unwrap();
        assert_eq!(self.query(&self.sql().read_summary(id))[0]["status"], ColumnValue::Text(status.as_str().into()), "sealed");
    }

    fn chunk_count(&self, id: &str) -> usize {
        self.query(&self.sql().read_chunks(id)).len()
    }
}

pub struct SqliteDb {
    pub conn: Connection,
    pub sql: MappedSql,
}

impl SqliteDb {
    /// An in-memory database with the example migrations applied.
    pub fn new() -> Self {
        Self::with_schema(&migration_sql(), TableMapping::example())
    }

    pub fn with_schema(schema: &str, mapping: TableMapping) -> Self {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(schema).unwrap();
        Self { conn, sql: MappedSql::new(mapping, Dialect::Sqlite) }
    }

    /// Two connections to one database file (the example schema, write-ahead log: one writer
    /// at a time, each reading statement on its own snapshot, as D1): for races. The file is
    /// removed when the returned guard drops.
    pub fn shared_pair(test: &str) -> (Self, Self, TempFile) {
        let path = std::env::temp_dir().join(format!("rindle-{test}-{}-{}.sqlite", std::process::id(), rand_suffix()));
        let open = || {
            let conn = Connection::open(&path).unwrap();
            conn.busy_timeout(std::time::Duration::from_secs(30)).unwrap();
            Self { conn, sql: MappedSql::new(TableMapping::example(), Dialect::Sqlite) }
        };
        let first = open();
        first.conn.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
        first.conn.execute_batch(&migration_sql()).unwrap();
        let second = open();
        (first, second, TempFile(path))
    }

    /// Runs `statement`, calling `between` once its first row has been read and before the
    /// rest are: whatever `between` commits elsewhere lands in the middle of the statement.
    pub fn query_stepped(&self, statement: &Statement, between: impl FnOnce()) -> Vec<Row> {
        let mut stmt = self.conn.prepare(&statement.sql).unwrap();
        let names: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
        let mut rows = stmt.query(params_from_iter(statement.params.iter().map(bind))).unwrap();
        let mut out = Vec::new();
        let mut between = Some(between);
        while let Some(row) = rows.next().unwrap() {
            let columns: Vec<(String, ColumnValue)> =
                names.iter().enumerate().map(|(i, name)| (name.clone(), column(row.get_ref(i).unwrap()))).collect();
            out.push(Row::new(columns));
            if let Some(f) = between.take() {
                f();
            }
        }
        out
    }

    /// Executes `statement` on `conn` (the database or a transaction on it): its change count.
    pub fn execute_on(conn: &Connection, statement: &Statement) -> u64 {
        conn.execute(&statement.sql, params_from_iter(statement.params.iter().map(bind))).unwrap() as u64
    }
}

/// A file removed (with its write-ahead log) when dropped.
pub struct TempFile(pub std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Store for SqliteDb {
    fn sql(&self) -> &MappedSql {
        &self.sql
    }

    fn transact(&self, writes: &[Statement], read: Option<&Statement>) -> Result<(Vec<u64>, Vec<Row>), StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(fail)?;
        let mut changes = Vec::new();
        for s in writes {
            changes.push(tx.execute(&s.sql, params_from_iter(s.params.iter().map(bind))).map_err(fail)? as u64);
        }
        let rows = read.map(|r| rows_of(&tx, r)).transpose()?.unwrap_or_default();
        tx.commit().map_err(fail)?;
        Ok((changes, rows))
    }

    fn try_query(&self, statement: &Statement) -> Result<Vec<Row>, StoreError> {
        rows_of(&self.conn, statement)
    }

    fn exec(&self, sql: &str) {
        self.conn.execute_batch(sql).unwrap();
    }
}

/// SQLite as the engine's executor, running the D1 dialect in process: every call is done
/// when made, so its future is ready.
impl SqlExecutor for SqliteDb {
    fn batch<'a>(&'a self, _op: OpKind, statements: &'a [Statement]) -> StoreFuture<'a, Vec<u64>> {
        Box::pin(ready(self.transact(statements, None).map(|(changes, _)| changes)))
    }

    fn query<'a>(&'a self, _op: OpKind, statement: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        Box::pin(ready(rows_of(&self.conn, statement)))
    }

    fn batch_then_query<'a>(&'a self, _op: OpKind, writes: &'a [Statement], read: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        Box::pin(ready(self.transact(writes, Some(read)).map(|(_, rows)| rows)))
    }
}

/// Runs one query on `conn` (the database, or a transaction on it).
pub fn rows_of(conn: &Connection, statement: &Statement) -> Result<Vec<Row>, StoreError> {
    let mut stmt = conn.prepare(&statement.sql).map_err(fail)?;
    let names: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
    let rows = stmt
        .query_map(params_from_iter(statement.params.iter().map(bind)), |row| {
            let columns = names.iter().enumerate().map(|(i, name)| Ok((name.clone(), column(row.get_ref(i)?))));
            columns.collect::<Result<_, _>>().map(Row::new)
        })
        .map_err(fail)?;
    rows.collect::<Result<_, _>>().map_err(fail)
}

/// A failed SQLite call: its transaction rolled back (or it was a read), nothing committed.
fn fail(e: rusqlite::Error) -> StoreError {
    StoreError::NotCommitted(e.to_string())
}

fn bind(v: &Value) -> rusqlite::types::Value {
    match v {
        Value::Text(s) => rusqlite::types::Value::Text(s.clone()),
        Value::Int(n) => rusqlite::types::Value::Integer(*n),
        Value::Bool(b) => rusqlite::types::Value::Integer(i64::from(*b)),
        Value::Null => rusqlite::types::Value::Null,
    }
}

fn column(v: rusqlite::types::ValueRef<'_>) -> ColumnValue {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => ColumnValue::Null,
        ValueRef::Integer(n) => ColumnValue::Integer(n),
        ValueRef::Real(x) => ColumnValue::Real(x),
        ValueRef::Text(t) => ColumnValue::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(_) => ColumnValue::Text("<blob>".into()),
    }
}

/// The mapped tables on `db`, as the Worker has them on D1.
pub fn tables<D: Store + SqlExecutor + 'static>(db: &Rc<D>) -> Tables {
    Tables::new(Rc::clone(db) as Rc<dyn SqlExecutor>, db.sql().clone())
}

/// Answers `request` on `tables` with `fault` injected: the store fails before anything
/// commits, or commits and its reply is lost.
pub fn answer(tables: &Tables, stream_id: &str, request: StoreRequest, fault: Fault) -> StoreAnswer {
    match fault {
        Fault::None => block_on(tables.run(stream_id, request)),
        Fault::FailBeforeCommit => request.failed(StoreError::NotCommitted("injected: failed before commit".into())),
        Fault::CommitThenLoseReply => {
            let lost = request.failed(StoreError::MayHaveCommitted("injected: committed, reply lost".into()));
            let _ = block_on(tables.run(stream_id, request));
            lost
        }
    }
}

/// Performs `op` on `tables` with `fault` injected (a store call the shell makes itself, such
/// as the lease's seal, or a test of one operation).
pub fn perform<Op: TablesOp>(tables: &Tables, stream_id: &str, op: &Op, fault: Fault) -> Result<Op::Reply, StoreError> {
    match fault {
        Fault::None => block_on(tables.perform(stream_id, op)),
        Fault::FailBeforeCommit => Err(StoreError::NotCommitted("injected: failed before commit".into())),
        Fault::CommitThenLoseReply => {
            let _ = block_on(tables.perform(stream_id, op));
            Err(StoreError::MayHaveCommitted("injected: committed, reply lost".into()))
        }
    }
}

/// What a lease armed with `token` stored for stream `id`, with no `armedAt` (no mark can be in
/// flight).
#[allow(dead_code)] // not every test binary uses every helper
pub fn armed(id: &str, token: Option<&str>) -> StoredStream {
    StoredStream { stream_id: Some(id.into()), host_token: token.map(str::to_owned), ..StoredStream::default() }
}

/// What happens to one call a host makes for the revival (each of its outputs in turn).
#[allow(dead_code)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Performed and answered truthfully.
    Ok,
    /// Fails before anything is applied.
    Fail,
    /// Applied, then the answer is lost (the caller sees a failure; a timeout looks the same).
    ApplyThenLose,
    /// A store request performed twice (a replay), the second answer given.
    Duplicate,
    /// The instance dies before the call is applied.
    Die,
    /// The instance dies after the call was applied.
    DieAfterApply,
}

/// Drives one [`Revival`] as the shell does (edge/stream/revive.rs), on `tables` and an object storage
/// `storage`, each call meeting the next of `steps` (then [`Step::Ok`]). `None`: the instance
/// died mid-way (what it applied stays applied).
#[allow(dead_code)]
pub fn run_revival(
    tables: &Tables,
    cfg: &StreamConfig,
    storage: &mut StoredStream,
    fresh_token: &str,
    now: Timestamp,
    steps: &mut dyn Iterator<Item = Step>,
) -> Option<RevivalEnd> {
    run_revival_between(tables, cfg, storage, fresh_token, now, steps, &mut |_| {})
}

/// [`run_revival`], with `between(n)` called before the revival's `n`th call (from 0) is
/// performed: whatever it commits elsewhere lands between two of the revival's steps.
#[allow(dead_code)]
pub fn run_revival_between(
    tables: &Tables,
    cfg: &StreamConfig,
    storage: &mut StoredStream,
    fresh_token: &str,
    now: Timestamp,
    steps: &mut dyn Iterator<Item = Step>,
    between: &mut dyn FnMut(usize),
) -> Option<RevivalEnd> {
    let stream_id = storage.stream_id.clone().unwrap_or_default();
    let mut revival = Revival::start(cfg.clone(), fresh_token.to_owned());
    let mut calls = 0;
    while let Some(output) = revival.poll_output() {
        between(calls);
        calls += 1;
        let step = steps.next().unwrap_or(Step::Ok);
        match output {
            RevivalOutput::ReadKeys => match step {
                Step::Ok | Step::Duplicate => revival.handle_keys(Ok(storage.clone())),
                Step::Fail | Step::ApplyThenLose => revival.handle_keys(Err("injected: the storage failed".into())),
                Step::Die | Step::DieAfterApply => return None,
            },
            RevivalOutput::Store(request) => {
                let answer = match step {
                    // A stream with a sink is answered through the sink (no host column), as the shell does.
                    Step::Ok if cfg.mode == CheckpointMode::Sink => block_on(run_on_sink(tables, &stream_id, request)),
                    Step::Ok => answer(tables, &stream_id, request, Fault::None),
                    Step::Fail => answer(tables, &stream_id, request, Fault::FailBeforeCommit),
                    Step::ApplyThenLose => answer(tables, &stream_id, request, Fault::CommitThenLoseReply),
                    Step::Duplicate => {
                        // Performed twice (a replay), and answered twice: the real answer, then
                        // a late failure for the same request, which the revival must ignore.
                        let late = request.failed(StoreError::MayHaveCommitted("injected: a duplicated answer".into()));
                        if let StoreRequest::ClaimHost(claim) = &request {
                            let _ = perform(tables, &stream_id, claim.op(), Fault::None);
                        }
                        revival.handle_store(answer(tables, &stream_id, request, Fault::None), now);
                        revival.handle_store(late, now);
                        continue;
                    }
                    Step::Die => return None,
                    Step::DieAfterApply => {
                        let _ = answer(tables, &stream_id, request, Fault::None);
                        return None;
                    }
                };
                revival.handle_store(answer, now);
            }
            RevivalOutput::WriteKeys(update) => {
                if matches!(step, Step::Ok | Step::Duplicate | Step::ApplyThenLose | Step::DieAfterApply) {
                    storage.apply(&update);
                }
                match step {
                    Step::Ok | Step::Duplicate => revival.handle_keys_written(Ok(()), now),
                    Step::Fail | Step::ApplyThenLose => revival.handle_keys_written(Err("injected: the storage failed".into()), now),
                    Step::Die | Step::DieAfterApply => return None,
                }
            }
        }
    }
    revival.take_end()
}

/// How one run of the lease alarm ended.
#[allow(dead_code)]
#[derive(Debug)]
pub struct AlarmRun {
    pub ended: Result<Release, Renewal>,
    /// The alarm told the stream to retry its seal.
    pub retry_seal: bool,
    /// The stream its revival rebuilt (the caller installs it).
    pub revived: Option<LiveStream>,
}

/// Runs the core's lease alarm once at `now`, as the shell does (edge/stream/lease.rs): `holding`
/// is what the object holds; a revival it asks for is the instance's `revivals` turn (a fresh
/// instance's: `Revivals::default()`), run as
/// [`run_revival`] with `steps`. A release forgets the keys as the shell does. `None`: the
/// instance died during the revival.
#[allow(dead_code, clippy::too_many_arguments)] // one per input the shell has at hand
pub fn run_alarm(
    revivals: &mut Revivals,
    tables: &Tables,
    cfg: &StreamConfig,
    storage: &mut StoredStream,
    keys_fail: bool,
    holding: Holding,
    fresh_token: &str,
    now: Timestamp,
    steps: &mut dyn Iterator<Item = Step>,
) -> Option<AlarmRun> {
    let mut alarm = LeaseAlarm::fire();
    let (mut retry_seal, mut revived) = (false, None);
    while let Some(output) = alarm.poll_output() {
        match output {
            AlarmOutput::ReadKeys => {
                let keys = if keys_fail { Err(StorageError("injected: the storage failed".into())) } else { Ok(storage.clone()) };
                alarm.handle_keys(keys, holding);
            }
            AlarmOutput::Revive => match revivals.begin(Caller::Alarm, holding != Holding::Nothing) {
                Turn::Held => alarm.handle_revival(Revived::Rebuilt),
                Turn::Settled(release) => alarm.handle_revival(Revived::Nothing(release)),
                Turn::Wait => panic!("no other caller runs a revival in a test's instance"),
                Turn::Run(attempt) => {
                    let Some(end) = run_revival(tables, cfg, storage, fresh_token, now, steps) else {
                        revivals.finish(attempt, None);
                        return None;
                    };
                    let outcome = Revived::from(&end);
                    revivals.finish(attempt, Some(&outcome));
                    alarm.handle_revival(outcome);
                    if let RevivalEnd::Revived(stream) = end {
                        revivals.stream_installed();
                        revived = Some(*stream);
                    }
                }
            },
            AlarmOutput::RetrySeal => retry_seal = true,
            AlarmOutput::Renew(why) => return Some(AlarmRun { ended: Err(why), retry_seal, revived }),
            AlarmOutput::Release(why) => {
                let keep = kept_at_release(storage.format, tables.sql().has_format_column());
                let kept = StoredStream::from_values(|key| keep.contains(&key).then(|| storage.value(key)).flatten());
                *storage = kept;
                return Some(AlarmRun { ended: Ok(why), retry_seal, revived });
            }
        }
    }
    panic!("a lease alarm run ended without a renewal or a release")
}

/// Drives `stream` on `tables` (every store request answered truthfully, timers fired in order)
/// until it has ended; returns the time then.
#[allow(dead_code)]
pub fn drive_until_ended(stream: &mut LiveStream, tables: &Tables, mut now: Timestamp) -> Timestamp {
    let id = stream.stream_id().to_owned();
    for _ in 0..10_000 {
        while let Some(output) = stream.poll_output() {
            if let rindle_streams::engine::live::Output::Store(request) = output {
                let answer = answer(tables, &id, request, Fault::None);
                stream.handle_store(answer, now);
            }
        }
        if matches!(stream.state(), rindle_streams::engine::live::StreamState::Ended(_)) {
            return now;
        }
        now = stream.poll_timeout().unwrap_or(now).max(now);
        stream.handle_timeout(now);
    }
    panic!("the stream never ended")
}

/// Runs a future that never waits (a test store's) to its end.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a test store never waits"),
    }
}
