//! Where a stream's outputs queue until the shell drains them, and the counters that name its
//! store operations and requests.

use super::stream::{Output, Ticket};
use crate::engine::store::{OpId, Request, StoreRequest};
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
    pub fn request<Op>(&mut self, op: Op) -> OpId
    where
        StoreRequest: From<Request<Op>>,
    {
        self.next_op += 1;
        let id = OpId(self.next_op);
        self.push(Output::Store(Request::new(id, op).into()));
        id
    }
}
