//! What readers receive: frames (SPEC §3), their SSE encoding, and the `ui` format (SPEC §9) with
//! the AI SDK's chunk schema behind strict validation.

pub mod frame;
pub mod sse;
pub mod ui;
// The AI SDK's chunk schema behind strict validation: the ui format's internals.
pub(crate) mod ui_schema;
