//! The dev build's tools, each behind its cargo feature and compiled into no production build
//! (docs/TOOLCHAIN.md, "Builds and features"): the development endpoints and the model of the
//! database (`dev`), the store's fault injection (`test-faults`) and the wasm heap counter
//! (`heap-stats`).

#[cfg(feature = "test-faults")]
pub(crate) mod faults;
#[cfg(feature = "heap-stats")]
pub(crate) mod heap;
#[cfg(feature = "dev")]
pub(crate) mod model;
#[cfg(feature = "dev")]
mod session;

#[cfg(feature = "dev")]
pub(crate) use session::{handle, object_constructed};
