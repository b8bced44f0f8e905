//! A chat feed's reader, relayed (SPEC §11): the front Worker answers a tab's
//! `GET {prefix}/chats/{chat}/events` with SSE and fills it from a WebSocket to the chat's feed
//! object, which holds the other end as a hibernatable socket (`edge::chat`). So a tab waiting
//! for the next turn keeps no object awake: the object sleeps with its sockets, and a Worker is
//! billed for its CPU, not for the time a response stays open. The page keeps its `EventSource`
//! and its `Last-Event-ID` (forwarded to the object, which replays from there); the events and
//! their ids are the object's, byte for byte.
//!
//! The relay is the feed's reader machinery on the SSE side, as the stream's object's is for a
//! stream (`edge::stream::readers`): the same body registry (ended with an error after a panic,
//! so a client never waits on a body nobody writes), the `retry:` preamble and `: ping`
//! keep-alive of every SSE answer, a bound on what a reader leaves unread (a reader that stops
//! reading is dropped and reconnects from its `Last-Event-ID`, missing nothing), and the end of
//! the connection at its token's `exp`.

use crate::edge::http::unavailable;
use crate::edge::sse;
use crate::engine::access::api::ApiError;
use crate::engine::host::time::Millis;
use crate::engine::live::Dialect;
use futures::FutureExt;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;
use wasm_bindgen::prelude::{wasm_bindgen, Closure};
use wasm_bindgen::JsCast;
use worker::{Request, Response, ResponseBody, WebSocket};

/// A reader whose body holds this many unread writes is dropped: it reconnects with its
/// `Last-Event-ID` and misses nothing.
const MAX_UNREAD_WRITES: f64 = 256.0;

/// How a relayed reader is served.
pub struct RelayConfig {
    /// `SSE_RETRY_MS`.
    pub retry: Millis,
    /// `KEEPALIVE_MS`.
    pub keepalive: Millis,
    /// The reader's token expires then (Unix ms): the connection ends (the client reconnects
    /// with a fresh one).
    pub expires_at: Option<u64>,
}

/// Opens a socket to the chat's feed object (`stub`) and answers the reader with SSE relayed
/// from it. The object's refusal (429 past `FEED_MAX_READERS`, a 5xx) is answered as it is.
pub async fn relay(req: &Request, stub: worker::Stub, cfg: RelayConfig) -> Result<Response, ApiError> {
    if req.method() == worker::Method::Head {
        return Response::empty().map(|r| r.with_headers(sse::headers(Dialect::Events))).map_err(unavailable);
    }
    let headers = worker::Headers::new();
    headers.set("upgrade", "websocket").map_err(unavailable)?;
    if let Ok(Some(last)) = req.headers().get("last-event-id") {
        headers.set("last-event-id", &last).map_err(unavailable)?;
    }
    // The same URL (the object routes it as the feed's events; `?after=` rides along).
    let init = worker::RequestInit { method: worker::Method::Get, headers, ..Default::default() };
    // The URL as the runtime holds it: worker::Request::url() would parse it with the url crate,
    // which (with idna and ICU normalization) adds about 200 KiB to the bundle.
    let upgrade = Request::new_with_init(&req.inner().url(), &init).map_err(unavailable)?;
    let answer = stub.fetch_with_request(upgrade).await.map_err(unavailable)?;
    if answer.status_code() != 101 {
        return Ok(answer);
    }
    let Some(socket) = answer.websocket() else {
        return Err(ApiError::store_unavailable("the feed's object answered 101 without a socket"));
    };
    let relay = Rc::new(Relay {
        socket,
        body: Default::default(),
        ended: Cell::new(false),
        listeners: Default::default(),
        ended_tx: Default::default(),
    });
    let source = RelaySource { relay: Rc::clone(&relay), preamble: crate::engine::wire::sse::preamble(cfg.retry) };
    let source: js_sys::Object = JsCast::unchecked_into(wasm_bindgen::JsValue::from(source));
    let body = web_sys::ReadableStream::new_with_underlying_source(&source).map_err(|e| unavailable(worker::Error::from(e)))?;
    wasm_bindgen_futures::spawn_local(pump(relay, cfg));
    Ok(Response::from_body(ResponseBody::Stream(body)).map_err(unavailable)?.with_headers(sse::headers(Dialect::Events)))
}

/// One relayed reader: the socket to the feed's object and the SSE body to the client.
struct Relay {
    socket: WebSocket,
    body: std::cell::RefCell<Option<web_sys::ReadableStreamDefaultController>>,
    ended: Cell<bool>,
    /// The socket's listeners: a message is written to the body from its event, at once (no task,
    /// no channel: at 1,000 tabs every event is 1,000 of them).
    listeners: std::cell::RefCell<Option<Listeners>>,
    /// Wakes the pump when the relay ends (its timers go with it).
    ended_tx: std::cell::RefCell<Option<futures::channel::oneshot::Sender<()>>>,
}

struct Listeners {
    message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    close: Closure<dyn FnMut(web_sys::Event)>,
}

impl Relay {
    /// Writes bytes to the client; a client that left this many writes unread is dropped.
    fn write(&self, bytes: &js_sys::Uint8Array) {
        let body = self.body.borrow().clone();
        let Some(body) = body else { return };
        if body.desired_size().is_some_and(|d| d < -MAX_UNREAD_WRITES) {
            return self.end(Some("the reader stopped reading"));
        }
        if body.enqueue_with_chunk(bytes).is_err() {
            self.end(None);
        }
    }

    /// Ends the reader: the body closes (the client reconnects with its `Last-Event-ID`), and the
    /// socket too (its object forgets the reader).
    fn end(&self, why: Option<&str>) {
        if self.ended.replace(true) {
            return;
        }
        if let Some(body) = self.body.borrow_mut().take() {
            sse::body_ended(&body);
            let _ = body.close();
        }
        let _ = self.socket.close(Some(1000), why.or(Some("the reader left")));
        if let Some(listeners) = self.listeners.borrow_mut().take() {
            let raw: &web_sys::WebSocket = self.socket.as_ref();
            let _ = raw.remove_event_listener_with_callback("message", listeners.message.as_ref().unchecked_ref());
            let _ = raw.remove_event_listener_with_callback("close", listeners.close.as_ref().unchecked_ref());
            let _ = raw.remove_event_listener_with_callback("error", listeners.close.as_ref().unchecked_ref());
            // Dropped in a task of its own: this may run inside one of them.
            wasm_bindgen_futures::spawn_local(async move { drop(listeners) });
        }
        if let Some(tx) = self.ended_tx.borrow_mut().take() {
            let _ = tx.send(());
        }
    }
}

/// Relays the object's messages (each the SSE bytes of one event, or the replay) from the socket's
/// listeners, pings the client while nothing comes, and ends at the token's `exp` or when either
/// side goes.
async fn pump(relay: Rc<Relay>, cfg: RelayConfig) {
    let raw: web_sys::WebSocket = AsRef::<web_sys::WebSocket>::as_ref(&relay.socket).clone();
    // The object sends bytes: handed over as they are, not as a `Blob` to read.
    let _ = js_sys::Reflect::set(&raw, &"binaryType".into(), &"arraybuffer".into());
    let (ended_tx, mut ended) = futures::channel::oneshot::channel();
    *relay.ended_tx.borrow_mut() = Some(ended_tx);
    let on_message = {
        let relay = Rc::downgrade(&relay);
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            let Some(relay) = relay.upgrade() else { return };
            let data = event.data();
            let bytes = match data.as_string() {
                Some(text) => js_sys::Uint8Array::from(text.as_bytes()),
                None => js_sys::Uint8Array::new(&data),
            };
            relay.write(&bytes);
        })
    };
    let on_close = {
        let relay = Rc::downgrade(&relay);
        Closure::<dyn FnMut(web_sys::Event)>::new(move |_| {
            if let Some(relay) = relay.upgrade() {
                relay.end(None);
            }
        })
    };
    // Listening before accepting: a message the object sent at once (the replay) is delivered
    // once the socket is accepted, and only to the listeners there are then.
    let listening = [("message", on_message.as_ref()), ("close", on_close.as_ref()), ("error", on_close.as_ref())]
        .into_iter()
        .all(|(event, f)| raw.add_event_listener_with_callback(event, f.unchecked_ref()).is_ok());
    *relay.listeners.borrow_mut() = Some(Listeners { message: on_message, close: on_close });
    if !listening || relay.socket.accept().is_err() {
        return relay.end(None);
    }
    let ping = js_sys::Uint8Array::from(crate::engine::wire::sse::PING.as_bytes());
    let expiry = cfg.expires_at.map(|at| Duration::from_millis(at.saturating_sub(crate::edge::runtime::now().0)));
    let mut expired = std::pin::pin!(async move {
        match expiry {
            Some(left) => worker::Delay::from(left).await,
            None => futures::future::pending().await,
        }
    }
    .fuse());
    while !relay.ended.get() {
        let mut tick = std::pin::pin!(worker::Delay::from(Duration::from_millis(cfg.keepalive.0)).fuse());
        futures::select! {
            _ = tick => relay.write(&ping),
            _ = expired => relay.end(Some("the token expired")),
            _ = ended => break,
        }
    }
}

/// The underlying source of one relayed reader's body.
#[wasm_bindgen]
pub struct RelaySource {
    relay: Rc<Relay>,
    preamble: String,
}

#[wasm_bindgen]
impl RelaySource {
    /// The body is set up: `retry` goes out, and the body is registered (ended with an error if
    /// this instance is lost to a panic).
    pub fn start(&self, body: web_sys::ReadableStreamDefaultController) {
        let _ = body.enqueue_with_chunk(&js_sys::Uint8Array::from(self.preamble.as_bytes()));
        sse::body_opened(&body);
        *self.relay.body.borrow_mut() = Some(body);
    }

    /// The client went away.
    pub fn cancel(self) {
        if let Some(body) = self.relay.body.borrow_mut().take() {
            sse::body_ended(&body);
        }
        self.relay.end(None);
    }
}
