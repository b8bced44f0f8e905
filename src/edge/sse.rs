//! A reader's SSE body: the bytes the live stream queues for it, pulled as the client reads,
//! with a keep-alive comment whenever it has been idle for the keep-alive interval.

use super::shell::{now_ms, Shell};
use crate::core::api::ApiError;
use crate::core::frame::Frame;
use crate::core::live::{Dialect, Pull, ReaderId};
use crate::core::{sse, ui};
use futures::Stream;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;
use worker::{Delay, Headers, Response};

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
pub fn absent(retry_ms: u64) -> worker::Result<Response> {
    let body = format!("{}{}", sse::preamble(retry_ms), sse::encode(&Frame::Absent));
    Ok(Response::from_bytes(body.into_bytes())?.with_headers(headers(Dialect::Events)))
}

/// What a subscribe request came to.
pub enum Subscription {
    /// The answer: the live reader's body, or the headers of a `HEAD`.
    Answered(Result<Response, ApiError>),
    /// No live stream is here; `from` is the join offset the request asked for.
    NoLiveStream { from: u64 },
}

/// Streams one reader's frames. Pull-based: a slow client leaves frames in the reader's
/// bounded queue inside the live stream, where an overflow ends it with `stale`.
pub struct ReaderBody {
    shell: Rc<Shell>,
    reader: ReaderId,
    preamble: Option<String>,
    keepalive_ms: u64,
    /// One keep-alive timer, kept across deliveries: re-arming a timer for every delta to
    /// every reader would cost more than the delivery itself.
    ping: Option<Pin<Box<Delay>>>,
    /// When this body last produced bytes (shell clock, ms).
    last_sent: u64,
    done: bool,
}

impl ReaderBody {
    pub fn new(shell: Rc<Shell>, reader: ReaderId, retry_ms: u64, keepalive_ms: u64) -> Self {
        Self { shell, reader, preamble: Some(sse::preamble(retry_ms)), keepalive_ms, ping: None, last_sent: now_ms(), done: false }
    }

    pub fn into_response(self, dialect: Dialect) -> worker::Result<Response> {
        Ok(Response::from_stream(self)?.with_headers(headers(dialect)))
    }
}

impl Stream for ReaderBody {
    type Item = worker::Result<Vec<u8>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let mut out = this.preamble.take().unwrap_or_default();
        match this.shell.pull(this.reader) {
            Pull::Data { wire, last } => {
                out.push_str(&wire);
                this.done = last;
            }
            Pull::Gone => {
                this.done = true;
                if out.is_empty() {
                    return Poll::Ready(None);
                }
            }
            Pull::Pending => {
                this.shell.park_reader(this.reader, cx.waker());
                if out.is_empty() && !this.ping_due(cx) {
                    return Poll::Pending;
                }
                if out.is_empty() {
                    out.push_str(sse::PING);
                }
            }
        }
        this.last_sent = now_ms();
        Poll::Ready(Some(Ok(out.into_bytes())))
    }
}

impl ReaderBody {
    /// Whether the body has been idle for the keep-alive interval. Otherwise the one timer
    /// is (re)armed for the rest of the interval and registered with `cx`.
    fn ping_due(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            let idle = now_ms().saturating_sub(self.last_sent);
            if idle >= self.keepalive_ms {
                self.ping = None;
                return true;
            }
            let rest = self.keepalive_ms - idle;
            let ping = self.ping.get_or_insert_with(|| Box::pin(Delay::from(Duration::from_millis(rest))));
            if ping.as_mut().poll(cx).is_pending() {
                return false;
            }
            self.ping = None; // fired early relative to the last delivery: arm for the rest
        }
    }
}

impl Drop for ReaderBody {
    fn drop(&mut self) {
        self.shell.detach(self.reader);
    }
}
