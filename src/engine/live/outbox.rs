//! Where a stream's outputs queue until the shell drains them, and the counters that name its
//! store operations and requests.

use super::stream::{OpId, Output, StoreOp, StoreRequest, Ticket};
use std::collections::VecDeque;

#[derive(Debug, Default)]
pub(crate) struct Outbox {
    next_op: u64,
    next_ticket: u64,
    outputs: VecDeque<Output>,
}

impl Outbox {
    pub fn push(&mut self, o: Output) {
        self.outputs.push_back(o);
    }

    pub fn pop(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    pub fn ticket<T>(&mut self) -> Ticket<T> {
        self.next_ticket += 1;
        Ticket::new(self.next_ticket)
    }

    /// Queues a store operation; its reply comes back under the returned id.
    pub fn request(&mut self, op: StoreOp) -> OpId {
        self.next_op += 1;
        let id = OpId(self.next_op);
        self.push(Output::Store(StoreRequest { id, op }));
        id
    }
}
