//! The pure engine: everything in the specification that is logic rather than I/O.
//!
//! ```text
//!   producer ──push──▶ ┌──────────── LiveStream (live/) ───────────┐ ──frames──▶ readers
//!                      │ TextBuffer · Readers · checkpoint driver   │   (wire/: frames, SSE, /ui)
//!                      └───────┬───────────────────────▲───────────┘
//!                     StoreRequest (host/store)     StoreAnswer
//!                              ▼                       │
//!              Tables (durable/: SQL plans) ──▶ SqlExecutor (D1, SQLite, Postgres), or a CheckpointSink
//! ```
//!
//! The map, by what each part is:
//!
//! - [`live`]: the live plane, one stream as a sans-IO state machine (open, checkpoints, seal,
//!   readers, the lease alarm, the revival after a reset);
//! - [`durable`]: the durable plane, the mapped tables and the SQL they run (SQLite/D1, Postgres);
//! - [`feed`]: a chat's feed of turns (SPEC §11): the history every tab of a chat follows;
//! - [`pump`]: upstream model APIs turned into text or `ui` chunks;
//! - [`text`]: the text and its coordinate (UTF-16 offsets, UTF-8 reassembly, the buffer, the
//!   durable text as read back);
//! - [`wire`]: what readers receive (frames, their SSE encoding, the `ui` format and its schema);
//! - [`access`]: who may do what (routes and errors, authorization, JWTs, CORS, stream ids);
//! - [`host`]: the vocabulary the host (the Worker shell, the simulator) speaks with the engine:
//!   the store boundary, time, configuration, the event hook, the object's storage keys, billing
//!   counts and test faults.
//!
//! Nothing in this tree performs I/O, reads a clock or depends on the Workers runtime: time
//! is an input ([`host::time`]), and store operations and reader wake-ups are outputs. The Worker
//! shell (`src/edge`, wasm32 only) performs them; an executor only runs the SQL it is handed.

pub mod access;
pub mod durable;
pub mod feed;
pub mod host;
pub mod live;
pub mod pump;
pub mod text;
pub mod wire;
