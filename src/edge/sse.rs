//! What every SSE answer shares, the stream's readers and the chat feed's alike: its headers,
//! the answer with no live stream, and the registry of open bodies that a new instance ends
//! after a panic.

use crate::engine::host::time::Millis;
use crate::engine::live::Dialect;
use crate::engine::wire::frame::Frame;
use crate::engine::{wire::sse, wire::ui};
use wasm_bindgen::{JsCast, JsValue};
use worker::{Headers, Response};

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
    complete(retry, &[Frame::Absent])
}

/// A whole `/events` answer: `retry`, then `frames` (a late reader's, from the row).
pub fn complete(retry: Millis, frames: &[Frame]) -> worker::Result<Response> {
    let mut body = sse::preamble(retry);
    for frame in frames {
        body.push_str(&sse::encode(frame));
    }
    Ok(Response::from_bytes(body.into_bytes())?.with_headers(headers(Dialect::Events)))
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
