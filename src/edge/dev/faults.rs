//! Applies a [`FaultPlan`] around the D1 executor (the `test-faults` feature only): every store
//! call of the mapped tables, the lease's seals included, is broken as the plan decides.

use crate::engine::durable::{Row, SqlExecutor, Statement};
use crate::engine::host::faults::Fault;
pub use crate::engine::host::faults::FaultPlan;
use crate::engine::host::store::{OpKind, StoreError, StoreFuture};
use std::future::Future;
use std::rc::Rc;

impl FaultPlan {
    /// Runs `call`, broken as the plan decides for `op`. A lost reply really commits first.
    pub async fn around<T>(&self, op: OpKind, call: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        match self.decide(op) {
            None => call.await,
            Some(Fault::FailBeforeCommit) => Err(StoreError::NotCommitted("injected fault: D1 failed before commit".into())),
            Some(Fault::FailReadBack) => Err(StoreError::NotCommitted("injected fault: the read-back failed".into())),
            Some(Fault::LoseReply) => {
                let _ = call.await;
                Err(StoreError::MayHaveCommitted("injected fault: D1 committed but the reply was lost".into()))
            }
            Some(Fault::HoldReply) => {
                let _ = call.await;
                // The reply never comes: a test kills the runtime while it waits.
                futures::future::pending().await
            }
        }
    }
}

/// An executor whose calls the plan breaks.
pub struct Faulty {
    pub inner: Rc<dyn SqlExecutor>,
    pub plan: Rc<FaultPlan>,
}

impl SqlExecutor for Faulty {
    fn batch<'a>(&'a self, op: OpKind, statements: &'a [Statement]) -> StoreFuture<'a, Vec<u64>> {
        Box::pin(self.plan.around(op, self.inner.batch(op, statements)))
    }

    fn query<'a>(&'a self, op: OpKind, statement: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        Box::pin(self.plan.around(op, self.inner.query(op, statement)))
    }

    fn batch_then_query<'a>(&'a self, op: OpKind, writes: &'a [Statement], read: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        Box::pin(self.plan.around(op, self.inner.batch_then_query(op, writes, read)))
    }
}
