//! The front Worker: every request enters here. It answers CORS preflights, authorizes (so a
//! denial reaches no object), answers a chat's lookups, and forwards a stream's request, body and
//! all, to that stream's Durable Object (`super::stream`).

pub(crate) mod chats;
mod relay;

use crate::edge::gate;
use crate::edge::http;
use crate::edge::setup;
use crate::engine::access::api::{self, ApiError};
use crate::engine::access::cors::Cors;
use futures::FutureExt;
use wasm_bindgen::JsCast;
use worker::{Env, Request, Response};

/// The standalone Worker's fetch handler (what `#[worker::event(fetch)]` would export, minus
/// its future: see `front`).
#[cfg(feature = "standalone")]
#[wasm_bindgen::prelude::wasm_bindgen(js_name = fetch)]
pub fn fetch(req: web_sys::Request, env: Env, _ctx: worker::worker_sys::Context) -> js_sys::Promise {
    front(req, &env)
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
/// about twice as much through the `worker` crate's wrappers and a Rust future).
fn front(req: web_sys::Request, env: &Env) -> js_sys::Promise {
    // Only a request with an `Origin` (a browser's) can be a cross-origin call: the common
    // server-to-server request pays one header lookup.
    match req.headers().get("origin").ok().flatten() {
        None => routed(req, env),
        Some(origin) => match cors(&req, &origin, env) {
            Cors::None => routed(req, env),
            Cors::Preflight(headers) => answered(preflight(&headers)),
            Cors::Add(headers) => with_headers(routed(req, env), headers),
        },
    }
}

fn answered(response: worker::Result<Response>) -> js_sys::Promise {
    match response {
        Ok(response) => js_sys::Promise::resolve(&wasm_bindgen::JsValue::from(web_sys::Response::from(response))),
        Err(e) => js_sys::Promise::reject(&e.into()),
    }
}

/// What CORS does for a browser's request from `origin` (nothing when the configuration is
/// bad: the request's own answer then says what to fix).
fn cors(req: &web_sys::Request, origin: &str, env: &Env) -> Cors {
    let Ok(settings) = setup::settings(env) else { return Cors::None };
    let url = req.url();
    let path = api::path_of(&url);
    let route_method = match api::chat_route(&settings.path_prefix, "GET", path) {
        Ok(Some(_)) => Some("GET"),
        _ => api::route_method(&settings.path_prefix, path),
    };
    let requested = req.headers().get("access-control-request-headers").ok().flatten();
    settings.allowed_origins.decide(Some(origin), &req.method(), route_method, requested.as_deref())
}

/// The 204 answer to a preflight from an allowed origin.
fn preflight(headers: &[(&str, String)]) -> worker::Result<Response> {
    let h = worker::Headers::new();
    for (name, value) in headers {
        h.set(name, value)?;
    }
    Ok(Response::empty()?.with_status(204).with_headers(h))
}

/// The answer of `answer`, with CORS headers added (a new response around the same body, so a
/// stream still streams).
fn with_headers(answer: js_sys::Promise, headers: Vec<(&'static str, String)>) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(async move {
        let response: web_sys::Response = wasm_bindgen_futures::JsFuture::from(answer).await?.unchecked_into();
        let h = web_sys::Headers::new_with_headers(&response.headers())?;
        for (name, value) in &headers {
            if *name == "vary" {
                h.append(name, value)?;
            } else {
                h.set(name, value)?;
            }
        }
        let init = web_sys::ResponseInit::new();
        init.set_status(response.status());
        init.set_status_text(&response.status_text());
        init.set_headers(&h);
        Ok(web_sys::Response::new_with_opt_readable_stream_and_init(response.body().as_ref(), &init)?.into())
    })
}

fn routed(req: web_sys::Request, env: &Env) -> js_sys::Promise {
    match route(&req, env) {
        // A rejection (the object could not be reached) answers the 503 of SPEC §4.
        Ok(Routed::Forwarded(answer)) => unavailable_on_rejection(answer),
        Ok(Routed::Gated(answer)) => answer,
        #[cfg(feature = "dev")]
        Ok(Routed::Dev) => {
            let env = env.clone();
            wasm_bindgen_futures::future_to_promise(async move {
                let response = crate::edge::dev::handle(Request::from(req), &env).await.or_else(|e| http::error(&e))?;
                Ok(web_sys::Response::from(response).into())
            })
        }
        Ok(Routed::Chat(settings, chat)) => {
            let env = env.clone();
            wasm_bindgen_futures::future_to_promise(async move {
                let response = chats::lookup(Request::from(req), env, settings, chat).await.or_else(|e| http::error(&e))?;
                Ok(web_sys::Response::from(response).into())
            })
        }
        // Refused here at once, with its body unread (a denied upload, however slow or large,
        // costs this Worker and every object nothing; the runtime discards the rest). The body
        // is left alone rather than cancelled: workerd answers at once either way (2-6 ms for a
        // 1-byte-a-second upload), but `wrangler dev`'s proxy takes a Worker that cancels its
        // own request body for a crash and reloads the runtime, which resets every local object
        // (docs/SECURITY.md, "Answered at once").
        Err(e) => answered(http::error(&e)),
    }
}

/// The object's answer, or the 503 of SPEC §4 when it could not be reached.
fn unavailable_on_rejection(answer: js_sys::Promise) -> js_sys::Promise {
    UNAVAILABLE.with(|unavailable| answer.unchecked_ref::<Answer>().catch_with(unavailable.as_ref().unchecked_ref()))
}

/// Where the front Worker sent a request.
enum Routed {
    /// To the stream's object: its answer.
    Forwarded(js_sys::Promise),
    /// Authorization that awaits (an authorizer that looks something up, or a read made for a
    /// chat): the answer once it allowed the request and the object answered, or the refusal.
    Gated(js_sys::Promise),
    /// A development endpoint (the `dev` feature, and `DEV_MODE=1`).
    #[cfg(feature = "dev")]
    Dev,
    /// A chat lookup (the front Worker answers it: it names no stream yet).
    Chat(std::rc::Rc<crate::engine::host::config::Settings>, api::ChatRoute),
}

fn route(req: &web_sys::Request, env: &Env) -> Result<Routed, ApiError> {
    let url = req.url();
    let path = api::path_of(&url);
    #[cfg(feature = "dev")]
    if path.starts_with("/dev/") {
        return Ok(Routed::Dev);
    }
    let settings = setup::settings(env).map_err(ApiError::misconfigured)?;
    if let Some(chat) = api::chat_route(&settings.path_prefix, &req.method(), path)? {
        return Ok(Routed::Chat(settings, chat));
    }
    let Some(route) = api::route(&settings.path_prefix, &req.method(), path)? else {
        return Err(ApiError::not_found(path));
    };
    let authorizer = setup::authorizer(env, &settings).map_err(ApiError::misconfigured)?;
    // An authorizer that reads the stream's meta is asked in the object, where the meta is.
    if authorizer.reads_meta() {
        return forward(req, env, &url, &route, None).map(Routed::Forwarded);
    }
    let asked = gate::Asked::of(&worker::Headers(req.headers()), &http::Target::parse(&url), &route, &*authorizer)?;
    // A reader's connection ends at its token's `exp` (the stream's object ends it).
    let expires_at = route.action.joins().then(|| authorizer.expires_at(&asked.question(&route, None))).flatten();
    // The JWT check answers at once: what it allows is forwarded without a future of its own.
    let allowed = match authorizer.authorize(&asked.question(&route, None)).now_or_never() {
        Some(verdict) => {
            gate::verdict(&route, verdict)?;
            if asked.chat().is_none() {
                return forward(req, env, &url, &route, expires_at).map(Routed::Forwarded);
            }
            true
        }
        None => false,
    };
    // The same JavaScript request (not `Request.clone()`, which would tee the body).
    let (req, env) = (<web_sys::Request as Clone>::clone(req), env.clone());
    Ok(Routed::Gated(wasm_bindgen_futures::future_to_promise(async move {
        let tables = || chats::tables(&env, &settings, &route.stream_id);
        let gated = match (allowed, asked.chat()) {
            (true, Some(chat)) => gate::check_chat(tables, &route, chat).await,
            _ => gate::ask(&*authorizer, &asked, &route, None, tables).await,
        };
        match gated.and_then(|()| forward(&req, &env, &url, &route, expires_at)) {
            Ok(answer) => wasm_bindgen_futures::JsFuture::from(unavailable_on_rejection(answer)).await,
            Err(e) => Ok(web_sys::Response::from(http::error(&e)?).into()),
        }
    })))
}

/// Forwards `req` to the stream's object; its answer. A stream whose id names a database that
/// is not configured is refused here (400 `unknown_database`, SPEC §13): it reaches no object.
/// `expires_at`: the reader's token's `exp` (Unix seconds), told to the object on the routes that
/// hold a connection open (`gate::TOKEN_EXPIRES_HEADER`, whatever the client sent in it).
fn forward(req: &web_sys::Request, env: &Env, url: &str, route: &api::Route, expires_at: Option<u64>) -> Result<js_sys::Promise, ApiError> {
    let settings = setup::settings(env).map_err(ApiError::misconfigured)?;
    settings.databases.of_id(&route.stream_id).map_err(ApiError::unknown_database)?;
    let stub: worker::worker_sys::DurableObject = env
        .durable_object("STREAMS")
        .and_then(|ns| ns.id_from_name(&route.stream_id)?.get_stub())
        .map_err(|e| ApiError::misconfigured(format!("the STREAMS Durable Object binding: {e}")))?
        .into_rpc();
    let init = forward_init(req, route.action.joins().then_some(expires_at));
    stub.unchecked_ref::<Stub>().fetch_with_init(url, &init).map_err(|e| http::unavailable(worker::Error::from(e)))
}

/// The request to forward to the object, as the `init` of a new one on the same URL: its
/// method, headers and body, and not its `cf` (the runtime deep-copies a request's `cf` into a
/// request built from it, and the object's `worker::Request` reads it again: ~6% of a plain
/// append's CPU, for properties the object never uses). The body is the client's own stream,
/// handed over as it is: the runtime streams it into the object, which reads every body to its
/// end before it answers (up to `MAX_DISCARDED_BYTES`) or, answering early (a cancelled
/// streaming append), cancels its read. Relaying it through a pipe of this Worker's, to stop
/// that pipe once the object answered, cost about 140 KB of memory per open streaming append
/// and a hop per piece (docs/PERFORMANCE.md, "Changes tried").
/// The object's request: the client's, with (on a reader's route) the token's expiry set or
/// cleared.
fn forward_init(req: &web_sys::Request, expires_at: Option<Option<u64>>) -> web_sys::RequestInit {
    let init = web_sys::RequestInit::new();
    init.set_method(&req.method());
    match expires_at.and_then(|_| web_sys::Headers::new_with_headers(&req.headers()).ok()) {
        Some(headers) => {
            let _ = headers.delete(gate::TOKEN_EXPIRES_HEADER);
            if let Some(Some(secs)) = expires_at {
                let _ = headers.set(gate::TOKEN_EXPIRES_HEADER, &secs.to_string());
            }
            init.set_headers(&headers);
        }
        None => init.set_headers(&req.headers()),
    }
    if let Some(body) = req.body() {
        init.set_body(&body);
    }
    init
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
    /// The answer when the object could not be reached: the 503 of SPEC §4 (shared by every
    /// forwarded request's promise: one closure per request would be kept alive forever, since
    /// a handler that is never called never frees).
    static UNAVAILABLE: wasm_bindgen::closure::Closure<dyn FnMut(wasm_bindgen::JsValue) -> wasm_bindgen::JsValue> =
        wasm_bindgen::closure::Closure::new(|e: wasm_bindgen::JsValue| -> wasm_bindgen::JsValue {
            match http::error(&http::unavailable(worker::Error::from(e))) {
                Ok(response) => web_sys::Response::from(response).into(),
                Err(e) => js_sys::Promise::reject(&e.into()).into(),
            }
        });
}
