//! A reader's SSE body: a stream the shell writes the reader's bytes into as the live stream
//! offers them (it wakes the reader; the shell pulls its queued bytes and enqueues them at
//! once), and that the runtime asks for more only when the client has drained what was there.
//! Keep-alive pings come from the live stream too (a reader idle for the keep-alive interval
//! is woken, and its pull answers `: ping`).

use super::shell::Shell;
use crate::edge::sse::headers;
use crate::engine::access::api::ApiError;
use crate::engine::host::time::Millis;
use crate::engine::live::{Dialect, ReaderId};
use crate::engine::text::utf16::Offset;
use crate::engine::wire::sse;
use std::rc::Rc;
use wasm_bindgen::prelude::wasm_bindgen;
use worker::{Response, ResponseBody};

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
