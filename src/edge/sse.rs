//! A reader's SSE body: the bytes the live stream queues for it, pulled as the client reads,
//! with a keep-alive comment whenever it has been idle for the keep-alive interval.

use super::shell::Shell;
use crate::core::frame::Frame;
use crate::core::live::{Pull, ReaderId};
use crate::core::sse;
use futures::Stream;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;
use worker::{Delay, Headers, Response};

/// The headers of every SSE answer.
pub fn headers() -> Headers {
    let h = Headers::new();
    for (name, value) in sse::SSE_HEADERS {
        let _ = h.set(name, value);
    }
    h
}

/// The whole answer when no live stream is here: `retry`, then `absent`.
pub fn absent(retry_ms: u64) -> worker::Result<Response> {
    let body = format!("{}{}", sse::preamble(retry_ms), sse::encode(&Frame::Absent));
    Ok(Response::from_bytes(body.into_bytes())?.with_headers(headers()))
}

/// Streams one reader's frames. Pull-based: a slow client leaves frames in the reader's
/// bounded queue inside the live stream, where an overflow ends it with `stale`.
pub struct ReaderBody {
    shell: Rc<Shell>,
    reader: ReaderId,
    preamble: Option<String>,
    keepalive: Duration,
    ping: Option<Pin<Box<Delay>>>,
    done: bool,
}

impl ReaderBody {
    pub fn new(shell: Rc<Shell>, reader: ReaderId, retry_ms: u64, keepalive_ms: u64) -> Self {
        Self {
            shell,
            reader,
            preamble: Some(sse::preamble(retry_ms)),
            keepalive: Duration::from_millis(keepalive_ms),
            ping: None,
            done: false,
        }
    }

    pub fn into_response(self) -> worker::Result<Response> {
        Ok(Response::from_stream(self)?.with_headers(headers()))
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
                this.ping = None;
            }
            Pull::Gone => {
                this.done = true;
                if out.is_empty() {
                    return Poll::Ready(None);
                }
            }
            Pull::Pending => {
                this.shell.park_reader(this.reader, cx.waker());
                if out.is_empty() {
                    let keepalive = this.keepalive;
                    let ping = this.ping.get_or_insert_with(|| Box::pin(Delay::from(keepalive)));
                    if ping.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    this.ping = None;
                    out.push_str(sse::PING);
                }
            }
        }
        Poll::Ready(Some(Ok(out.into_bytes())))
    }
}

impl Drop for ReaderBody {
    fn drop(&mut self) {
        self.shell.detach(self.reader);
    }
}
