//! The Workers shell (wasm32 only): the front Worker routes `{prefix}/{id}/…` to the stream's
//! Durable Object; everything else about a stream happens inside that object.

mod append;
mod dev;
mod faults;
mod heap;
mod http;
mod lease;
mod object;
mod pump;
mod setup;
mod shell;
mod sse;
mod store;
mod ui;

pub use object::StreamObject;
pub use setup::{install_authorizer, install_checkpoint_sink, install_event_hook};
pub use store::{CheckpointSink, D1Tables};

use crate::core::api::{self, ApiError};
use wasm_bindgen::JsCast;
use worker::{Env, Request, Response};

/// The standalone Worker's fetch handler (what `#[worker::event(fetch)]` would export, minus
/// its future: see `front`).
#[cfg(feature = "standalone")]
#[wasm_bindgen::prelude::wasm_bindgen(js_name = fetch)]
pub fn fetch(req: web_sys::Request, env: Env, _ctx: worker::worker_sys::Context) -> js_sys::Promise {
    front(req, &env)
}

/// Panics print their message. The name is this crate's own: wasm-bindgen exports a start
/// function by its name, and an embedding Worker's own `start` must not clash with it.
#[worker::event(start)]
fn rindle_streams_start() {
    console_error_panic_hook::set_once();
}

/// The front Worker: validates the route (so a malformed id never reaches an object) and
/// forwards the request, streaming body and all, to the stream's Durable Object.
pub async fn handle_request(req: Request, env: Env) -> worker::Result<Response> {
    // The same JavaScript request (not `Request.clone()`, which would tee the body).
    let answer = wasm_bindgen_futures::JsFuture::from(front(<web_sys::Request as Clone>::clone(req.inner()), &env)).await?;
    Ok(Response::from(answer.unchecked_into::<web_sys::Response>()))
}

/// The front Worker on the runtime's own objects. Routing is synchronous, and the object's
/// answer is handed back as the promise the stub returned: no future, no task, no rebuilt
/// response, nothing read that routing does not need (a plain append's front Worker cost
/// about twice as much through the `worker` crate's wrappers and a Rust future). Only a relayed
/// (streaming) body needs a future: to stop its pipe once the answer is there.
fn front(req: web_sys::Request, env: &Env) -> js_sys::Promise {
    let answered = |response: worker::Result<Response>| match response {
        Ok(response) => js_sys::Promise::resolve(&wasm_bindgen::JsValue::from(web_sys::Response::from(response))),
        Err(e) => js_sys::Promise::reject(&e.into()),
    };
    match route(req, env) {
        Ok(Routed::Forwarded { answer, pipe }) => {
            // A rejection (the object could not be reached) answers the 503 of SPEC §4.
            let answer = UNAVAILABLE.with(|unavailable| answer.unchecked_ref::<Answer>().catch_with(unavailable.as_ref().unchecked_ref()));
            let Some(pipe) = pipe else { return answer };
            wasm_bindgen_futures::future_to_promise(async move {
                let answer = wasm_bindgen_futures::JsFuture::from(answer).await;
                // The object may answer before the client has sent its whole body (a refusal, a
                // cancelled streaming append). Stop the pipe now, cancelling the client's body,
                // so nothing reads it after the answer is sent (which would break the client's
                // connection).
                pipe.abort();
                answer
            })
        }
        Ok(Routed::Dev(req)) => {
            let env = env.clone();
            wasm_bindgen_futures::future_to_promise(async move {
                let response = dev::handle(req, &env).await.or_else(|e| http::error(&e))?;
                Ok(web_sys::Response::from(response).into())
            })
        }
        Err(e) => answered(http::error(&e)),
    }
}

/// Where the front Worker sent a request.
enum Routed {
    /// To the stream's object; `pipe` relays a streaming body, to be stopped once answered.
    Forwarded { answer: js_sys::Promise, pipe: Option<web_sys::AbortController> },
    /// A development endpoint (`DEV_MODE=1` only).
    Dev(Request),
}

fn route(req: web_sys::Request, env: &Env) -> Result<Routed, ApiError> {
    let url = req.url();
    let path = api::path_of(&url);
    if path.starts_with("/dev/") {
        return Ok(Routed::Dev(Request::from(req)));
    }
    // A bad configuration answers every request with the setting to fix (the object checks
    // the rest, such as the secret, with the same message).
    let settings = setup::settings(env).map_err(ApiError::misconfigured)?;
    let Some(route) = api::route(&settings.path_prefix, &req.method(), path)? else {
        return Err(ApiError::not_found(path));
    };
    let stub: worker::worker_sys::DurableObject = env
        .durable_object("STREAMS")
        .and_then(|ns| ns.id_from_name(&route.stream_id)?.get_stub())
        .map_err(|e| ApiError::misconfigured(format!("the STREAMS Durable Object binding: {e}")))?
        .into_rpc();
    let (init, pipe) = forward(&req).map_err(http::unavailable)?;
    let answer = stub.unchecked_ref::<Stub>().fetch_with_init(&url, &init).map_err(|e| http::unavailable(worker::Error::from(e)))?;
    Ok(Routed::Forwarded { answer, pipe })
}

/// A pass-through for a byte stream: the runtime's native `IdentityTransformStream` where it
/// exists (bytes move without a JavaScript hop per piece, which matters on the streaming
/// append, where every delta passes here), else a standard `TransformStream`.
fn byte_relay() -> worker::Result<web_sys::TransformStream> {
    let native =
        js_sys::Reflect::get(&js_sys::global(), &"IdentityTransformStream".into()).ok().and_then(|c| c.dyn_into::<js_sys::Function>().ok());
    match native {
        Some(constructor) => {
            Ok(js_sys::Reflect::construct(&constructor, &js_sys::Array::new()).map_err(worker::Error::from)?.unchecked_into())
        }
        None => web_sys::TransformStream::new().map_err(worker::Error::from),
    }
}

/// The request to forward to the object, as the `init` of a new one on the same URL: its
/// method, headers and body, and not its `cf` (the runtime deep-copies a request's `cf` into a
/// request built from it, and the object's `worker::Request` reads it again: ~6% of a plain
/// append's CPU, for properties the object never uses). A body of unknown length (a streaming
/// append) is piped through by this Worker, under an abort signal it keeps. A body with a
/// declared length is handed over as it is: the object reads such a body to its end before it
/// answers (it reads or discards every body up to `MAX_DISCARDED_BYTES`), so there is nothing
/// to stop, and the relay, its pipe and its abort (a tenth of the front Worker's CPU on a plain
/// append) are saved.
fn forward(req: &web_sys::Request) -> worker::Result<(web_sys::RequestInit, Option<web_sys::AbortController>)> {
    let init = web_sys::RequestInit::new();
    init.set_method(&req.method());
    let headers = req.headers();
    init.set_headers(&headers);
    let Some(body) = req.body() else { return Ok((init, None)) };
    let declared = headers.get("content-length").ok().flatten().and_then(|l| l.parse::<u64>().ok());
    if declared.is_some_and(|n| n <= u64::from(append::MAX_DISCARDED_BYTES)) {
        init.set_body(&body);
        return Ok((init, None));
    }
    let relay = byte_relay()?;
    let pipe = web_sys::AbortController::new().map_err(worker::Error::from)?;
    let options = web_sys::StreamPipeOptions::new();
    options.set_signal(&pipe.signal());
    options.set_prevent_cancel(true);
    let piping = body.pipe_to_with_options(&relay.writable(), &options);
    // The pipe's own outcome is reported by the object's reads; an abort here is expected.
    IGNORE.with(|ignore| {
        let _ = piping.catch(ignore);
    });
    init.set_body(&relay.readable());
    Ok((init, Some(pipe)))
}

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// A Durable Object stub, for the `fetch(url, init)` form `worker_sys` does not bind.
    type Stub;
    /// `stub.fetch(url, init)`.
    #[wasm_bindgen(method, catch, js_name = fetch)]
    fn fetch_with_init(this: &Stub, url: &str, init: &web_sys::RequestInit) -> Result<js_sys::Promise, wasm_bindgen::JsValue>;
    /// The object's answer, a promise of a response.
    type Answer;
    /// `answer.catch(handler)`, where the handler's value answers in its place.
    #[wasm_bindgen(method, js_name = catch)]
    fn catch_with(this: &Answer, handler: &js_sys::Function) -> js_sys::Promise;
}

thread_local! {
    /// A rejection handler that does nothing, shared by every relay's pipe (one per request
    /// would be a closure kept alive forever: a handler that is never called never frees).
    static IGNORE: wasm_bindgen::closure::Closure<dyn FnMut(wasm_bindgen::JsValue)> =
        wasm_bindgen::closure::Closure::new(|_: wasm_bindgen::JsValue| {});
    /// The answer when the object could not be reached: the 503 of SPEC §4 (shared, like
    /// `IGNORE`, by every forwarded request's promise).
    static UNAVAILABLE: wasm_bindgen::closure::Closure<dyn FnMut(wasm_bindgen::JsValue) -> wasm_bindgen::JsValue> =
        wasm_bindgen::closure::Closure::new(|e: wasm_bindgen::JsValue| -> wasm_bindgen::JsValue {
            match http::error(&http::unavailable(worker::Error::from(e))) {
                Ok(response) => web_sys::Response::from(response).into(),
                Err(e) => js_sys::Promise::reject(&e.into()).into(),
            }
        });
}
