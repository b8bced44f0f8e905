//! Where a stream's outputs queue until the shell drains them, and the counters that name its
//! store operations and requests.

use super::stream::{Output, Ticket};
use crate::engine::host::store::{OpId, Request, StoreRequest};
use std::collections::VecDeque;

/// A machine's outputs (the stream's [`Output`], or the lease alarm's), in order.
#[derive(Debug)]
pub(crate) struct Outbox<O = Output> {
    next_op: u64,
    next_ticket: u64,
    outputs: VecDeque<O>,
}

impl<O> Default for Outbox<O> {
    fn default() -> Self {
        Self { next_op: 0, next_ticket: 0, outputs: VecDeque::new() }
    }
}

impl<O: From<StoreRequest>> Outbox<O> {
    pub fn push(&mut self, o: O) {
        self.outputs.push_back(o);
    }

    pub fn pop(&mut self) -> Option<O> {
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
        self.push(O::from(StoreRequest::from(Request::new(id, op))));
        id
    }
}

impl From<StoreRequest> for Output {
    fn from(request: StoreRequest) -> Self {
        Output::Store(request)
    }
}
