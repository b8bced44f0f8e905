//! The Durable Object's own storage: every key it keeps, in one place. An alarm carries no
//! request, so what the lease alarm needs is stored when the lease is armed; the stream's
//! format is stored when an open settles, for `/ui` and `/text` after the stream is gone here.
//!
//! | key        | written                       | read by                          | at release |
//! |------------|-------------------------------|----------------------------------|------------|
//! | `streamId` | lease armed (before the mark) | the alarm                        | forgotten  |
//! | `hostToken`| lease armed                   | the alarm (proof of ownership)   | forgotten  |
//! | `armedAt`  | lease armed                   | the alarm (a mark may be in flight) | forgotten |
//! | `format`   | an open that settled `Ok`     | `/ui`, `/text`                   | kept for `ui` |
//! | `epoch`    | a resume (before it answers)  | a rehydration (SPEC §10)         | forgotten  |
//! | `meta`     | an open with a `meta`         | a rehydration (the authorizer)   | forgotten  |
//! | `resumeBy` | a rehydration (the window)    | a later rehydration; a resume deletes it | forgotten |
//!
//! When the alarm releases the lease the object stores nothing it still needs but the format
//! of a `ui` stream (`text` is what an absent key means), so a text stream's storage is deleted
//! whole and a released object costs nothing to keep.

use crate::engine::wire::ui::Format;

/// The stream id the lease guards.
pub const STREAM_ID: &str = "streamId";
/// The open's CAS token, which the host column must hold for the row to be this object's.
pub const HOST_TOKEN: &str = "hostToken";
/// When the lease was armed (ms on the shell's clock): until a mark sent then can no longer
/// commit, an alarm that finds the row not yet `streaming` keeps the lease.
pub const ARMED_AT: &str = "armedAt";
/// The stream's format (`"text"` or `"ui"`); absent means `text`.
pub const FORMAT: &str = "format";

/// The producer epoch the last resume issued (absent: the open's, 1).
pub const EPOCH: &str = "epoch";
/// The open's `meta`, for a rehydrated stream's authorizer.
pub const META: &str = "meta";
/// When a rehydrated stream's resume window ends (ms on the shell's clock), so a second reset
/// does not restart it.
pub const RESUME_BY: &str = "resumeBy";

/// The keys a lease stores when it is armed.
pub const LEASE_KEYS: [&str; 3] = [STREAM_ID, HOST_TOKEN, ARMED_AT];

/// What the object keeps when its lease is released: the `ui` format (a `/ui` reader must still
/// learn it); nothing for `text`, the default.
pub fn kept_at_release(format: Format) -> &'static [&'static str] {
    match format {
        Format::Ui => &[FORMAT],
        Format::Text => &[],
    }
}
