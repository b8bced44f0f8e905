//! # rindle-streams
//!
//! Carries a language model's response from an edge producer to every reader at once over
//! Server-Sent Events, and into D1 durably, without ever claiming more durability than it has.
//!
//! - [`engine`]: the pure engine (UTF-16 coordinate, frames, the live stream state machine,
//!   SQL text, SSE encoding, splice). No I/O, no clock, no Workers runtime; tested natively.
//! - `edge` (wasm32 only): the thin workers-rs shell: the Worker's router, one Durable Object
//!   per stream, the D1 executor and the SSE bodies.

pub mod engine;

#[cfg(target_arch = "wasm32")]
pub mod edge;
