//! The Workers shell (wasm32 only): the front Worker routes `{prefix}/{id}/…` to the stream's
//! Durable Object; everything else about a stream happens inside that object.

mod append;
mod dev;
mod faults;
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
use crate::core::config::Settings;
use worker::{Env, Request, Response};

#[cfg(feature = "standalone")]
#[worker::event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: worker::Context) -> worker::Result<Response> {
    handle_request(req, env).await
}

#[worker::event(start)]
fn start() {
    console_error_panic_hook::set_once();
}

/// The front Worker: validates the route (so a malformed id never reaches an object) and
/// forwards the request, streaming body and all, to the stream's Durable Object.
pub async fn handle_request(req: Request, env: Env) -> worker::Result<Response> {
    match route(req, &env).await {
        Ok(response) => Ok(response),
        Err(e) => http::error(&e),
    }
}

async fn route(req: Request, env: &Env) -> Result<Response, ApiError> {
    let path = req.path();
    if path.starts_with("/dev/") {
        return dev::handle(req, env).await;
    }
    // A bad configuration answers every request with the setting to fix (the object checks
    // the rest, such as the secret, with the same message).
    let settings = Settings::from_vars(|name| setup::var(env, name), setup::custom_sink_installed()).map_err(ApiError::misconfigured)?;
    let Some(route) = api::route(&settings.path_prefix, req.method().as_ref(), &path)? else {
        return Err(ApiError::not_found(&path));
    };
    let stub = env
        .durable_object("STREAMS")
        .and_then(|ns| ns.id_from_name(&route.stream_id)?.get_stub())
        .map_err(|e| ApiError::misconfigured(format!("the STREAMS Durable Object binding: {e}")))?;
    let (forwarded, pipe) = forward_body(&req).map_err(http::unavailable)?;
    let answer = stub.fetch_with_request(forwarded).await.map_err(http::unavailable);
    // The object may answer before the client has sent its whole body (a refusal, a cancelled
    // streaming append). Stop the pipe now, cancelling the client's body, so nothing reads it
    // after the answer is sent (which would break the client's connection).
    if let Some(pipe) = pipe {
        pipe.abort();
    }
    answer
}

/// A pass-through for a byte stream: the runtime's native `IdentityTransformStream` where it
/// exists (bytes move without a JavaScript hop per piece, which matters on the streaming
/// append, where every delta passes here), else a standard `TransformStream`.
fn byte_relay() -> worker::Result<web_sys::TransformStream> {
    use wasm_bindgen::JsCast;
    let native =
        js_sys::Reflect::get(&js_sys::global(), &"IdentityTransformStream".into()).ok().and_then(|c| c.dyn_into::<js_sys::Function>().ok());
    match native {
        Some(constructor) => {
            Ok(js_sys::Reflect::construct(&constructor, &js_sys::Array::new()).map_err(worker::Error::from)?.unchecked_into())
        }
        None => web_sys::TransformStream::new().map_err(worker::Error::from),
    }
}

/// The request to forward to the object. A body is piped through by this Worker, under an
/// abort signal it keeps; a request without a body is forwarded as it is.
fn forward_body(req: &Request) -> worker::Result<(Request, Option<web_sys::AbortController>)> {
    let raw = req.inner();
    let Some(body) = raw.body() else { return Ok((req.clone()?, None)) };
    let relay = byte_relay()?;
    let pipe = web_sys::AbortController::new().map_err(worker::Error::from)?;
    let options = web_sys::StreamPipeOptions::new();
    options.set_signal(&pipe.signal());
    options.set_prevent_cancel(true);
    let piping = body.pipe_to_with_options(&relay.writable(), &options);
    // The pipe's own outcome is reported by the object's reads; an abort here is expected.
    let ignore = wasm_bindgen::closure::Closure::once(|_: wasm_bindgen::JsValue| {});
    let _ = piping.catch(&ignore);
    ignore.forget();
    let init = web_sys::RequestInit::new();
    init.set_method(&raw.method());
    init.set_headers(&raw.headers());
    init.set_body(&relay.readable());
    let forwarded = web_sys::Request::new_with_str_and_init(&raw.url(), &init).map_err(worker::Error::from)?;
    Ok((Request::from(forwarded), Some(pipe)))
}
