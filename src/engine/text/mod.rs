//! The text and its coordinate: UTF-16 offsets (what `seq` counts), UTF-8 split across the pieces
//! of a body, the live stream's buffer, and the durable text as read back from the store.

pub mod reading;
// The live text buffer and the reassembly of UTF-8 split across pieces: logic the wasm32 shell
// uses, tested natively, and no part of the public API.
pub(crate) mod buffer;
pub mod utf16;
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) mod utf8;
