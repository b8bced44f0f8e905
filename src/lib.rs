//! # rindle-streams
//!
//! Carries a language model's response from an edge producer to every reader at once over
//! Server-Sent Events, and into D1 durably, without ever claiming more durability than it has.
//!
//! ## Embedding it in a Worker of your own (wasm32)
//!
//! Depend on this crate with `default-features = false`, export [`StreamObject`] (the stream's
//! Durable Object), answer requests with [`handle_request`], and install, in your start event,
//! whatever replaces a default:
//!
//! - [`install_authorizer`]: an [`Authorizer`](engine::access::auth::Authorizer) instead of the HS256
//!   JWT check;
//! - [`install_checkpoint_sink`]: a [`CheckpointSink`] instead of the mapped D1 tables
//!   (which [`Tables`] implements, over the [`D1`] executor, for a sink that wraps them);
//! - [`install_event_hook`]: an [`EventHook`](engine::host::hook::EventHook) told of checkpoint
//!   failures, seal shortfalls, dropped readers and interrupted seals.
//!
//! Export [`ChatFeedObject`] too, bound as `CHAT_FEEDS`, for chat feeds (SPEC §11); without the
//! binding, opens that name a chat still work and announce nothing.
//!
//! `examples/embed/` is a complete one (docs/EMBEDDING.md).
//!
//! ## The engine
//!
//! [`engine`] is the sans-IO core, public and documented for shells and tests: the live
//! stream state machine with its inputs and outputs ([`engine::live`]), the store operations
//! and the SQL an executor runs ([`engine::durable`]), frames and their SSE encoding, the UTF-16
//! coordinate. No I/O, no clock, no Workers runtime; tested natively. The Workers shell that
//! drives it (`src/edge`: the router, one Durable Object per stream, the D1 executor, the SSE
//! bodies) is private; its embedding API is re-exported above.

pub mod engine;

#[cfg(target_arch = "wasm32")]
mod edge;

/// The dev build's model of the database (docs/LOAD.md): one object per database.
#[cfg(all(target_arch = "wasm32", feature = "dev"))]
pub use edge::DatabaseModelObject;
#[cfg(target_arch = "wasm32")]
pub use edge::{handle_request, install_authorizer, install_checkpoint_sink, install_event_hook, ChatFeedObject, StreamObject, D1};
pub use engine::durable::Tables;
pub use engine::host::store::CheckpointSink;
