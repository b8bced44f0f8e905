//! The one live stream an object holds, shared by every call the shell makes into it, and the
//! revivals that rebuild it when the instance holds none ([`Revivals`]).
//!
//! The runtime calls in when it likes: a reader's client going away cancels its body, and any
//! call into JavaScript made while the stream is borrowed (a body write, say) lets that cancel
//! land inside the borrow. Such a call cannot take the stream, and dropping what it asked for
//! would leave the reader attached: its frames queued for nobody until the stream ends, counted
//! in `/stats`, pacing the live readers. So a detach that finds the stream borrowed waits here
//! and is applied at the stream's next borrow.

use super::lease::Revived;
use super::revivals::{Attempt, Caller, Revivals, Turn};
use super::{LiveStream, ReaderId};
use std::cell::{Ref, RefCell, RefMut};

/// The stream's slot: empty, or one stream (opening, live, sealing or lingering).
#[derive(Default)]
pub struct StreamSlot {
    stream: RefCell<Option<LiveStream>>,
    /// Readers whose client went away while the stream was borrowed, for the stream now held.
    detach_later: RefCell<Vec<ReaderId>>,
    revivals: RefCell<Revivals>,
}

impl StreamSlot {
    /// The stream, to change it, with every detach that waited applied first. Panics when the
    /// stream is borrowed (the shell never nests its own borrows).
    pub fn borrow_mut(&self) -> RefMut<'_, Option<LiveStream>> {
        let mut slot = self.stream.borrow_mut();
        if let Some(stream) = slot.as_mut() {
            for reader in self.detach_later.take() {
                stream.detach(reader);
            }
        }
        slot
    }

    /// The stream, to read it (a detach still waiting is applied at the next [`Self::borrow_mut`]).
    pub fn borrow(&self) -> Ref<'_, Option<LiveStream>> {
        self.stream.borrow()
    }

    /// Forgets a reader whose client went away: at once, or at the stream's next borrow when it
    /// is borrowed now. Never panics, never drops the detach.
    pub fn detach(&self, reader: ReaderId) {
        match self.stream.try_borrow_mut() {
            Ok(mut slot) => {
                if let Some(stream) = slot.as_mut() {
                    stream.detach(reader);
                }
            }
            Err(_) => self.detach_later.borrow_mut().push(reader),
        }
    }

    /// Puts `stream` (opening, or rebuilt) in the slot; `false` (and nothing changes: `stream`
    /// is dropped) when one is there. The revivals forget what they remembered: it may mark the
    /// row.
    pub fn put(&self, stream: LiveStream) -> bool {
        let mut slot = self.stream.borrow_mut();
        if slot.is_some() {
            return false;
        }
        *slot = Some(stream);
        self.revivals.borrow_mut().stream_installed();
        true
    }

    /// `caller`'s turn to rebuild the stream this instance does not hold ([`Revivals::begin`]).
    pub fn begin_revival(&self, caller: Caller) -> Turn {
        let holds = self.stream.borrow().is_some();
        self.revivals.borrow_mut().begin(caller, holds)
    }

    /// A revival is over ([`Revivals::finish`]); a stream it rebuilt is [`Self::put`] by its caller.
    pub fn finish_revival(&self, attempt: Attempt, outcome: Option<&Revived>) {
        self.revivals.borrow_mut().finish(attempt, outcome);
    }

    /// Empties the slot (the stream retires). The detaches waiting for it go with it: reader ids
    /// are numbered per stream, and the next one's readers are not these.
    pub fn take(&self) -> Option<LiveStream> {
        let stream = self.stream.borrow_mut().take();
        self.detach_later.take();
        stream
    }
}
