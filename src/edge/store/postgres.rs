//! The mapped tables' executor on PostgreSQL (`DURABLE_BACKEND = "postgres"`): tokio-postgres
//! over a `worker::Socket` to the `HYPERDRIVE` binding, as workers-rs documents it. Values are
//! bound and rows read by `engine::durable::postgres`, the code the native tests run on a real
//! server (docs/POSTGRES.md).
//!
//! * **One connection per object**, kept and reused; a closed or failed one, or one a call got
//!   no answer on (in time, or at all: the call given up by its caller), is dropped and the next
//!   call connects again. Calls take turns on it (an async lock), so one operation's
//!   transaction never interleaves with another's statements.
//! * **A transaction is one round trip**: `BEGIN`, the writes, the read-back and `COMMIT` are
//!   sent together (tokio-postgres pipelines requests polled together) and their answers read
//!   after. Once sent, the server finishes the transaction whatever happens to this side.
//! * **Failures are typed as on D1**: a statement the server refused aborted the transaction,
//!   whose `COMMIT` then rolls it back: [`StoreError::NotCommitted`]. A connection lost, or no
//!   answer within [`ROUND_TRIP_DEADLINE_MS`], after the `COMMIT` was sent:
//!   [`StoreError::MayHaveCommitted`]. The engine retries a checkpoint as it does on D1.

use super::StoreCounters;
use crate::engine::durable::postgres::{bind, describe, failed, failed_commit, row, typed};
use crate::engine::durable::{Row, SqlExecutor, Statement, Value};
use crate::engine::host::store::{OpKind, StoreError, StoreFuture};
use futures::future::{join_all, select, Either};
use futures::lock::Mutex;
use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;
use tokio_postgres::Client;
use worker::postgres_tls::PassthroughTls;
use worker::{console_log, Delay, SecureTransport, Socket};

/// How long one round trip may take before the connection is given up (a server that stopped
/// answering, a network that dropped it without a reset).
pub const ROUND_TRIP_DEADLINE_MS: u64 = 15_000;

/// Where the Hyperdrive binding says the database is.
struct Target {
    host: String,
    port: u16,
    connection_string: String,
}

/// Runs SQL on PostgreSQL through Hyperdrive: one object's connection.
pub struct Postgres {
    target: Target,
    /// The connection, when one is open; the lock also makes calls take turns on it.
    client: Mutex<Option<Rc<Client>>>,
    counters: Cell<StoreCounters>,
}

impl Postgres {
    /// The executor of a Hyperdrive binding (`HYPERDRIVE`, or a database's of `DATABASES`); it
    /// connects at its first call.
    pub fn new(hd: &worker::Hyperdrive) -> Self {
        let target = Target { host: hd.host(), port: hd.port(), connection_string: hd.connection_string() };
        Self { target, client: Mutex::new(None), counters: Cell::default() }
    }

    /// What this executor has sent so far (for `/stats`).
    pub fn counters(&self) -> StoreCounters {
        self.counters.get()
    }

    fn count(&self, f: impl FnOnce(&mut StoreCounters)) {
        let mut c = self.counters.get();
        f(&mut c);
        self.counters.set(c);
    }

    /// A new connection; its I/O runs as a task of its own until the client is dropped or the
    /// server closes it.
    async fn connect(&self) -> Result<Rc<Client>, StoreError> {
        // A server out of connections (53300) is load; any other refusal to connect is not.
        let cannot = |e: String| StoreError::from_database(format!("postgres: cannot connect: {e}"), false);
        let config: tokio_postgres::Config =
            self.target.connection_string.parse().map_err(|e: tokio_postgres::Error| cannot(e.to_string()))?;
        let socket = Socket::builder()
            .secure_transport(SecureTransport::StartTls)
            .connect(self.target.host.clone(), self.target.port)
            .map_err(|e| cannot(e.to_string()))?;
        let connected = deadline(config.connect_raw(socket, PassthroughTls)).await.ok_or_else(|| cannot("no answer".into()))?;
        let (client, connection) = connected.map_err(|e| cannot(describe(&e)))?;
        wasm_bindgen_futures::spawn_local(async move {
            if let Err(e) = connection.await {
                console_log!("{}", serde_json::json!({"event": "postgres_connection_ended", "error": describe(&e)}));
            }
        });
        Ok(Rc::new(client))
    }

    /// Runs `call` on the connection (opened if there is none, or it closed), one call at a
    /// time. A failure that is not the server's answer (the connection broke, or went quiet)
    /// drops the connection so the next call connects afresh; `lost` types that failure. So does
    /// a call given up from outside (its future dropped: the shell's `STORE_TIMEOUT_MS`, which
    /// may come before [`ROUND_TRIP_DEADLINE_MS`]): a half-open socket answers nothing and is
    /// never `is_closed`, so a connection kept after a call that got no answer would time out
    /// every call after it.
    async fn with_client<T, F, Fut>(&self, lost: fn(String) -> StoreError, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(Rc<Client>) -> Fut,
        Fut: Future<Output = Result<T, (StoreError, bool)>>,
    {
        let mut turn = Turn { slot: self.client.lock().await, answered: false };
        let client = match turn.slot.as_ref().filter(|c| !c.is_closed()) {
            Some(c) => Rc::clone(c),
            None => {
                *turn.slot = None;
                let fresh = self.connect().await?;
                *turn.slot = Some(Rc::clone(&fresh));
                fresh
            }
        };
        self.count(|c| c.rounds += 1);
        match deadline(call(client)).await {
            Some(Ok(value)) => {
                turn.answered = true;
                Ok(value)
            }
            Some(Err((e, broken))) => {
                turn.answered = !broken;
                Err(e)
            }
            None => Err(lost(format!("postgres: no answer within {ROUND_TRIP_DEADLINE_MS} ms"))),
        }
    }

    /// Runs `writes`, then `read` if any, as ONE transaction in one round trip; each write's
    /// change count and the read's rows.
    async fn transact(&self, writes: &[Statement], read: Option<&Statement>) -> Result<(Vec<u64>, Vec<Row>), StoreError> {
        let bytes: usize = writes.iter().flat_map(|s| &s.params).map(Value::bound_bytes).sum();
        self.count(|c| {
            c.statements += (writes.len() + usize::from(read.is_some())) as u64;
            c.write_statements += writes.len() as u64;
            c.bytes_bound += bytes as u64;
        });
        // Unknown once the COMMIT may have been sent.
        let lost = if writes.is_empty() { StoreError::NotCommitted } else { StoreError::MayHaveCommitted };
        self.with_client(lost, |client| async move {
            let bound: Vec<_> = writes.iter().map(|s| bind(&s.params)).collect();
            let params: Vec<_> = bound.iter().map(|b| typed(b)).collect();
            let read_bound = read.map(|r| bind(&r.params)).unwrap_or_default();
            let read_params = typed(&read_bound);
            // Polled together, in this order: each request is queued on the connection at its
            // first poll, so the whole transaction leaves in one write.
            let (begin, changes, rows, commit) = futures::join!(
                client.batch_execute("BEGIN"),
                join_all(writes.iter().zip(&params).map(|(s, p)| client.execute_typed(&s.sql, p))),
                async {
                    match read {
                        Some(r) => client.query_typed(&r.sql, &read_params).await.map(Some),
                        None => Ok(None),
                    }
                },
                client.batch_execute("COMMIT"),
            );
            // The server's refusal of any statement aborted the transaction; its COMMIT then
            // rolled it back (answering `ROLLBACK`, not an error).
            let first_refusal = std::iter::once(begin.as_ref().err())
                .chain(changes.iter().map(|c| c.as_ref().err()))
                .chain(std::iter::once(rows.as_ref().err()))
                .flatten()
                .find(|e| e.as_db_error().is_some());
            if let Some(e) = first_refusal {
                return Err((StoreError::from_database(describe(e), false), false));
            }
            let broken = |e: &tokio_postgres::Error| e.as_db_error().is_none();
            commit.map_err(|e| {
                let broken = broken(&e);
                // A read-only transaction committed nothing, whatever happened.
                (if writes.is_empty() { failed(e) } else { failed_commit(e) }, broken)
            })?;
            // Committed: a failure left is of a reply lost after it.
            let after = |e: tokio_postgres::Error| (lost(describe(&e)), broken(&e));
            begin.map_err(after)?;
            let changes = changes.into_iter().map(|c| c.map_err(after)).collect::<Result<Vec<u64>, _>>()?;
            let rows = match rows.map_err(after)? {
                Some(rows) => rows.iter().map(row).collect::<Result<Vec<_>, _>>().map_err(|e| (lost(e.to_string()), false))?,
                None => vec![],
            };
            self.count(|c| c.rows_written += changes.iter().sum::<u64>());
            Ok((changes, rows))
        })
        .await
    }
}

impl SqlExecutor for Postgres {
    fn batch<'a>(&'a self, _op: OpKind, statements: &'a [Statement]) -> StoreFuture<'a, Vec<u64>> {
        Box::pin(async move {
            if statements.is_empty() {
                return Ok(vec![]);
            }
            Ok(self.transact(statements, None).await?.0)
        })
    }

    fn query<'a>(&'a self, _op: OpKind, statement: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        Box::pin(async move {
            self.count(|c| c.statements += 1);
            self.with_client(StoreError::NotCommitted, |client| async move {
                let bound = bind(&statement.params);
                let rows = client.query_typed(&statement.sql, &typed(&bound)).await.map_err(|e| {
                    let broken = e.as_db_error().is_none();
                    (failed(e), broken)
                })?;
                rows.iter().map(row).collect::<Result<Vec<_>, _>>().map_err(|e| (e, false))
            })
            .await
        })
    }

    fn batch_then_query<'a>(&'a self, _op: OpKind, writes: &'a [Statement], read: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        Box::pin(async move { Ok(self.transact(writes, Some(read)).await?.1) })
    }
}

/// One call's turn on the connection: unless the server answered it (a result, or a refusal
/// on a healthy connection), the connection is dropped when the turn ends, however it ends
/// (a broken connection, no answer in time, or the call's future dropped by its caller).
struct Turn<'a> {
    slot: futures::lock::MutexGuard<'a, Option<Rc<Client>>>,
    answered: bool,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if !self.answered {
            *self.slot = None; // the client's last reference ends its connection task
        }
    }
}

/// `work`'s output, or `None` when it took longer than [`ROUND_TRIP_DEADLINE_MS`].
async fn deadline<T>(work: impl Future<Output = T>) -> Option<T> {
    let timer = Delay::from(std::time::Duration::from_millis(ROUND_TRIP_DEADLINE_MS));
    match select(std::pin::pin!(work), std::pin::pin!(timer)).await {
        Either::Left((value, _)) => Some(value),
        Either::Right(_) => None,
    }
}
