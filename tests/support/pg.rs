//! The plan on a real PostgreSQL: the cluster `scripts/pg.sh` starts (its URL in
//! `RINDLE_PG_URL`), one schema per database handle, so tests run side by side.
//!
//! Values are bound and rows read by the very code the Worker's executor uses
//! (`rindle_streams::engine::durable::postgres`), here on tokio-postgres's blocking facade (the
//! `postgres` crate): `query_typed`/`execute_typed`, every value in text format with its type left
//! to the server, so a mapped column of the app's own type (`uuid` key, `integer` length, enum
//! status) takes the value the way a literal would.
//!
//! [`PgDb`] is the engine's [`SqlExecutor`] on Postgres, the shape of the Worker's Postgres
//! executor: the mapped tables answer a stream through it exactly as through D1 or SQLite.

use super::{migrations_in, Store};
use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls, Transaction};
use rindle_streams::engine::durable::postgres::{self as binding, failed as fail, failed_commit as fail_commit, row};
use rindle_streams::engine::durable::{Dialect, MappedSql, Row, SqlExecutor, Statement, TableMapping, Value};
use rindle_streams::engine::host::store::{OpKind, StoreError, StoreFuture};
use std::cell::RefCell;
use std::future::ready;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where the test command's cluster listens (`scripts/test.sh` sets it from `scripts/pg.sh url`).
pub const URL_VAR: &str = "RINDLE_PG_URL";

/// Set by `scripts/test.sh` (and CI): the Postgres tests are part of the run, so a missing
/// [`URL_VAR`] fails them instead of skipping them (a skip there would count as a pass).
pub const REQUIRED_VAR: &str = "RINDLE_PG_REQUIRED";

/// The example schema in the Postgres dialect (`migrations/postgres/*.sql`).
pub fn migration_sql() -> String {
    migrations_in(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/postgres"))
}

/// The cluster's URL, or `None` after saying loudly, past the test harness's capture, that the
/// Postgres tests did not run: by hand only. Where [`REQUIRED_VAR`] is set (`scripts/test.sh`,
/// which also sets the URL) a missing URL panics: the test fails, it never passes unrun.
pub fn url_or_skip(test: &str) -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os(REQUIRED_VAR).is_some_and(|v| !v.is_empty()) => {
            panic!(
                "{test}: {REQUIRED_VAR} is set (the test command runs the Postgres tests) but {URL_VAR} is not: no database to run them on"
            )
        }
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "\n!!! SKIPPED {test}: no PostgreSQL ({URL_VAR} is not set). scripts/test.sh starts one; by hand: \
                 export {URL_VAR}=$(scripts/pg.sh start)\n"
            );
            None
        }
    }
}

/// Connects to the test cluster. Panics (the test fails) when the URL is set and the server
/// does not answer: a configured Postgres that is down is a failure, never a skip.
pub fn connect(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap_or_else(|e| panic!("cannot connect to PostgreSQL at {URL_VAR}={url}: {e}"))
}

/// A database handle on its own schema of the test cluster.
pub struct PgDb {
    pub client: RefCell<Client>,
    pub sql: MappedSql,
    pub schema: String,
    pub url: String,
}

impl PgDb {
    /// A fresh schema with the example migrations applied; `None` (after a loud note) when no
    /// cluster is configured.
    pub fn new(test: &str) -> Option<Self> {
        Self::with_schema(test, &migration_sql(), TableMapping::example())
    }

    pub fn with_schema(test: &str, schema_sql: &str, mapping: TableMapping) -> Option<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let url = url_or_skip(test)?;
        let schema = format!(
            "t_{}_{}_{}",
            test.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let schema: String = schema.chars().rev().take(63).collect::<Vec<_>>().into_iter().rev().collect();
        let mut client = connect(&url);
        client
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE; CREATE SCHEMA \"{schema}\"; SET search_path TO \"{schema}\";"
            ))
            .unwrap();
        client.batch_execute(schema_sql).unwrap_or_else(|e| panic!("the schema: {e}"));
        Some(Self { client: RefCell::new(client), sql: MappedSql::new(mapping, Dialect::Postgres), schema, url })
    }

    /// A second connection on the same schema: another host, or the test's own observer.
    pub fn connect_again(&self) -> Client {
        let mut client = connect(&self.url);
        client.batch_execute(&format!("SET search_path TO \"{}\"", self.schema)).unwrap();
        client
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = self.client.get_mut().batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema));
        }
    }
}

impl Store for PgDb {
    fn sql(&self) -> &MappedSql {
        &self.sql
    }

    fn transact(&self, writes: &[Statement], read: Option<&Statement>) -> Result<(Vec<u64>, Vec<Row>), StoreError> {
        transact(&mut self.client.borrow_mut(), writes, read)
    }

    fn try_query(&self, statement: &Statement) -> Result<Vec<Row>, StoreError> {
        query(&mut self.client.borrow_mut(), statement)
    }

    fn exec(&self, sql: &str) {
        self.client.borrow_mut().batch_execute(sql).unwrap_or_else(|e| panic!("{sql}: {}", fail(e)));
    }
}

/// Postgres as the engine's executor. The blocking client finishes each call before it returns,
/// so the future is ready when made; the Worker's executor awaits tokio-postgres's instead.
impl SqlExecutor for PgDb {
    fn batch<'a>(&'a self, _op: OpKind, statements: &'a [Statement]) -> StoreFuture<'a, Vec<u64>> {
        Box::pin(ready(transact(&mut self.client.borrow_mut(), statements, None).map(|(changes, _)| changes)))
    }

    fn query<'a>(&'a self, _op: OpKind, statement: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        Box::pin(ready(query(&mut self.client.borrow_mut(), statement)))
    }

    fn batch_then_query<'a>(&'a self, _op: OpKind, writes: &'a [Statement], read: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        Box::pin(ready(transact(&mut self.client.borrow_mut(), writes, Some(read)).map(|(_, rows)| rows)))
    }
}

/// Runs `writes`, then `read`, as one transaction on `client` (any connection: a second host's).
pub fn transact(client: &mut Client, writes: &[Statement], read: Option<&Statement>) -> Result<(Vec<u64>, Vec<Row>), StoreError> {
    let mut tx = client.transaction().map_err(fail)?;
    let result = transact_in(&mut tx, writes, read)?;
    tx.commit().map_err(fail_commit)?;
    Ok(result)
}

/// Runs `writes`, then `read`, inside the open transaction `tx`. A failed statement fails the
/// transaction, which rolls back when it is dropped.
pub fn transact_in(tx: &mut Transaction<'_>, writes: &[Statement], read: Option<&Statement>) -> Result<(Vec<u64>, Vec<Row>), StoreError> {
    let mut changes = Vec::new();
    for s in writes {
        changes.push(with_bound(&s.params, |p| tx.execute_typed(&s.sql, p)).map_err(fail)?);
    }
    let rows = match read {
        Some(r) => with_bound(&r.params, |p| tx.query_typed(&r.sql, p)).map_err(fail)?.iter().map(row).collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    Ok((changes, rows))
}

/// Runs one statement outside a transaction and reads its rows.
pub fn query(client: &mut Client, statement: &Statement) -> Result<Vec<Row>, StoreError> {
    with_bound(&statement.params, |p| client.query_typed(&statement.sql, p)).map_err(fail)?.iter().map(row).collect()
}

/// Calls `f` with `params` bound as the Worker's executor binds them.
fn with_bound<R>(params: &[Value], f: impl FnOnce(&[(&(dyn ToSql + Sync), Type)]) -> R) -> R {
    let bound = binding::bind(params);
    f(&binding::typed(&bound))
}
