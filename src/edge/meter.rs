//! The object's billing counts ([`crate::engine::host::meter`]), kept where they happen: a few
//! integer increments, and a clock read only when the object goes from asleep to awake or back.

use crate::edge::runtime::now;
use crate::engine::access::api::Action;
use crate::engine::host::meter::{AwakeClock, RequestCounts, StorageCounts};
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// One object's counts, shared by its handlers, its shell and its lease.
#[derive(Default)]
pub struct Meter {
    requests: RefCell<RequestCounts>,
    alarms: Cell<u64>,
    storage: Cell<StorageCounts>,
    awake: RefCell<AwakeClock>,
}

/// Keeps the object awake (in the count) until dropped.
#[must_use = "the hold ends when dropped"]
pub struct Hold(Rc<Meter>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.awake.borrow_mut().release(now());
    }
}

/// One object's counts across its instances, in the dev build: an object that hibernates (or is
/// evicted) loses its instance, not the isolate, so what it was billed for before still counts
/// (`bench/feed.mjs`, `bench/cost.mjs` read an object after it slept). `constructions` is how
/// many instances it had: a new one after an idle stretch is the runtime's proof that it slept.
#[cfg(feature = "dev")]
pub fn of_object(state: &worker::State) -> (Rc<Meter>, u64) {
    thread_local! {
        static METERS: RefCell<std::collections::HashMap<String, (Rc<Meter>, u64)>> = RefCell::default();
    }
    let id = state.id().to_string();
    METERS.with(|m| {
        let mut meters = m.borrow_mut();
        let entry = meters.entry(id).or_insert_with(|| (Rc::default(), 0));
        entry.1 += 1;
        (Rc::clone(&entry.0), entry.1)
    })
}

/// One object's counts (the production build keeps them per instance: nothing reads them across).
#[cfg(not(feature = "dev"))]
pub fn of_object(_state: &worker::State) -> (Rc<Meter>, u64) {
    (Rc::default(), 1)
}

impl Meter {
    /// A hold on the object's awake time: a request, a reader's body, a timer, store I/O.
    pub fn hold(self: &Rc<Self>) -> Hold {
        self.awake.borrow_mut().hold(now());
        Hold(Rc::clone(self))
    }

    /// A request for `action` arrived. `/stats` (the meter's own reader) holds nothing, so
    /// reading the counts does not change the awake time they report.
    pub fn request(self: &Rc<Self>, action: Action) -> Option<Hold> {
        self.requests.borrow_mut().count(action);
        (action != Action::Stats).then(|| self.hold())
    }

    /// An alarm invocation.
    pub fn alarm(self: &Rc<Self>) -> Hold {
        self.alarms.set(self.alarms.get() + 1);
        self.hold()
    }

    /// A storage call of the object's own.
    pub fn storage(&self, op: impl FnOnce(&mut StorageCounts)) {
        let mut s = self.storage.get();
        op(&mut s);
        self.storage.set(s);
    }

    /// The counts, for `/stats`.
    pub fn snapshot(&self) -> Value {
        let awake = self.awake.borrow();
        json!({
            "requests": self.requests.borrow().served().map(|(name, n)| (name.to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "alarms": self.alarms.get(),
            "storage": self.storage.get(),
            "awakeMs": awake.awake_ms(now()),
            "holds": awake.holds(),
        })
    }
}
