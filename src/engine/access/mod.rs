//! Who may do what: the routes and the JSON error shape (SPEC §4), authorization and its JWTs,
//! which page origins may call (CORS), and what a stream id may be.

// The shell's HTTP vocabulary (routes, the SPEC §4 errors) and stream ids: logic the wasm32 shell
// uses, tested natively, and no part of the public API.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) mod api;
pub mod auth;
pub mod cors;
pub mod jwt;
pub mod memberships;
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) mod stream_id;
