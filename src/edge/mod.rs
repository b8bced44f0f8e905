//! The Workers shell (wasm32 only). It performs what the engine decides, and nothing else.
//! Each room serves one runtime entry:
//!
//! - [`front`]: the front Worker, where every request enters (CORS, authorization, a chat's
//!   lookups), and which forwards a stream's requests to its object;
//! - [`stream`]: the stream's Durable Object (one per stream id): its handlers, the shell that
//!   drives the engine's live stream, the lease alarm and the revival, the pump, `/ui`;
//! - [`chat`]: the chat's feed object (one per chat, SPEC §11);
//! - [`store`]: the stores a stream's text goes to (D1, Postgres through Hyperdrive);
//! - [`dev`]: the dev build's tools (the demo's session, fault injection, the heap counter).
//!
//! Beside them, what every room shares: [`http`] (answers, errors, bodies), [`sse`] (SSE headers
//! and the registry of open bodies), [`setup`] (configuration, and what an embedding Worker
//! installs), [`gate`] (authorization: at the front, or in the stream's object for an authorizer
//! that reads the stream's `meta`), [`runtime`] (the clock, timeouts, logs) and [`meter`] (billing counts).

mod chat;
#[cfg(feature = "dev")]
mod dev;
mod front;
mod gate;
mod http;
mod meter;
mod runtime;
mod setup;
mod sse;
mod store;
mod stream;

pub use chat::ChatFeedObject;
#[cfg(feature = "dev")]
pub use dev::model::DatabaseModelObject;
pub use front::handle_request;
pub use setup::{install_authorizer, install_checkpoint_sink, install_event_hook};
pub use store::D1;
pub use stream::StreamObject;

/// Panics print their message. The name is this crate's own: wasm-bindgen exports a start
/// function by its name, and an embedding Worker's own `start` must not clash with it.
#[worker::event(start)]
fn rindle_streams_start() {
    console_error_panic_hook::set_once();
    // A start after the first is a new instance after an abort (a panic): the readers the old
    // one was writing would otherwise wait forever.
    let orphans = sse::end_orphaned_bodies();
    if orphans > 0 {
        runtime::log("warn", "orphaned_readers_ended", "", serde_json::json!({"readers": orphans}));
    }
}
