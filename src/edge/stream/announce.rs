//! A stream's notices to its chat's feed (SPEC §11), performed: the engine's [`Notices`] decides
//! what to send, in which order, when to try again and which answers are final; this posts them
//! to the chat's feed object (`CHAT_FEEDS`, `edge/chat/`), one internal request each.
//!
//! The notices come from the open that named the chat (started), every seal (its `Sealed` event:
//! the producer's, the idle timeout's, the resume window's, the lease's revival's: ended), and a
//! fresh instance's revival or lease alarm (what its keys and its row say it may not have told:
//! [`Notices::revived`]). The lease alarm and every lease renewal send again what is unconfirmed;
//! the lease is released only once everything is confirmed ([`FeedLink::before_release`]).

use crate::edge::meter::Meter;
use crate::edge::runtime::{log, now, with_timeout};
use crate::engine::feed::{ChatLink, Delivery, FeedNotice, NoticeOutput, Notices};
use crate::engine::host::object_storage::{KeyUpdate, StoredStream, CHAT, FORMAT};
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::live::lease::AlarmOutput;
use crate::engine::text::reading::DurableText;
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::EndStatus;
use crate::engine::wire::ui::Format;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;
use worker::{ObjectNamespace, State};

/// What the object knows of its stream's chat.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Chat {
    /// Not read from storage yet (a fresh instance).
    Unknown,
    /// No chat was named at the open.
    None,
    Named(String),
}

/// The link from one stream's object to its chat's feed.
pub struct FeedLink {
    stream_id: String,
    state: State,
    feeds: Option<ObjectNamespace>,
    /// Each post is bounded by `STORE_TIMEOUT_MS`: no answer is a failure, tried again.
    timeout: Millis,
    chat: RefCell<Chat>,
    notices: RefCell<Notices>,
    /// When the retry timer is set for (a pending timer keeps the object awake: only while a
    /// failed notice waits for its next try).
    timer_at: Cell<Option<Timestamp>>,
    meter: Rc<Meter>,
    /// The test build's fault plan: `ops=notice` breaks the posts.
    #[cfg(feature = "test-faults")]
    pub faults: Option<Rc<crate::engine::host::faults::FaultPlan>>,
}

impl FeedLink {
    pub fn new(stream_id: &str, state: &State, feeds: Option<ObjectNamespace>, timeout: Millis, meter: Rc<Meter>) -> Self {
        // A second handle on the same JavaScript state object (`State` itself is not `Clone`).
        let raw: &wasm_bindgen::JsValue = state.as_raw().as_ref();
        let state = State::from(wasm_bindgen::JsCast::unchecked_into::<worker::worker_sys::DurableObjectState>(raw.clone()));
        Self {
            stream_id: stream_id.to_owned(),
            state,
            feeds,
            timeout,
            chat: RefCell::new(Chat::Unknown),
            notices: RefCell::default(),
            timer_at: Cell::new(None),
            meter,
            #[cfg(feature = "test-faults")]
            faults: None,
        }
    }

    /// An open settled `Ok`: remembers the chat (or that there is none; the chat is stored with
    /// the lease's keys) and tells its feed the answer started.
    pub fn opened(self: &Rc<Self>, chat: Option<&ChatLink>, format: Format) {
        let Some(link) = chat else {
            *self.chat.borrow_mut() = Chat::None;
            return;
        };
        *self.chat.borrow_mut() = Chat::Named(link.chat_id.clone());
        self.input(|n, now| n.opened(FeedNotice::started(link, &self.stream_id, format), now));
    }

    /// The stream was sealed with `status` and `durable_seq` units durable: its feed is told
    /// (when a chat was named at its open: a fresh instance reads its keys to know).
    pub fn sealed(self: &Rc<Self>, format: Option<Format>, status: EndStatus, durable_seq: Offset) {
        if self.feeds.is_none() || *self.chat.borrow() == Chat::None {
            return;
        }
        let link = Rc::clone(self);
        let awake = self.meter.hold();
        wasm_bindgen_futures::spawn_local(async move {
            let _awake = awake;
            let Some(chat) = link.chat_id().await else { return };
            let format = match format {
                Some(format) => format,
                None => {
                    link.meter.storage(|s| s.gets += 1);
                    let stored = link.state.storage().get::<String>(FORMAT).await.ok().flatten();
                    stored.as_deref().and_then(Format::parse).unwrap_or_default()
                }
            };
            let ended = FeedNotice::ended(&chat, &link.stream_id, Some(format), status, durable_seq);
            link.input(|n, now| n.sealed(ended, now));
        });
    }

    /// A fresh instance read its keys and its row (a revival, whoever woke it): what it may not
    /// have told its chat's feed is sent again.
    pub fn revived(self: &Rc<Self>, keys: &StoredStream, row: Option<&DurableText>) {
        if keys.stream_id.is_some() {
            *self.chat.borrow_mut() = keys.chat.clone().map_or(Chat::None, Chat::Named);
        }
        self.input(|n, now| n.revived(keys, row, now));
    }

    /// The lease alarm fired, or the live stream renewed its lease: what is unconfirmed goes again.
    pub fn retry_now(self: &Rc<Self>) {
        self.input(Notices::retry_now);
    }

    /// The lease alarm's last word, once the notices had theirs (a release waits for them).
    /// Without chat feeds (no `CHAT_FEEDS` binding) no notice is ever pending: `last` stands.
    pub fn before_release(self: &Rc<Self>, last: AlarmOutput) -> AlarmOutput {
        let mut decided = last;
        self.input(|n, now| decided = n.before_release(decided.clone(), now));
        decided
    }

    /// The chat named at the open: remembered, else read from the lease's keys.
    async fn chat_id(&self) -> Option<String> {
        if *self.chat.borrow() == Chat::Unknown {
            self.meter.storage(|s| s.gets += 1);
            let stored = self.state.storage().get::<String>(CHAT).await;
            *self.chat.borrow_mut() = match stored {
                Ok(Some(chat)) => Chat::Named(chat),
                Ok(None) => Chat::None,
                Err(e) => {
                    log("error", "chat_not_read", &self.stream_id, json!({"error": e.to_string()}));
                    return None;
                }
            };
        }
        match self.chat.borrow().clone() {
            Chat::Named(chat) => Some(chat),
            Chat::Unknown | Chat::None => None,
        }
    }

    /// Feeds the machine one input and performs what it asks (no borrow held across an await).
    fn input(self: &Rc<Self>, input: impl FnOnce(&mut Notices, Timestamp)) {
        if self.feeds.is_none() {
            return; // no CHAT_FEEDS binding: chat feeds are off
        }
        let now = now();
        let (outputs, timeout) = {
            let mut notices = self.notices.borrow_mut();
            input(&mut notices, now);
            let outputs: Vec<NoticeOutput> = std::iter::from_fn(|| notices.poll_output()).collect();
            (outputs, notices.poll_timeout())
        };
        self.perform(outputs, timeout, now);
    }

    /// Performs what one input asked (not generic: its tasks feed inputs in turn).
    fn perform(self: &Rc<Self>, outputs: Vec<NoticeOutput>, timeout: Option<Timestamp>, now: Timestamp) {
        for output in outputs {
            match output {
                NoticeOutput::Send { kind, notice } => {
                    let link = Rc::clone(self);
                    let awake = self.meter.hold();
                    wasm_bindgen_futures::spawn_local(async move {
                        let _awake = awake;
                        // Posted once the request that queued it has answered (a macrotask later):
                        // on a runtime that runs every object and relay on one thread (the local
                        // one), the feed's fan-out to its tabs would otherwise run before the open's
                        // answer, and the producer would wait for its chat's tabs (at 1,000 tabs,
                        // p50 87-114 ms instead of 13-19). The order is the machine's, decided
                        // already: this notice is out, the next waits for its answer.
                        worker::Delay::from(Duration::ZERO).await;
                        let delivery = link.post(&notice).await;
                        link.input(|n, now| n.handle_delivery(kind, delivery, now));
                    });
                }
                NoticeOutput::Refused { kind, notice, status } => log(
                    "error",
                    "feed_notice_refused",
                    &self.stream_id,
                    json!({"status": status, "kind": format!("{kind:?}"), "notice": serde_json::to_value(&notice).ok()}),
                ),
                NoticeOutput::Told => {
                    let link = Rc::clone(self);
                    let awake = self.meter.hold();
                    wasm_bindgen_futures::spawn_local(async move {
                        let _awake = awake;
                        let gone = KeyUpdate::told().deletes;
                        link.meter.storage(|s| s.deletes += gone.len() as u64);
                        if let Err(e) = link.state.storage().delete_multiple(gone).await {
                            log("warn", "feed_keys_not_deleted", &link.stream_id, json!({"error": e.to_string()}));
                        }
                    });
                }
            }
        }
        self.arm_timer(timeout, now);
    }

    /// A timer for the next retry, unless one fires first.
    fn arm_timer(self: &Rc<Self>, at: Option<Timestamp>, now: Timestamp) {
        let Some(at) = at else { return };
        if self.timer_at.get().is_some_and(|armed| armed <= at) {
            return;
        }
        self.timer_at.set(Some(at));
        let link = Rc::clone(self);
        let awake = self.meter.hold();
        wasm_bindgen_futures::spawn_local(async move {
            let _awake = awake;
            worker::Delay::from(Duration::from_millis(at.0.saturating_sub(now.0))).await;
            if link.timer_at.get() == Some(at) {
                link.timer_at.set(None);
            }
            link.input(Notices::handle_timeout);
        });
    }

    /// Posts one notice to its chat's feed object; the answer's verdict is the engine's.
    async fn post(&self, notice: &FeedNotice) -> Delivery {
        let Some(feeds) = &self.feeds else { return Delivery::Refused(0) };
        #[cfg(feature = "test-faults")]
        {
            use crate::engine::host::faults::Fault;
            match self.faults.as_ref().and_then(|plan| plan.decide(crate::engine::host::store::OpKind::FeedNotice)) {
                Some(Fault::FailBeforeCommit | Fault::FailReadBack) => {
                    return Delivery::Failed("injected fault: the notice was not sent".into())
                }
                Some(Fault::LoseReply) => {
                    let _ = post(feeds, notice).await;
                    return Delivery::Failed("injected fault: the feed's answer was lost".into());
                }
                // Delivered, and never answered: a test kills the runtime while it waits.
                Some(Fault::HoldReply) => {
                    let _ = post(feeds, notice).await;
                    return futures::future::pending().await;
                }
                None => {}
            }
        }
        match with_timeout(self.timeout, post(feeds, notice)).await {
            Some(Ok(status)) => Delivery::of_status(status),
            Some(Err(e)) => Delivery::Failed(e.to_string()),
            None => Delivery::Failed(format!("no answer in {} ms", self.timeout.0)),
        }
    }
}

async fn post(feeds: &ObjectNamespace, notice: &FeedNotice) -> worker::Result<u16> {
    let body = serde_json::to_string(notice).unwrap_or_default();
    let stub = feeds.id_from_name(notice.chat_id())?.get_stub()?;
    let headers = worker::Headers::new();
    headers.set("content-type", "application/json")?;
    let init = worker::RequestInit {
        method: worker::Method::Post,
        headers,
        body: Some(wasm_bindgen::JsValue::from_str(&body)),
        ..Default::default()
    };
    let req = worker::Request::new_with_init(&format!("https://chat-feed{}", crate::edge::chat::NOTICE_PATH), &init)?;
    let mut res = stub.fetch_with_request(req).await?;
    let status = res.status_code();
    let _ = res.bytes().await;
    Ok(status)
}
