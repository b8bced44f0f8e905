//! Request bodies: the append body policy (a plain body validated whole, a streaming body
//! pushed piece by piece; a `ui` stream's pieces go to its line assembler as bytes) and the
//! discard of bodies a refusal left unread.

use super::Object;
use crate::edge::http::{self, unavailable};
use crate::engine::access::api::{ApiError, Route};
use crate::engine::live::{LiveStream, PushError, PushReceipt};
use crate::engine::text::utf8::{BadUtf8, Utf8Reassembler};
use crate::engine::wire::ui::Format;
use futures::future::{select, Either};
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use worker::{Request, Response};

impl Object {
    /// Pushes one piece of an append body. `Ok(Err(_))` is bad input (the piece, or the line it
    /// finished, was refused: refuse the request once its body is read); `Err(_)` means the
    /// stream cannot take pushes (answer at once).
    /// Each piece is admitted by the producer epoch in the same borrow as its push, so a resume
    /// between two pieces cuts the replaced connection off: nothing of it is interleaved.
    fn push(
        &self,
        route: &Route,
        pieces: &mut BodyPieces,
        piece: &[u8],
        epoch: Option<u64>,
    ) -> Result<Result<PushReceipt, ApiError>, ApiError> {
        let pushed = match pieces {
            BodyPieces::Text(utf8) => match utf8.feed(piece) {
                // A `ui` stream's lines are JSON, whose strings cannot hold a raw U+0000.
                Ok(text) if self.settings().backend.refuses_text(&text) => {
                    let seq = self.shell.inspect(LiveStream::seq).unwrap_or_default();
                    return Ok(Err(ApiError::bad_text().with("seq", seq)));
                }
                Ok(text) => self.shell.feed(|s, now| s.admit(epoch).map(|()| s.push(&text, now))),
                Err(e) => {
                    let seq = self.shell.inspect(LiveStream::seq).unwrap_or_default();
                    return Ok(Err(ApiError::bad_utf8(e).with("seq", seq)));
                }
            },
            BodyPieces::Ui => self.shell.feed(|s, now| s.admit(epoch).map(|()| s.push_ndjson(piece, now))),
        };
        let pushed = match pushed {
            Some(Err(fenced)) => return Err(super::revive::fenced(&route.stream_id, fenced)),
            Some(Ok(pushed)) => Some(pushed),
            None => None,
        };
        match pushed {
            Some(Ok(receipt)) => Ok(Ok(receipt)),
            Some(Err(PushError::BadChunk { bad, .. })) => Ok(Err(ApiError::bad_chunk(&bad))),
            Some(Err(PushError::Closed)) => Err(self.not_live(route)),
            Some(Err(PushError::TooLarge { max, receipt })) => {
                Err(ApiError::stream_too_large(&route.stream_id, max, receipt.seq, receipt.durable_seq))
            }
            Some(Err(PushError::NotOpen)) | None => Err(ApiError::not_open(&route.stream_id)),
            Some(Err(e @ PushError::NotUi)) => Err(unavailable(e)),
        }
    }

    /// A plain body is validated whole before anything is pushed (a `ui` stream's lines are
    /// validated one by one: the lines before a bad one stay); a streaming body (no
    /// content-length) is pushed piece by piece, reassembling characters split across pieces,
    /// and ends early when a cancel arrives.
    pub(crate) async fn append(self: &Rc<Self>, route: &Route, req: &mut Request, epoch: Option<u64>) -> Result<Response, ApiError> {
        self.require_live(route)?;
        if let Some(Err(fenced)) = self.shell.inspect(|s| s.admit(epoch)) {
            return Err(super::revive::fenced(&route.stream_id, fenced));
        }
        let max = self.settings().max_append_bytes;
        let declared = req.headers().get("content-length").ok().flatten().and_then(|l| l.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max as u64) {
            return Err(ApiError::too_large(max));
        }
        let mut receipt = self.shell.inspect(LiveStream::receipt).ok_or_else(|| ApiError::not_open(&route.stream_id))?;
        if declared.is_some() {
            let bytes = req.bytes().await.map_err(|e| ApiError::new(400, "bad_request", format!("could not read the body: {e}")))?;
            if bytes.len() > max {
                return Err(ApiError::too_large(max));
            }
            let mut pieces = BodyPieces::of(self.shell.inspect(LiveStream::format).unwrap_or_default());
            if let BodyPieces::Text(_) = pieces {
                std::str::from_utf8(&bytes).map_err(|e| ApiError::bad_utf8(BadUtf8 { offset: e.valid_up_to() as u64 }))?;
            }
            receipt = self.push(route, &mut pieces, &bytes, epoch)??;
        } else {
            receipt = self.append_streaming(route, req, receipt, max, epoch).await?;
        }
        http::json(200, &json!({"seq": receipt.seq, "durableSeq": receipt.durable_seq, "cancelled": receipt.cancelled}))
            .map_err(unavailable)
    }

    /// A streaming body: each piece is pushed as it arrives. A cancel (before it or during it)
    /// answers at once. A body
    /// that turns out too large, not UTF-8 or (in a `ui` stream) to hold a bad line stops being
    /// pushed, is read to its end (up to
    /// [`http::MAX_DISCARDED_BYTES`] more) and only then refused: answering while the client is still
    /// sending breaks its connection under the local runtime's proxy.
    ///
    /// A short JavaScript loop ([`read_body`]) reads the body and hands each piece to an
    /// [`AppendSink`], which pushes it at once: one call into wasm per piece, where reading it
    /// from Rust took a promise, two closures and a task wake-up per piece, and piping it into
    /// a `WritableStream` took the runtime's pipe machinery.
    async fn append_streaming(
        self: &Rc<Self>,
        route: &Route,
        req: &mut Request,
        receipt: PushReceipt,
        max: usize,
        epoch: Option<u64>,
    ) -> Result<PushReceipt, ApiError> {
        let body = req.inner().body().ok_or_else(|| ApiError::new(400, "bad_request", "the append has no body"))?;
        let intake = Rc::new(RefCell::new(Intake {
            object: Rc::clone(self),
            route: route.clone(),
            pieces: BodyPieces::of(self.shell.inspect(LiveStream::format).unwrap_or_default()),
            max,
            epoch,
            total: 0,
            receipt,
            refusal: None,
            fatal: None,
        }));
        let stop = web_sys::AbortController::new().map_err(|e| unavailable(worker::Error::from(e)))?;
        let read = wasm_bindgen_futures::JsFuture::from(read_body(&body, AppendSink(Rc::clone(&intake)), &stop.signal()));
        if receipt.cancelled {
            // A cancel came before this append (between a producer's resume and its next
            // streaming append, say): answered at once, as a cancel during it is (its read
            // started, then stopped: a body cancelled unread breaks the client's connection
            // under the local runtime), rather than at a first piece the stopped model may never send.
            stop.abort();
            return Ok(receipt);
        }
        let mut cancelled = self.shell.watch_cancel();
        let outcome = match select(read, &mut cancelled).await {
            Either::Left((outcome, _)) => outcome,
            Either::Right(_) => {
                stop.abort();
                return Ok(self.shell.inspect(LiveStream::receipt).unwrap_or(intake.borrow().receipt));
            }
        };
        if let Err(e) = outcome {
            let e = worker::Error::from(e);
            return Err(ApiError::new(400, "bad_request", format!("the body stream failed: {e}")));
        }
        let mut intake = intake.borrow_mut();
        if let Some(fatal) = intake.fatal.take() {
            return Err(fatal);
        }
        intake.refusal.take().map_or(Ok(intake.receipt), Err)
    }
}

/// A streaming append in progress: what its sink has pushed, and what it found wrong.
struct Intake {
    object: Rc<Object>,
    route: Route,
    pieces: BodyPieces,
    max: usize,
    /// The producer epoch the request carries.
    epoch: Option<u64>,
    /// Bytes of the body so far.
    total: usize,
    receipt: PushReceipt,
    /// Bad input: refuse the request once its body is read (or `http::MAX_DISCARDED_BYTES` more).
    refusal: Option<ApiError>,
    /// The stream cannot take pushes: answer with this at once.
    fatal: Option<ApiError>,
}

impl Intake {
    /// Takes one piece of the body; `false`: read no more of it.
    fn take(&mut self, piece: &[u8]) -> bool {
        if self.receipt.cancelled {
            return false;
        }
        self.total += piece.len();
        if self.refusal.is_some() {
            return self.total <= self.max + http::MAX_DISCARDED_BYTES;
        }
        if self.total > self.max {
            self.refusal = Some(ApiError::too_large(self.max).with("seq", self.receipt.seq));
            return true;
        }
        match self.object.push(&self.route, &mut self.pieces, piece, self.epoch) {
            Ok(Ok(pushed)) => self.receipt = pushed,
            Ok(Err(bad)) => self.refusal = Some(bad),
            Err(fatal) => {
                self.fatal = Some(fatal);
                return false;
            }
        }
        // A push that met a cancel ends the body here, as a cancel during a read does.
        !self.receipt.cancelled
    }

    /// The body ended: a `text` stream's last character must be whole.
    fn finish(&mut self) {
        if let (None, BodyPieces::Text(utf8)) = (&self.refusal, &mut self.pieces) {
            if let Err(e) = std::mem::take(utf8).finish() {
                self.refusal = Some(ApiError::bad_utf8(e).with("seq", self.receipt.seq));
            }
        }
    }
}

/// Where [`read_body`] hands a streaming append's pieces.
#[wasm_bindgen::prelude::wasm_bindgen]
pub struct AppendSink(Rc<RefCell<Intake>>);

#[wasm_bindgen::prelude::wasm_bindgen]
impl AppendSink {
    /// One piece of the body, pushed now; `false`: read no more (the append answers with what
    /// the intake found).
    pub fn write(&self, piece: &[u8]) -> bool {
        self.0.borrow_mut().take(piece)
    }

    /// The body ended.
    pub fn close(&self) {
        self.0.borrow_mut().finish();
    }
}

#[wasm_bindgen::prelude::wasm_bindgen(inline_js = r#"
export async function read_body(body, sink, signal) {
  const reader = body.getReader();
  const stop = () => reader.cancel().catch(() => {});
  signal.addEventListener('abort', stop, { once: true });
  try {
    for (;;) {
      let next;
      try {
        next = await reader.read();
      } catch (err) {
        // Stopped (a cancel answered the append at once): the runtime fails a read still
        // pending once the response is sent, and nobody awaits this promise any more, so the
        // failure would be logged as uncaught.
        if (signal.aborted) return;
        throw err;
      }
      const { done, value } = next;
      if (signal.aborted) return;
      if (done) return sink.close();
      if (!sink.write(value)) return stop();
    }
  } finally {
    signal.removeEventListener('abort', stop);
    sink.free();
  }
}
"#)]
extern "C" {
    /// Reads `body` to its end, or until `sink` wants no more or `signal` aborts, handing each
    /// piece to `sink`; rejects if the body fails.
    fn read_body(body: &web_sys::ReadableStream, sink: AppendSink, signal: &web_sys::AbortSignal) -> js_sys::Promise;
}

/// How the pieces of an append body are pushed: a `text` stream's are reassembled into UTF-8
/// text here; a `ui` stream's go to its line assembler as bytes, where a line (or a UTF-8
/// sequence) may end in a later piece, or a later request.
enum BodyPieces {
    Text(Utf8Reassembler),
    Ui,
}

impl BodyPieces {
    fn of(format: Format) -> Self {
        match format {
            Format::Text => BodyPieces::Text(Utf8Reassembler::new()),
            Format::Ui => BodyPieces::Ui,
        }
    }
}

/// Reads and discards a request body that a refusal left untouched (up to
/// [`http::MAX_DISCARDED_BYTES`], see [`http::read_bounded`]). A body a handler started reading
/// is left alone: a handler that stops early (a cancelled streaming append) cancels its own
/// read, which lets it answer at once.
pub(crate) async fn discard_unread(request: &web_sys::Request) {
    let Some(body) = request.body().filter(|_| !request.body_used()) else { return };
    if body.locked() {
        return;
    }
    let _ = http::read_bounded(body, 0).await;
}
