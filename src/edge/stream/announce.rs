//! A stream's notices to its chat's feed (SPEC §11): the one place a stream's object tells the
//! feed object of its chat (`CHAT_FEEDS`, `feed.rs`) that its answer started (at the open that
//! named the chat) and that it ended (at its seal: every seal goes through the stream's one
//! sealer and its `Sealed` event, the producer's, the idle timeout's, the resume window's, the
//! lease's revival's).
//!
//! Notices go out in order, one at a time, each retried with backoff until the feed stored it
//! (a 2xx), a few times. One that is never delivered costs a delay, not a turn: the feed checks
//! its answers in flight against the message table.
//!
//! The chat is stored with the lease's keys at the open (`chat`, `StoredStream`), so a seal made by a
//! fresh instance after a reset (the resume window, the lease's revival) still names it.

use crate::edge::meter::Meter;
use crate::edge::runtime::log;
use crate::engine::feed::{ChatLink, FeedNotice};
use crate::engine::host::object_storage::{CHAT, FORMAT};
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::EndStatus;
use crate::engine::wire::ui::Format;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;
use worker::{ObjectNamespace, State};

/// The delays before each retry of a notice (then it is given up; the feed's check of the
/// message table still finds the answer's state).
const RETRY_DELAYS_MS: [u64; 4] = [100, 400, 1600, 6400];

/// What the object knows of its stream's chat.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Chat {
    /// Not read from storage yet (a fresh instance).
    Unknown,
    /// No chat was named at the open.
    None,
    Named(String),
}

/// A notice waiting to go out.
enum Pending {
    Started(FeedNotice),
    Ended { format: Option<Format>, status: EndStatus, durable_seq: Offset },
}

/// The link from one stream's object to its chat's feed.
pub struct FeedLink {
    stream_id: String,
    state: State,
    feeds: Option<ObjectNamespace>,
    chat: RefCell<Chat>,
    queue: RefCell<VecDeque<Pending>>,
    sending: Cell<bool>,
    meter: Rc<Meter>,
}

impl FeedLink {
    pub fn new(stream_id: &str, state: &State, feeds: Option<ObjectNamespace>, meter: Rc<Meter>) -> Self {
        // A second handle on the same JavaScript state object (`State` itself is not `Clone`).
        let raw: &wasm_bindgen::JsValue = state.as_raw().as_ref();
        let state = State::from(wasm_bindgen::JsCast::unchecked_into::<worker::worker_sys::DurableObjectState>(raw.clone()));
        Self {
            stream_id: stream_id.to_owned(),
            state,
            feeds,
            chat: RefCell::new(Chat::Unknown),
            queue: RefCell::default(),
            sending: Cell::new(false),
            meter,
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
        self.send(Pending::Started(FeedNotice::started(link, &self.stream_id, format)));
    }

    /// The stream was sealed with `status` and `durable_seq` units durable: its feed is told
    /// (when a chat was named at its open).
    pub fn sealed(self: &Rc<Self>, format: Option<Format>, status: EndStatus, durable_seq: Offset) {
        if *self.chat.borrow() == Chat::None {
            return;
        }
        self.send(Pending::Ended { format, status, durable_seq });
    }

    fn send(self: &Rc<Self>, notice: Pending) {
        if self.feeds.is_none() {
            return; // no CHAT_FEEDS binding: chat feeds are off
        }
        self.queue.borrow_mut().push_back(notice);
        if self.sending.replace(true) {
            return;
        }
        let link = Rc::clone(self);
        let awake = self.meter.hold();
        wasm_bindgen_futures::spawn_local(async move {
            let _awake = awake;
            loop {
                let next = link.queue.borrow_mut().pop_front();
                let Some(next) = next else { break };
                if let Some(notice) = link.resolve(next).await {
                    link.deliver(&notice).await;
                }
            }
            link.sending.set(false);
        });
    }

    /// The notice to send: an end names the chat remembered at the open (read from storage by
    /// a fresh instance) and the format, if the stream no longer knew it.
    async fn resolve(&self, pending: Pending) -> Option<FeedNotice> {
        let (format, status, durable_seq) = match pending {
            Pending::Started(notice) => return Some(notice),
            Pending::Ended { format, status, durable_seq } => (format, status, durable_seq),
        };
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
        let Chat::Named(chat) = self.chat.borrow().clone() else { return None };
        let format = match format {
            Some(format) => Some(format),
            None => {
                self.meter.storage(|s| s.gets += 1);
                let stored = self.state.storage().get::<String>(FORMAT).await.ok().flatten();
                Some(stored.as_deref().and_then(Format::parse).unwrap_or_default())
            }
        };
        Some(FeedNotice::ended(&chat, &self.stream_id, format, status, durable_seq))
    }

    /// Posts one notice to the chat's feed object, retrying until it answers 2xx (a 4xx is
    /// final: the notice is refused, and says why in the log).
    async fn deliver(&self, notice: &FeedNotice) {
        let Some(feeds) = &self.feeds else { return };
        let body = serde_json::to_string(notice).unwrap_or_default();
        let mut last = String::new();
        for attempt in 0..=RETRY_DELAYS_MS.len() {
            if attempt > 0 {
                worker::Delay::from(Duration::from_millis(RETRY_DELAYS_MS[attempt - 1])).await;
            }
            match post(feeds, notice.chat_id(), &body).await {
                Ok(status) if (200..300).contains(&status) => return,
                Ok(status) if (400..500).contains(&status) => {
                    log("error", "feed_notice_refused", &self.stream_id, json!({"status": status, "notice": body}));
                    return;
                }
                Ok(status) => last = format!("status {status}"),
                Err(e) => last = e.to_string(),
            }
        }
        log("error", "feed_notice_lost", &self.stream_id, json!({"error": last, "notice": body}));
    }
}

async fn post(feeds: &ObjectNamespace, chat_id: &str, body: &str) -> worker::Result<u16> {
    let stub = feeds.id_from_name(chat_id)?.get_stub()?;
    let headers = worker::Headers::new();
    headers.set("content-type", "application/json")?;
    let init = worker::RequestInit {
        method: worker::Method::Post,
        headers,
        body: Some(wasm_bindgen::JsValue::from_str(body)),
        ..Default::default()
    };
    let req = worker::Request::new_with_init(&format!("https://chat-feed{}", crate::edge::chat::NOTICE_PATH), &init)?;
    let mut res = stub.fetch_with_request(req).await?;
    let status = res.status_code();
    let _ = res.bytes().await;
    Ok(status)
}
