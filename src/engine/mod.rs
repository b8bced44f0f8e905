//! The pure engine: everything in the specification that is logic rather than I/O.
//!
//! ```text
//!   producer ──push──▶ ┌──────────── LiveStream (live/) ───────────┐ ──frames──▶ readers
//!                      │ TextBuffer · Readers · checkpoint driver   │
//!                      └───────┬───────────────────────▲───────────┘
//!                     StoreRequest (store)          StoreAnswer
//!                              ▼                       │
//!              Tables (durable/: SQL plans) ──▶ SqlExecutor (D1, SQLite, …), or a CheckpointSink
//! ```
//!
//! Nothing in this tree performs I/O, reads a clock or depends on the Workers runtime: time
//! is an input ([`time`]), and store operations and reader wake-ups are outputs. The Worker
//! shell (`src/edge`, wasm32 only) performs them; an executor only runs the SQL it is handed.

// The shell's HTTP vocabulary (routes, the SPEC §4 errors), stream ids, the live text buffer and
// the reassembly of UTF-8 split across pieces: logic the wasm32 shell uses, tested natively,
// and no part of the public API.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) mod api;
pub mod auth;
pub mod config;
pub mod cors;
pub mod durable;
/// Fault injection for the tests of the real runtime: only in a build with the `test-faults`
/// feature (and natively, for its own tests).
#[cfg(any(test, feature = "test-faults"))]
pub(crate) mod faults;
pub mod frame;
pub mod hook;
pub mod jwt;
pub mod live;
// The object's billing counts: the shell's, for `/stats`, tested natively.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) mod meter;
pub mod object_storage;
pub mod pump;
pub mod reading;
pub mod sse;
pub mod store;
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) mod stream_id;
pub(crate) mod text;
pub mod time;
pub mod ui;
// The AI SDK's chunk schema behind strict validation: the ui format's internals.
pub(crate) mod ui_schema;
pub mod utf16;
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) mod utf8;
