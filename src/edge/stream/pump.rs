//! `POST /streams/{id}/pump`: the object fetches an upstream model API itself and pushes its
//! text deltas (on a `ui` stream, UI message chunks), so the producer's own request ends at
//! once. The upstream's end closes the stream; an upstream error or a malformed event fails it;
//! a cancel aborts the upstream. What to push, store, re-attach or cancel is decided by
//! [`engine::pump`](crate::engine::pump); this module only performs it.
//!
//! In background mode (`openai-responses`, `"background": true`) the pump also keeps the
//! response's [`BackgroundRecord`] in the object's storage (never a key: the credential is a
//! Worker secret named on `PUMP_SECRETS` and read from the environment at each call), re-attaches
//! when its connection is lost, and cancels the response upstream when the answer ends short of
//! complete. After an object reset, the rehydrating object calls
//! [`StreamObject::reattach_pump`].

use super::shell::Shell;
use super::{Object, StreamObject};
use crate::edge::http::unavailable;
use crate::edge::meter::Meter;
use crate::edge::runtime::log;
use crate::engine::access::api::ApiError;
use crate::engine::host::config::Settings;
use crate::engine::host::hook::SealCause;
use crate::engine::live::{LiveStream, PushError, PushReceipt};
use crate::engine::pump::{
    BackgroundRecord, CallMethod, Interruption, PumpFailure, PumpRequest, PumpStep, Reattach, ReattachNext, Relay, Retrieved, UpstreamCall,
};
use crate::engine::text::utf16::Offset;
use eventsource_stream::{Event, Eventsource};
use futures::future::{select, Either};
use futures::{FutureExt, Stream, StreamExt};
use serde_json::json;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;
use worker::{AbortController, Delay, Env, Fetch, Headers, Method, Request, RequestInit, RequestRedirect, Response, State};

/// The storage key of the background pump's record.
const RECORD_KEY: &str = "pumpBackground";

/// How long a cancelled background pump still waits for the upstream to name its response, so
/// it can cancel it there (a cancel in the first instant of a pump).
const NAME_WAIT: Duration = Duration::from_secs(10);

/// What a running pump performs its work with.
pub struct PumpRun {
    shell: Rc<Shell>,
    /// The producer epoch the stream granted this pump (`LiveStream::start_pump`).
    epoch: u64,
    /// A handle on the object's state: the storage of the background record.
    state: State,
    /// The environment the named secret is read from at each call.
    env: Env,
    /// The object's billing counts (its storage calls).
    meter: Rc<Meter>,
}

/// How a pump ended.
enum PumpEnd {
    /// The upstream finished its response.
    Complete,
    /// A cancel arrived.
    Cancelled,
    /// Someone else sealed the stream meanwhile.
    StreamEnded,
    /// The upstream (or the stream) failed: seal `error`.
    Failed(String),
    /// A re-attach cannot go on without a seam: seal `interrupted` at the durable text.
    Interrupted(Interruption),
}

/// How a pump attaches to its upstream: the request that creates the response, or a re-attach.
enum Attach {
    Create(Request, Relay),
    Reattach(Reattach),
}

/// How one attachment's events ended.
enum Streamed {
    End(PumpEnd),
    /// The connection was lost (a transport error, or the body ended before the final event).
    Lost(String),
}

type CancelWatch = futures::future::Fuse<futures::channel::oneshot::Receiver<()>>;

impl PumpRun {
    /// A pump run holding the stream's producer epoch `epoch` (0 for a run that only reads or
    /// cancels a stored record: its pushes are never admitted).
    pub fn new(shell: Rc<Shell>, epoch: u64, state: &State, env: Env, meter: Rc<Meter>) -> Self {
        // A second handle on the same JavaScript state object (`State` itself is not `Clone`).
        let raw: &wasm_bindgen::JsValue = state.as_raw().as_ref();
        let state = State::from(wasm_bindgen::JsCast::unchecked_into::<worker::worker_sys::DurableObjectState>(raw.clone()));
        PumpRun { shell, epoch, state, env, meter }
    }

    fn with_epoch(self, epoch: u64) -> Self {
        Self { epoch, ..self }
    }

    /// Pushes pumped text, admitted by the pump's epoch in the same borrow (a fenced push is
    /// refused as a closed stream's: the pump is no longer the producer).
    /// The text goes in as the store can keep it ([`PumpRun::storable`]).
    fn push(&self, text: &str) -> Option<Result<PushReceipt, PushError>> {
        let epoch = self.epoch;
        let text = self.storable(text);
        self.shell.feed(|s, now| s.admit_pump(epoch).map_err(|_| PushError::Closed).and_then(|()| s.push(&text, now)))
    }

    fn stream_id(&self) -> &str {
        &self.shell.stream_id
    }

    /// Text as the durable store can keep it (U+0000 replaced on Postgres: the upstream cannot
    /// be told to fix what it sent; `Backend::storable`).
    fn storable<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        match crate::edge::setup::settings(&self.env) {
            Ok(settings) => settings.backend.storable(text),
            Err(_) => std::borrow::Cow::Borrowed(text),
        }
    }

    /// The stored background record, if a background pump left one.
    async fn record(&self) -> worker::Result<Option<BackgroundRecord>> {
        self.meter.storage(|s| s.gets += 1);
        self.state.storage().get::<BackgroundRecord>(RECORD_KEY).await
    }

    async fn store(&self, record: &BackgroundRecord) {
        self.meter.storage(|s| s.puts += 1);
        if let Err(e) = self.state.storage().put(RECORD_KEY, record).await {
            // The older record stays: a re-attach from it replays more, and checks more.
            log("error", "pump_record_not_stored", self.stream_id(), json!({"error": e.to_string()}));
        }
    }

    async fn forget(&self) {
        self.meter.storage(|s| s.deletes += 1);
        if let Err(e) = self.state.storage().delete(RECORD_KEY).await {
            log("error", "pump_record_not_deleted", self.stream_id(), json!({"error": e.to_string()}));
        }
    }

    /// Sends an upstream call, its credential header read from the named secret now, if
    /// `PUMP_UPSTREAMS` still allows its URL (a re-attach after a deploy that changed the list).
    async fn send(&self, call: &UpstreamCall, controller: &AbortController) -> Result<Response, String> {
        let settings = crate::edge::setup::settings(&self.env).map_err(|e| e.to_string())?;
        settings.pump_upstreams.permit(&call.url).map_err(|e| e.to_string())?;
        let headers = Headers::new();
        let accept = if call.method == CallMethod::Get { "text/event-stream, application/json" } else { "application/json" };
        headers.set("accept", accept).map_err(|e| e.to_string())?;
        if let Some(secret) = &call.secret {
            let value = self.env.secret(secret).map_err(|_| format!("the secret {secret} is not set"))?.to_string();
            let (name, value) = call.credential_header(&value);
            headers.set(name, &value).map_err(|_| format!("the secret {secret} is not a valid header value"))?;
        }
        let mut init = RequestInit::new();
        init.with_method(if call.method == CallMethod::Get { Method::Get } else { Method::Post }).with_headers(headers);
        init.with_redirect(RequestRedirect::Manual);
        let request = Request::new_with_init(&call.url, &init).map_err(|e| e.to_string())?;
        let fetch = Fetch::Request(request);
        fetch.send_with_signal(&controller.signal()).await.map_err(|e| format!("the upstream request failed: {e}"))
    }

    /// Seals the stream as the pump ended; for a background pump (`cancel` is its response's
    /// cancel call), cancels the response upstream unless the answer is complete (the provider
    /// would otherwise generate, and bill, the rest for nobody) and forgets the record. Never
    /// logs the upstream's headers or query (they may carry keys).
    async fn finish(&self, end: PumpEnd, cancel: Option<UpstreamCall>, upstream: &str) {
        let (outcome, error) = match &end {
            PumpEnd::Complete => ("complete", None),
            PumpEnd::Cancelled => ("cancelled", None),
            PumpEnd::StreamEnded => ("stream already ended", None),
            PumpEnd::Failed(e) => ("error", Some(e.clone())),
            PumpEnd::Interrupted(i) => ("interrupted", Some(i.to_string())),
        };
        let (level, event) = if error.is_some() { ("warn", "pump_failed") } else { ("info", "pump_finished") };
        log(level, event, self.stream_id(), json!({"upstream": upstream, "outcome": outcome, "error": error}));
        let complete = matches!(end, PumpEnd::Complete);
        match end {
            PumpEnd::Complete | PumpEnd::Cancelled => drop(self.shell.feed(|s, now| s.close(now))),
            PumpEnd::StreamEnded => {}
            PumpEnd::Failed(e) => drop(self.shell.feed(|s, now| s.fail(&self.storable(&e), now))),
            PumpEnd::Interrupted(i) => drop(self.shell.feed(|s, now| s.interrupt(SealCause::UpstreamLost, i.to_string(), now))),
        }
        if let Some(call) = cancel {
            if !complete {
                self.cancel_upstream(&call).await;
            }
            self.forget().await;
        }
    }

    /// `POST {endpoint}/{id}/cancel`, logged (an upstream that refuses it changes nothing here).
    async fn cancel_upstream(&self, call: &UpstreamCall) {
        let outcome = match self.send(call, &AbortController::default()).await {
            Ok(response) => json!({"status": response.status_code()}),
            Err(e) => json!({"error": e}),
        };
        log("info", "pump_upstream_cancelled", self.stream_id(), json!({"upstream": redacted(&call.url), "outcome": outcome}));
    }
}

/// Builds the upstream request from a pump body; refuses a bad one with 400 `bad_upstream` (a
/// URL `PUMP_UPSTREAMS` does not allow, a secret not on `PUMP_SECRETS` or pinned elsewhere
/// included). Redirects are not followed: a 3xx answer fails the pump.
pub fn upstream_request(body: &[u8], settings: &Settings, env: &Env) -> Result<(PumpRequest, Request), ApiError> {
    let pump = PumpRequest::parse(body, &settings.pump_upstreams, &settings.pump_secrets).map_err(ApiError::bad_upstream)?;
    let headers = Headers::new();
    for (name, value) in &pump.headers {
        headers.set(name, value).map_err(|e| ApiError::bad_upstream(format!("header {name:?}: {e}")))?;
    }
    if let Some(auth) = &pump.auth {
        // Listed secrets are checked at start to be set (config).
        let value = env.secret(&auth.secret).map_err(|_| ApiError::misconfigured(format!("the secret {} is not set", auth.secret)))?;
        let (name, value) = pump.format.credential_header(&value.to_string());
        headers
            .set(name, &value)
            .map_err(|_| ApiError::misconfigured(format!("the secret {} is not a valid header value", auth.secret)))?;
    }
    let mut init = RequestInit::new();
    let method = if pump.method.as_deref() == Some("GET") { Method::Get } else { Method::Post };
    init.with_method(method).with_redirect(RequestRedirect::Manual);
    if let Some(body) = &pump.body {
        if !pump.headers.keys().any(|k| k.eq_ignore_ascii_case("content-type")) {
            headers.set("content-type", "application/json").map_err(unavailable)?;
        }
        init.with_body(Some(body.to_string().into()));
    }
    if !pump.headers.keys().any(|k| k.eq_ignore_ascii_case("accept")) {
        headers.set("accept", "text/event-stream").map_err(unavailable)?;
    }
    init.with_headers(headers);
    let request = Request::new_with_init(&pump.url, &init).map_err(|e| ApiError::bad_upstream(format!("url: {e}")))?;
    Ok((pump, request))
}

/// Runs a new pump to its end and seals the stream accordingly.
pub async fn run(run: PumpRun, pump: PumpRequest, request: Request) {
    let upstream = pump.redacted_url().to_owned();
    let (format, offset) = run.shell.inspect(|s| (s.format(), s.seq())).unwrap_or_default();
    let relay = Relay::new(&pump, format, run.stream_id(), offset);
    let fields = json!({"format": format!("{:?}", pump.format), "upstream": upstream, "background": relay.background()});
    log("info", "pump_started", run.stream_id(), fields);
    let (end, cancel) = drive(&run, Attach::Create(request, relay)).await;
    run.finish(end, cancel, &upstream).await;
}

/// Attaches, streams, and re-attaches while the engine says so. Returns the end and, for a
/// background pump whose response is named, the call that cancels it.
async fn drive(run: &PumpRun, mut attach: Attach) -> (PumpEnd, Option<UpstreamCall>) {
    let mut cancelled = run.shell.watch_cancel().fuse();
    let mut cancel = None;
    loop {
        // Aborted once this attachment's events end: a response still streaming is cut off.
        let controller = AbortController::default();
        let (mut relay, response) = match attach {
            Attach::Create(request, relay) => {
                let (fetch, signal) = (Fetch::Request(request), controller.signal());
                let raced = select(Box::pin(fetch.send_with_signal(&signal)), &mut cancelled).await;
                match raced {
                    Either::Left((Ok(response), _)) => (relay, response),
                    Either::Left((Err(e), _)) => return (PumpEnd::Failed(format!("the upstream request failed: {e}")), None),
                    // A background response runs on without us: it is cancelled by its name,
                    // which the upstream's first events give.
                    Either::Right((_, send)) if relay.background() => {
                        run.shell.feed(|s, now| s.close(now));
                        let mut relay = relay;
                        if let Ok(Ok(bytes)) = send.await.map(|mut response| response.stream()) {
                            learn_name(&mut relay, Box::pin(bytes.eventsource())).await;
                        }
                        return (PumpEnd::Cancelled, relay.cancel_call());
                    }
                    Either::Right(_) => {
                        controller.abort();
                        return (PumpEnd::Cancelled, None);
                    }
                }
            }
            Attach::Reattach(reattach) => {
                cancel = Some(reattach.record().cancel_call());
                let response = match run.send(&reattach.call(), &controller).await {
                    Ok(response) => response,
                    Err(e) => return (PumpEnd::Failed(format!("re-attaching the pump: {e}")), cancel),
                };
                match reattach.handle_answer(response.status_code()) {
                    ReattachNext::Relay(relay) => (relay, response),
                    ReattachNext::Retrieve(retrieve) => {
                        let (status, body) = match run.send(&retrieve.call(), &controller).await {
                            Ok(mut r) => (r.status_code(), r.bytes().await.unwrap_or_default()),
                            Err(e) => return (PumpEnd::Failed(format!("re-attaching the pump: {e}")), cancel),
                        };
                        let Retrieved { push, step } = retrieve.handle_answer(status, &body);
                        return (push_then(run, &push, step), cancel);
                    }
                    ReattachNext::Retry { reattach, after_ms } => {
                        log("info", "pump_reattach_retry", run.stream_id(), json!({"status": response.status_code(), "afterMs": after_ms}));
                        if let Either::Right(_) = select(Delay::from(Duration::from_millis(after_ms.0)), &mut cancelled).await {
                            return (PumpEnd::Cancelled, cancel);
                        }
                        attach = Attach::Reattach(reattach);
                        continue;
                    }
                    ReattachNext::Interrupt(i) => return (PumpEnd::Interrupted(i), cancel),
                }
            }
        };
        let status = response.status_code();
        if !(200..300).contains(&status) {
            // Its body (an internal service's, perhaps) goes to the log only.
            let excerpt = excerpt(response).await;
            log("warn", "pump_upstream_refused", run.stream_id(), json!({"status": status, "body": excerpt}));
            return (failed(run, PumpFailure::Status(status)), relay.cancel_call().or(cancel));
        }
        let streamed = stream_events(run, &mut relay, response, &mut cancelled).await;
        controller.abort(); // a no-op after a complete response
        cancel = relay.cancel_call().or(cancel);
        match streamed {
            Streamed::End(end) => return (end, cancel),
            Streamed::Lost(error) => match relay.reattach() {
                Ok(reattach) => {
                    log("info", "pump_reattaching", run.stream_id(), json!({"after": error, "mark": reattach.record().mark.after}));
                    attach = Attach::Reattach(reattach);
                }
                Err(_) => return (PumpEnd::Failed(error), cancel),
            },
        }
    }
}

/// Streams one attachment's events through the relay into the stream, storing the background
/// record whenever the engine has a new one.
async fn stream_events(run: &PumpRun, relay: &mut Relay, mut response: Response, cancelled: &mut CancelWatch) -> Streamed {
    let bytes = match response.stream() {
        Ok(bytes) => bytes,
        Err(e) => return Streamed::Lost(format!("the upstream sent no body: {e}")),
    };
    let mut events = Box::pin(bytes.eventsource());
    loop {
        let cancel_seen = run.shell.inspect(LiveStream::cancelled).unwrap_or(false);
        let next = if cancel_seen { None } else { Some(select(events.next(), &mut *cancelled).await) };
        let step = match next {
            None | Some(Either::Right(_)) => {
                if relay.background() && relay.response_id().is_none() {
                    run.shell.feed(|s, now| s.close(now));
                    learn_name(relay, events).await;
                }
                return Streamed::End(PumpEnd::Cancelled);
            }
            Some(Either::Left((None, _))) => return Streamed::Lost(PumpFailure::EndedEarly.to_string()),
            Some(Either::Left((Some(Err(e)), _))) => return Streamed::Lost(format!("the upstream stream failed: {e}")),
            Some(Either::Left((Some(Ok(event)), _))) => relay.handle_event(&event.event, &event.data),
        };
        let push = relay.take_push();
        if !push.is_empty() {
            match run.push(&push) {
                Some(Ok(receipt)) if receipt.cancelled => return Streamed::End(PumpEnd::Cancelled),
                Some(Ok(_)) => {}
                // Past MAX_STREAM_BYTES the stream seals itself `error`, with the text it has.
                Some(Err(PushError::Closed | PushError::NotOpen | PushError::TooLarge { .. })) | None => {
                    return Streamed::End(PumpEnd::StreamEnded)
                }
                Some(Err(e @ (PushError::BadChunk { .. } | PushError::NotUi))) => {
                    return Streamed::End(PumpEnd::Failed(format!("the stream refused the pumped text: {e}")))
                }
            }
        }
        let durable = run.shell.inspect(LiveStream::durable_seq).unwrap_or_default();
        if let Some(record) = relay.poll_record(durable) {
            run.store(&record).await;
        }
        match step {
            PumpStep::Continue => {}
            PumpStep::Complete => return Streamed::End(PumpEnd::Complete),
            PumpStep::Failed(failure) => return Streamed::End(failed(run, failure)),
            PumpStep::Interrupted(i) => return Streamed::End(PumpEnd::Interrupted(i)),
        }
    }
}

/// A failure as the stream's error: what readers may be told; the detail goes to the log.
fn failed(run: &PumpRun, failure: PumpFailure) -> PumpEnd {
    let readers = failure.for_readers();
    let detail = failure.to_string();
    if detail != readers {
        log("warn", "pump_failure_detail", run.stream_id(), json!({"detail": detail}));
    }
    PumpEnd::Failed(readers)
}

/// The first bytes of an answer's body, for a log line (at most 300, then the rest is
/// cancelled: an error answer may be of any length).
async fn excerpt(response: Response) -> String {
    const MAX: usize = 300;
    let Some(body) = web_sys::Response::from(response).body() else { return String::new() };
    let mut stream = wasm_streams::ReadableStream::from_raw(body);
    let mut reader = stream.get_reader();
    let mut bytes = Vec::new();
    while bytes.len() < MAX {
        match reader.read().await {
            Ok(Some(chunk)) => bytes.extend(js_sys::Uint8Array::new(&chunk).to_vec()),
            _ => break,
        }
    }
    let _ = reader.cancel().await;
    bytes.truncate(MAX);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A background pump cancelled before the upstream named its response: the stream is sealed;
/// read the first events (for at most [`NAME_WAIT`]) until the relay knows the name the
/// upstream cancel needs.
async fn learn_name<E>(relay: &mut Relay, mut events: Pin<Box<impl Stream<Item = Result<Event, E>>>>) {
    let named = async {
        while relay.response_id().is_none() {
            match events.next().await {
                Some(Ok(event)) => drop(relay.handle_event(&event.event, &event.data)),
                _ => return,
            }
        }
    };
    let _ = select(Box::pin(named), Delay::from(NAME_WAIT)).await;
}

/// Pushes the last text a stored response gave, then ends as `step` says.
fn push_then(run: &PumpRun, push: &str, step: PumpStep) -> PumpEnd {
    if !push.is_empty() && !matches!(run.push(push), Some(Ok(_))) {
        return PumpEnd::StreamEnded;
    }
    match step {
        PumpStep::Continue | PumpStep::Complete => PumpEnd::Complete,
        PumpStep::Failed(failure) => failed(run, failure),
        PumpStep::Interrupted(i) => PumpEnd::Interrupted(i),
    }
}

/// A URL without its query, for logs.
fn redacted(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or_default()
}

/// What [`StreamObject::reattach_pump`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PumpReattach {
    /// No background pump left a record here: the stream waits for its producer as usual.
    NoRecord,
    /// The re-attach runs (it seals the stream when it ends, as a pump does).
    Started,
    /// The record could not be used: the stream was sealed `interrupted` with this reason, and
    /// the response cancelled upstream.
    Interrupted(String),
}

impl StreamObject {
    /// THE SEAM FOR REHYDRATION (issue 35). Call it once the stream rebuilt from D1 is
    /// installed in `o.shell` and live at `seq = durableSeq`, with `durable_text` the durable
    /// text from offset `durable_from` (0 for the whole) to the durable length, as read from D1.
    /// When a background pump left its record here, this re-attaches to the response
    /// (`starting_after` the stored mark), checks the replay against `durable_text`, pushes
    /// what comes after it, and ends the stream as a pump does; the object counts as pumping
    /// meanwhile. A storage error is returned as is (the record stays for another try).
    pub(crate) async fn reattach_pump(&self, o: &Rc<Object>, durable_from: Offset, durable_text: &str) -> worker::Result<PumpReattach> {
        let run = PumpRun::new(Rc::clone(&o.shell), 0, &self.state, self.env.clone(), Rc::clone(&self.meter));
        let Some(record) = run.record().await? else { return Ok(PumpReattach::NoRecord) };
        let upstream = record.endpoint.clone();
        let cancel = record.cancel_call();
        let reattach = match Reattach::after_reset(record, durable_from, durable_text) {
            Ok(reattach) => reattach,
            Err(i) => {
                let reason = i.to_string();
                run.finish(PumpEnd::Interrupted(i), Some(cancel), &upstream).await;
                return Ok(PumpReattach::Interrupted(reason));
            }
        };
        if o.pumping.get() {
            return Ok(PumpReattach::Started); // one runs here already
        }
        // The re-attached pump takes the rebuilt stream as its producer, its epoch stored as a
        // resume's is: a window left in storage would have passed by the next reset, which would
        // then seal the row under a pump still running upstream.
        let grant = match o.shell.feed(|s, now| s.start_pump(now)) {
            Some(Ok(grant)) => grant,
            // The rebuilt stream is sealing already (a Stop recorded on its row): its response
            // is cancelled upstream, as a cancel of a pump lost in a reset is.
            Some(Err(crate::engine::live::ResumeRefused::Closed { .. })) => {
                self.cancel_stored_pump(o);
                return Ok(PumpReattach::NoRecord);
            }
            _ => return Ok(PumpReattach::NoRecord),
        };
        // A failure to store the epoch is logged there; the re-attached pump goes on.
        let _ = self.store_takeover(o, &grant, None, crate::engine::live::Taker::Pump).await;
        o.pumping.set(true);
        let run = run.with_epoch(grant.epoch);
        log("info", "pump_reattaching", run.stream_id(), json!({"after": "an object reset", "mark": reattach.record().mark.after}));
        let object = Rc::clone(o);
        let awake = self.meter.hold();
        self.state.wait_until(async move {
            let _awake = awake;
            let (end, cancel) = drive(&run, Attach::Reattach(reattach)).await;
            run.finish(end, cancel, &upstream).await;
            object.pumping.set(false);
        });
        Ok(PumpReattach::Started)
    }

    /// After a cancel that found no pump running here (the object was reset under it): cancels
    /// upstream the background response a pump left a record of, and forgets the record.
    pub(crate) fn cancel_stored_pump(&self, o: &Rc<Object>) {
        if o.stored_pump_cancelled.replace(true) {
            return;
        }
        let run = PumpRun::new(Rc::clone(&o.shell), 0, &self.state, self.env.clone(), Rc::clone(&self.meter));
        let (awake, object) = (self.meter.hold(), Rc::clone(o));
        self.state.wait_until(async move {
            let _awake = awake;
            match run.record().await {
                Ok(Some(record)) => {
                    run.cancel_upstream(&record.cancel_call()).await;
                    run.forget().await;
                }
                Ok(None) => {}
                Err(e) => {
                    log("error", "pump_record_unreadable", run.stream_id(), json!({"error": e.to_string()}));
                    object.stored_pump_cancelled.set(false); // nothing was asked: the next Stop tries again
                }
            }
        });
    }
}
