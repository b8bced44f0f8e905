//! Applies a [`FaultPlan`] around a D1 operation (test configurations only).

use crate::engine::faults::Fault;
pub use crate::engine::faults::FaultPlan;
use crate::engine::live::{StoreFailure, StoreOp, StoreReply};
use std::future::Future;

impl FaultPlan {
    /// Runs `op` through D1, broken as the plan decides. A lost reply really commits first.
    pub async fn around(
        &self,
        op: &StoreOp,
        run: impl Future<Output = Result<StoreReply, StoreFailure>>,
    ) -> Result<StoreReply, StoreFailure> {
        match self.decide(op) {
            None => run.await,
            Some(Fault::FailBeforeCommit) => Err(StoreFailure("injected fault: D1 failed before commit".into())),
            Some(Fault::FailReadBack) => Err(StoreFailure("injected fault: the read-back failed".into())),
            Some(Fault::LoseReply) => {
                let _ = run.await;
                Err(StoreFailure("injected fault: D1 committed but the reply was lost".into()))
            }
            Some(Fault::HoldReply) => {
                let _ = run.await;
                // The reply never comes: a test kills the runtime while it waits.
                futures::future::pending().await
            }
        }
    }
}
