//! The vocabulary a host (the Worker shell, the simulator) speaks with the engine: the store
//! boundary, time, configuration, the event hook, the object's own storage keys, the object's
//! billing counts and the test build's faults.

pub mod config;
/// Fault injection for the tests of the real runtime: only in a build with the `test-faults`
/// feature (and natively, for its own tests).
#[cfg(any(test, feature = "test-faults"))]
pub(crate) mod faults;
pub mod hook;
// The object's billing counts: the shell's, for `/stats`, tested natively.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) mod meter;
pub mod object_storage;
pub mod store;
pub mod time;
