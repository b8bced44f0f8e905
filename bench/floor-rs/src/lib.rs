//! The benchmark's floor in Rust: what `bench/floor/floor.mjs` does (one object per stream id;
//! each piece of an append's body, as it arrives, is one `data:` frame to every reader; `GET
//! …/events` attaches a reader; `POST …/close` ends them), written as a workers-rs Worker with
//! the cheapest mechanisms rindle-streams uses: a synchronous front Worker that hands back the
//! stub's promise, the `#[durable_object]` macro's async `fetch`, a declared-length body read
//! whole (`Request::bytes`), a streaming body read by a JavaScript loop that hands each piece
//! to a wasm sink, and readers' bodies written through a `TransformStream`'s writer (the
//! JavaScript floor's default).
//!
//! Against the JavaScript floor it measures what writing a Worker in Rust costs by itself (the
//! JS↔wasm wrappers, the Rust futures' promises and wake-ups, the `worker` crate's conversions,
//! worker-build's shim); rindle-streams against it, what rindle-streams does on top (BENCHMARKS.md,
//! "A floor in Rust"). No JSON frames, no checkpoints, no storage, no auth, no bounds; a reader
//! that goes away stays in the list until the stream's close (every benchmark run ends with one).
//!
//! With the cargo feature `manual-export`, the object is exported by hand instead (module
//! `manual`; docs/PERFORMANCE.md, "Changes tried": exporting the object by hand, not kept).
#![cfg(target_arch = "wasm32")]

use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
#[cfg(not(feature = "manual-export"))]
use worker::{durable_object, DurableObject, Request, ResponseBody, State};
use worker::{Env, Response};

/// The front Worker: `/streams/{id}/…` goes to the stream's object, request and all.
#[wasm_bindgen(js_name = fetch)]
pub fn fetch(req: web_sys::Request, env: Env, _ctx: worker::worker_sys::Context) -> js_sys::Promise {
    let url = req.url();
    let mut parts = path_of(&url).split('/');
    let (Some(""), Some("streams"), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
        return not_found();
    };
    if id.is_empty() {
        return not_found();
    }
    match env.durable_object("FLOOR").and_then(|ns| ns.id_from_name(id)?.get_stub()) {
        Ok(stub) => match stub.into_rpc::<worker::worker_sys::DurableObject>().unchecked_ref::<Stub>().fetch(&req) {
            Ok(answer) => answer,
            Err(e) => js_sys::Promise::reject(&e),
        },
        Err(e) => js_sys::Promise::reject(&JsValue::from_str(&e.to_string())),
    }
}

fn not_found() -> js_sys::Promise {
    match Response::error("not found", 404) {
        Ok(r) => js_sys::Promise::resolve(&JsValue::from(web_sys::Response::from(r))),
        Err(e) => js_sys::Promise::reject(&e.into()),
    }
}

/// The path of an absolute URL (the runtime hands over a normalised one).
fn path_of(url: &str) -> &str {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = after_scheme.find('/').map_or("/", |i| &after_scheme[i..]);
    path.split(['?', '#']).next().unwrap_or(path)
}

#[cfg(not(feature = "manual-export"))]
#[durable_object]
pub struct FloorStream {
    readers: Rc<Readers>,
}

/// The readers' body writers.
#[derive(Default)]
struct Readers(RefCell<Vec<web_sys::WritableStreamDefaultWriter>>);

impl Readers {
    /// A new reader: its body, which `send` writes from now on.
    fn attach(&self) -> Result<web_sys::ReadableStream, JsValue> {
        let pipe = web_sys::TransformStream::new()?;
        self.0.borrow_mut().push(pipe.writable().get_writer()?);
        Ok(pipe.readable())
    }

    /// Sends `end` to every reader and closes their bodies.
    fn close(&self) {
        self.send(b"event: end\ndata: end\n\n");
        for writer in self.0.borrow_mut().drain(..) {
            IGNORE.with(|ignore| {
                let _ = writer.close().catch(ignore);
            });
        }
    }

    fn send(&self, frame: &[u8]) {
        let bytes = js_sys::Uint8Array::from(frame);
        for writer in self.0.borrow().iter() {
            // A reader that went away rejects its writes: nothing to do (see the module's doc).
            IGNORE.with(|ignore| {
                let _ = writer.write_with_chunk(&bytes).catch(ignore);
            });
        }
    }
}

thread_local! {
    /// The rejection handler of every write and close (one closure, shared).
    static IGNORE: Closure<dyn FnMut(JsValue)> = Closure::new(|_: JsValue| {});
}

#[cfg(not(feature = "manual-export"))]
impl DurableObject for FloorStream {
    fn new(_state: State, _env: Env) -> Self {
        Self { readers: Rc::default() }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let url = req.inner().url();
        match path_of(&url).rsplit('/').next().unwrap_or_default() {
            "events" => {
                let response = Response::from_body(ResponseBody::Stream(self.readers.attach()?))?;
                let headers = worker::Headers::new();
                headers.set("content-type", "text/event-stream")?;
                headers.set("cache-control", "no-cache")?;
                Ok(response.with_headers(headers))
            }
            "append" => {
                let intake = Rc::new(RefCell::new(Intake { readers: Rc::clone(&self.readers), pending: Vec::new(), units: 0 }));
                if req.headers().get("content-length")?.is_some() {
                    let bytes = req.bytes().await?;
                    intake.borrow_mut().take(&bytes);
                } else if let Some(body) = req.inner().body() {
                    wasm_bindgen_futures::JsFuture::from(read_body(&body, FloorSink(Rc::clone(&intake)))).await?;
                }
                let units = intake.borrow().units;
                Response::from_json(&serde_json::json!({ "seq": units }))
            }
            "close" => {
                self.readers.close();
                Response::from_json(&serde_json::json!({ "closed": true }))
            }
            _ => Response::error("not found", 404),
        }
    }
}

/// An append in progress: UTF-8 split across pieces waits for its next piece, as the
/// JavaScript floor's streaming `TextDecoder` does.
struct Intake {
    readers: Rc<Readers>,
    pending: Vec<u8>,
    /// UTF-16 code units sent (what the JavaScript floor answers).
    units: usize,
}

impl Intake {
    fn take(&mut self, piece: &[u8]) {
        self.pending.extend_from_slice(piece);
        let whole = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(), // bad input: sent as the lossy text below
        };
        if whole == 0 {
            return;
        }
        let rest = self.pending.split_off(whole);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        self.units += text.encode_utf16().count();
        self.readers.send(format!("data: {text}\n\n").as_bytes());
    }
}

/// Where [`read_body`] hands a streaming append's pieces.
#[wasm_bindgen]
pub struct FloorSink(Rc<RefCell<Intake>>);

#[wasm_bindgen]
impl FloorSink {
    pub fn write(&self, piece: &[u8]) {
        self.0.borrow_mut().take(piece);
    }
}

#[wasm_bindgen(inline_js = r#"
export async function read_body(body, sink) {
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      sink.write(value);
    }
  } finally {
    sink.free();
  }
}
"#)]
extern "C" {
    /// Reads `body` to its end, handing each piece to `sink`.
    fn read_body(body: &web_sys::ReadableStream, sink: FloorSink) -> js_sys::Promise;
}

#[wasm_bindgen]
extern "C" {
    /// A Durable Object stub, for the `fetch(request)` form.
    type Stub;
    #[wasm_bindgen(method, catch)]
    fn fetch(this: &Stub, req: &web_sys::Request) -> Result<js_sys::Promise, JsValue>;
}

/// The same object exported by hand (`--features manual-export`): its `fetch` takes and
/// answers the runtime's own request and response objects, with no `worker::Request` /
/// `worker::Response` and no async export around the synchronous paths. An experiment:
/// what the `#[durable_object]` macro and the `worker` crate's conversions cost per request.
#[cfg(feature = "manual-export")]
mod manual {
    use super::*;

    #[wasm_bindgen]
    pub struct FloorStream {
        readers: Rc<Readers>,
    }

    /// An answer's status and headers.
    fn init(status: u16, headers: &[(&str, &str)]) -> Result<web_sys::ResponseInit, JsValue> {
        let h = web_sys::Headers::new()?;
        for (name, value) in headers {
            h.set(name, value)?;
        }
        let init = web_sys::ResponseInit::new();
        init.set_status(status);
        init.set_headers(&h);
        Ok(init)
    }

    /// A 200 JSON answer.
    fn json(body: &str) -> Result<web_sys::Response, JsValue> {
        web_sys::Response::new_with_opt_str_and_init(Some(body), &init(200, &[("content-type", "application/json")])?)
    }

    fn resolved(r: Result<web_sys::Response, JsValue>) -> js_sys::Promise {
        match r {
            Ok(r) => js_sys::Promise::resolve(&JsValue::from(r)),
            Err(e) => js_sys::Promise::reject(&e),
        }
    }

    #[wasm_bindgen]
    impl FloorStream {
        #[wasm_bindgen(constructor)]
        pub fn new(_state: JsValue, _env: JsValue) -> FloorStream {
            FloorStream { readers: Rc::default() }
        }

        pub fn fetch(&self, req: web_sys::Request) -> js_sys::Promise {
            #[cfg(feature = "manual-request")]
            let _converted = worker::Request::from(<web_sys::Request as Clone>::clone(&req));
            let url = req.url();
            match path_of(&url).rsplit('/').next().unwrap_or_default() {
                "events" => resolved((|| {
                    let sse = init(200, &[("content-type", "text/event-stream"), ("cache-control", "no-cache")])?;
                    web_sys::Response::new_with_opt_readable_stream_and_init(Some(&self.readers.attach()?), &sse)
                })()),
                "append" => {
                    let intake = Rc::new(RefCell::new(Intake { readers: Rc::clone(&self.readers), pending: Vec::new(), units: 0 }));
                    let declared = req.headers().get("content-length").ok().flatten().is_some();
                    let body = req.body();
                    let read = if declared {
                        match req.array_buffer() {
                            Ok(p) => Either::Whole(p),
                            Err(e) => return js_sys::Promise::reject(&e),
                        }
                    } else {
                        Either::Streamed(body.map(|b| read_body(&b, FloorSink(Rc::clone(&intake)))))
                    };
                    wasm_bindgen_futures::future_to_promise(async move {
                        match read {
                            Either::Whole(p) => {
                                let buf = wasm_bindgen_futures::JsFuture::from(p).await?;
                                intake.borrow_mut().take(&js_sys::Uint8Array::new(&buf).to_vec());
                            }
                            Either::Streamed(Some(p)) => {
                                wasm_bindgen_futures::JsFuture::from(p).await?;
                            }
                            Either::Streamed(None) => {}
                        }
                        let units = intake.borrow().units;
                        #[cfg(feature = "manual-response")]
                        return Response::from_json(&serde_json::json!({ "seq": units }))
                            .map(|r| JsValue::from(web_sys::Response::from(r)))
                            .map_err(JsValue::from);
                        #[cfg(not(feature = "manual-response"))]
                        json(&format!("{{\"seq\":{units}}}")).map(JsValue::from)
                    })
                }
                "close" => {
                    self.readers.close();
                    resolved(json("{\"closed\":true}"))
                }
                _ => resolved(init(404, &[]).and_then(|i| web_sys::Response::new_with_opt_str_and_init(Some("not found"), &i))),
            }
        }
    }

    enum Either {
        Whole(js_sys::Promise),
        Streamed(Option<js_sys::Promise>),
    }
}
