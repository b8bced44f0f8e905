//! The model of the database in the dev build (the `dev` feature; `DEV_MODE=1` and
//! `DB_MODEL_WRITE_MS` set): the local runtime's database made as busy as a real one, so anyone can
//! run `wrangler dev` against a database that is 4 ms or 40 ms a write (docs/LOAD.md, "The model
//! in the dev build").
//!
//! One queue per database across every object: [`DatabaseModelObject`] (binding `DB_MODEL`, one
//! object per database binding, however many names of `DATABASES` point at it) holds the
//! engine's [`DatabaseModel`] and answers each call's turn, when the model says it runs (or once
//! it has waited its way to D1's own overload error).
//! [`Modelled`] wraps a stream's executor: it asks for the turn, runs the statements on the
//! local database, and answers when the model says the database would have.

use crate::edge::runtime::now;
use crate::engine::durable::model::{Admission, Capacity, DatabaseModel, Work};
use crate::engine::durable::{Row, SqlExecutor, Statement};
use crate::engine::host::store::{OpKind, StoreError, StoreFuture};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use worker::{durable_object, DurableObject, Env, ObjectNamespace, Request, Response, State};

/// The binding of the model's objects.
pub const BINDING: &str = "DB_MODEL";

/// A call asking for its turn.
#[derive(Serialize, Deserialize)]
struct Turn {
    write: bool,
    /// The caller's model (every object of a Worker has the same vars, so every caller sends the same).
    capacity: Capacity,
}

/// The model's answer, once the turn came.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Given {
    /// Run now; the database would answer this many µs from now.
    Run { answer_in_us: u64 },
    /// Turned away, in the database's own words.
    Overloaded { message: String },
}

/// One database's lanes and queue, for every object of the Worker (one object per database).
#[durable_object]
pub struct DatabaseModelObject {
    model: RefCell<Option<DatabaseModel>>,
}

impl DurableObject for DatabaseModelObject {
    fn new(_state: State, _env: Env) -> Self {
        Self { model: RefCell::new(None) }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let turn: Turn = req.json().await?;
        let capacity = turn.capacity;
        let sent_us = now().0 * 1000;
        let work = if turn.write { Work::Write } else { Work::Read };
        // Admitted at once, in arrival order (the borrow ends before the wait).
        let admission = self.model.borrow_mut().get_or_insert_with(|| DatabaseModel::new(capacity)).admit(work, sent_us);
        let (wake_us, given) = match admission {
            Admission::Runs { starts_us, answered_us, .. } => (starts_us, Given::Run { answer_in_us: answered_us - starts_us }),
            Admission::TurnedAway { why, answered_us } => {
                (answered_us, Given::Overloaded { message: why.message(capacity.backend).to_owned() })
            }
        };
        worker::Delay::from(Duration::from_micros(wake_us.saturating_sub(now().0 * 1000))).await;
        Response::from_json(&given)
    }
}

/// A stream's executor with the model in front: each call waits its turn at the database's
/// model object, runs on the local database, and answers when the model says.
pub struct Modelled {
    pub inner: Rc<dyn SqlExecutor>,
    pub models: ObjectNamespace,
    /// The binding of the database the calls go to: its model object is named after it (two
    /// names of `DATABASES` on one binding are one database, one queue).
    pub database: String,
    pub capacity: Capacity,
}

impl Modelled {
    /// The model's word on a call (`write`: a write transaction), once its turn came.
    async fn turn(&self, write: bool) -> Result<u64, StoreError> {
        let asked = || -> worker::Result<Request> {
            let body = serde_json::to_string(&Turn { write, capacity: self.capacity })?;
            let init = worker::RequestInit { method: worker::Method::Post, body: Some(body.into()), ..Default::default() };
            Request::new_with_init("https://database-model/turn", &init)
        };
        let unreachable = |e: worker::Error| StoreError::NotCommitted(format!("the model of the database is unreachable: {e}"));
        let stub = self.models.id_from_name(&self.database).and_then(|id| id.get_stub()).map_err(unreachable)?;
        let mut answer = stub.fetch_with_request(asked().map_err(unreachable)?).await.map_err(unreachable)?;
        match answer.json::<Given>().await.map_err(unreachable)? {
            Given::Run { answer_in_us } => Ok(answer_in_us),
            // The database ran none of it: the engine's rule types it as load.
            Given::Overloaded { message } => Err(StoreError::from_database(message, false)),
        }
    }

    /// Runs `call` in its turn, answering no sooner than the model says.
    async fn modelled<T>(&self, write: bool, call: StoreFuture<'_, T>) -> Result<T, StoreError> {
        let answer_in_us = self.turn(write).await?;
        let started = now();
        let result = call.await;
        let spent_us = (now() - started).0 * 1000;
        worker::Delay::from(Duration::from_micros(answer_in_us.saturating_sub(spent_us))).await;
        result
    }
}

impl SqlExecutor for Modelled {
    fn batch<'a>(&'a self, op: OpKind, statements: &'a [Statement]) -> StoreFuture<'a, Vec<u64>> {
        Box::pin(self.modelled(true, self.inner.batch(op, statements)))
    }

    fn query<'a>(&'a self, op: OpKind, statement: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        Box::pin(self.modelled(false, self.inner.query(op, statement)))
    }

    fn batch_then_query<'a>(&'a self, op: OpKind, writes: &'a [Statement], read: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        Box::pin(self.modelled(!writes.is_empty(), self.inner.batch_then_query(op, writes, read)))
    }
}
