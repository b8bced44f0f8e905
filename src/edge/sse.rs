//! A reader's SSE body: a stream the shell writes the reader's bytes into as the live stream
//! offers them (it wakes the reader; the shell pulls its queued bytes and enqueues them at
//! once), and that the runtime asks for more only when the client has drained what was there.
//! Keep-alive pings come from the live stream too (a reader idle for the keep-alive interval
//! is woken, and its pull answers `: ping`).

use super::shell::Shell;
use crate::engine::access::api::ApiError;
use crate::engine::host::time::Millis;
use crate::engine::live::{Dialect, ReaderId};
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::Frame;
use crate::engine::{wire::sse, wire::ui};
use std::rc::Rc;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use worker::{Headers, Response, ResponseBody};

/// The headers of every SSE answer; a `/ui` answer also tells the AI SDK what it carries.
pub fn headers(dialect: Dialect) -> Headers {
    let h = Headers::new();
    for (name, value) in sse::SSE_HEADERS {
        let _ = h.set(name, value);
    }
    if dialect == Dialect::Ui {
        let _ = h.set(ui::UI_STREAM_HEADER.0, ui::UI_STREAM_HEADER.1);
    }
    h
}

/// The whole answer when no live stream is here: `retry`, then `absent`.
pub fn absent(retry: Millis) -> worker::Result<Response> {
    let body = format!("{}{}", sse::preamble(retry), sse::encode(&Frame::Absent));
    Ok(Response::from_bytes(body.into_bytes())?.with_headers(headers(Dialect::Events)))
}

/// What a subscribe request came to.
pub enum Subscription {
    /// The answer: the live reader's body, or the headers of a `HEAD`.
    Answered(Result<Response, ApiError>),
    /// No live stream is here; `from` is the join offset the request asked for.
    NoLiveStream { from: Offset },
}

/// The underlying source of one reader's body (a `ReadableStream` calls its methods). Writing
/// into the stream as frames arrive, rather than answering the runtime's pulls with a future
/// each, costs one `enqueue` per write: no promise, no task, no waker per delivery. The
/// stream's queue holds one write; while the client has not drained it, the reader's frames
/// wait in its bounded queue inside the live stream (merged when they go out), where an
/// overflow ends it with `stale`.
#[wasm_bindgen]
pub struct ReaderSource {
    shell: Rc<Shell>,
    reader: ReaderId,
    preamble: String,
}

#[wasm_bindgen]
impl ReaderSource {
    /// The body is set up: `retry` and the replay go out in its first write.
    pub fn start(&self, body: web_sys::ReadableStreamDefaultController) {
        self.shell.attach_body(self.reader, body, &self.preamble);
    }

    /// The client drained what was written: write what is queued now, if anything.
    pub fn pull(&self, _body: web_sys::ReadableStreamDefaultController) {
        self.shell.body_drained(self.reader);
    }

    /// The client went away.
    pub fn cancel(self) {
        self.shell.detach(self.reader);
    }
}

impl ReaderSource {
    /// The SSE response of `reader`, a subscriber of `dialect`.
    pub fn response(shell: Rc<Shell>, reader: ReaderId, dialect: Dialect, retry: Millis) -> worker::Result<Response> {
        let source = Self { shell, reader, preamble: sse::preamble(retry) };
        let source: js_sys::Object = wasm_bindgen::JsCast::unchecked_into(wasm_bindgen::JsValue::from(source));
        // A high-water mark of 0: the runtime asks for more (`pull`) only when its read of the
        // body is pending, once per write. At the default of 1 it also asked from inside each
        // write (the queue had just emptied into the pending read), a second call into wasm, a
        // clock read and an empty pull per delivery.
        let strategy = web_sys::QueuingStrategy::new();
        strategy.set_high_water_mark(0.0);
        let body = web_sys::ReadableStream::new_with_underlying_source_and_strategy(&source, &strategy).map_err(worker::Error::from)?;
        Ok(Response::from_body(ResponseBody::Stream(body))?.with_headers(headers(dialect)))
    }
}

/// The reader bodies that are open, kept on the JavaScript side, outside the WebAssembly
/// instance. A panic aborts the instance and workers-rs starts a new one at the next event,
/// but the runtime keeps every body the old one was writing open: nothing would ever write to
/// it again or close it, not even a keep-alive, and a client (a native `EventSource`) would
/// wait on it forever. The new instance's start ends each one with an error, so its client
/// rejoins as after an eviction (and finds the stream gone, then the lease's seal).
///
/// The set lives on the global object, which the isolate keeps across instances. (It is not an
/// `inline_js` module: wasm-bindgen 0.2.129 names such a module once per function imported from
/// it in its glue's import object, and esbuild warns of each duplicate key.)
fn open_bodies() -> js_sys::Set {
    let global = js_sys::global();
    let key = JsValue::from_str("__rindleOpenReaderBodies");
    match js_sys::Reflect::get(&global, &key) {
        Ok(set) if set.is_instance_of::<js_sys::Set>() => set.unchecked_into(),
        _ => {
            let set = js_sys::Set::new(&JsValue::UNDEFINED);
            let _ = js_sys::Reflect::set(&global, &key, &set);
            set
        }
    }
}

/// Registers an open reader body.
pub fn body_opened(body: &web_sys::ReadableStreamDefaultController) {
    open_bodies().add(body);
}

/// Forgets a reader body that ended (written to its end, or its client gone).
pub fn body_ended(body: &web_sys::ReadableStreamDefaultController) {
    open_bodies().delete(body);
}

/// Ends, with an error, every body a previous instance left open; how many there were.
pub fn end_orphaned_bodies() -> u32 {
    let open = open_bodies();
    let orphans = js_sys::Array::from(&open);
    open.clear();
    let error = js_sys::Error::new("the stream was lost with its WebAssembly instance: rejoin");
    for body in orphans.iter() {
        // A body the runtime already closed refuses the error; there is nothing left to end.
        if let Ok(end) = js_sys::Reflect::get(&body, &JsValue::from_str("error")) {
            let _ = end.unchecked_into::<js_sys::Function>().call1(&body, &error);
        }
    }
    orphans.length()
}
