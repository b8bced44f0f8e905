//! The Durable Object's own storage: every key it keeps, in one place, as one record
//! ([`StoredStream`]) read in one call and written as [`KeyUpdate`]s. An alarm carries no
//! request, so what the lease alarm and a revival need is stored when the lease is armed
//! (before the row is marked), and kept up to date while the stream lives.
//!
//! | key          | written                                   | read by                                 |
//! |--------------|-------------------------------------------|-----------------------------------------|
//! | `streamId`   | lease armed (before the mark)             | the alarm, a revival                    |
//! | `hostToken`  | lease armed; a revival's claim            | a revival (proof of ownership)          |
//! | `claiming`   | a revival, before its claim               | the next revival (a claim that committed just before a reset) |
//! | `armedAt`    | lease armed                               | a revival (a mark may be in flight)     |
//! | `format`     | lease armed                               | a revival; `/ui`, `/text` after the stream retired |
//! | `meta`       | lease armed (with a `meta`)               | a revival (the authorizer)              |
//! | `epoch`      | a resume or a pump (before it answers)    | a revival (the fence survives resets)   |
//! | `producer`   | a resume with an `x-rindle-producer` id   | a revival (a retried resume gets its grant) |
//! | `window`     | a revival (when the resume window ends)   | a later revival (no restart); a resume deletes it |
//! | `lastWrite`  | lease renewals, when it changed           | a revival (the idle timeout counts from it) |
//! | `chat`       | lease armed (an open naming a chat)       | the notices to the chat's feed after a reset (SPEC §11) |
//! | `userMessage`| lease armed (an open naming a chat with one) | the Started notice sent again after a reset |
//!
//! When the lease is released (the stream sealed, or the lease guards nothing) the object
//! forgets every key and its alarm: a finished answer leaves nothing in object storage, except
//! the `format` of a `ui` stream where the message table maps no format column (a late `/ui`
//! must still learn it).

use crate::engine::host::hook::SealCause;
use crate::engine::host::time::Timestamp;
use crate::engine::live::Window;
use crate::engine::wire::ui::Format;
use serde_json::{json, Value};

pub const STREAM_ID: &str = "streamId";
pub const HOST_TOKEN: &str = "hostToken";
pub const CLAIMING: &str = "claiming";
pub const ARMED_AT: &str = "armedAt";
pub const FORMAT: &str = "format";
pub const META: &str = "meta";
pub const EPOCH: &str = "epoch";
pub const PRODUCER: &str = "producer";
pub const WINDOW: &str = "window";
pub const LAST_WRITE: &str = "lastWrite";
pub const CHAT: &str = "chat";
pub const USER_MESSAGE: &str = "userMessage";

/// Every key, in the order a read asks for them.
pub const KEYS: [&str; 12] =
    [STREAM_ID, HOST_TOKEN, CLAIMING, ARMED_AT, FORMAT, META, EPOCH, PRODUCER, WINDOW, LAST_WRITE, CHAT, USER_MESSAGE];

/// What the object stored for its stream (absent keys are `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredStream {
    /// The stream the lease guards (`None`: nothing is armed).
    pub stream_id: Option<String>,
    /// The token the row's host column holds when it is this object's.
    pub host_token: Option<String>,
    /// A revival's token, stored before its claim: the row may hold it if the claim committed
    /// and the instance was lost before it stored the claim's outcome.
    pub claiming: Option<String>,
    /// When the lease was armed (a mark sent then may still commit a while after).
    pub armed_at: Option<Timestamp>,
    pub format: Option<Format>,
    pub meta: Option<Value>,
    pub epoch: Option<u64>,
    pub producer: Option<String>,
    pub window: Option<Window>,
    pub last_write: Option<Timestamp>,
    /// The chat the open named (SPEC §11): its feed is told of the start and the seal.
    pub chat: Option<String>,
    /// The user's message the open gave with its chat, as compact JSON: the Started notice is
    /// sent again from it after a reset (`engine::feed::Notices`).
    pub user_message: Option<String>,
}

/// Writes to the object's storage, applied together (one `put` of many keys, one `delete`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyUpdate {
    pub puts: Vec<(&'static str, Value)>,
    pub deletes: Vec<&'static str>,
}

impl KeyUpdate {
    fn put(mut self, key: &'static str, value: Value) -> Self {
        self.puts.push((key, value));
        self
    }

    fn put_or_delete(mut self, key: &'static str, value: Option<Value>) -> Self {
        match value {
            Some(v) => self.puts.push((key, v)),
            None => self.deletes.push(key),
        }
        self
    }

    /// The lease of a stream opening: every key of an earlier stream's lease is replaced.
    pub fn arming(lease: &StoredStream) -> Self {
        Self::default()
            .put_or_delete(STREAM_ID, lease.stream_id.as_ref().map(|v| json!(v)))
            .put_or_delete(HOST_TOKEN, lease.host_token.as_ref().map(|v| json!(v)))
            .put_or_delete(CLAIMING, None)
            .put_or_delete(ARMED_AT, lease.armed_at.map(|at| json!(at.0 as f64)))
            .put_or_delete(FORMAT, lease.format.map(|f| json!(f.as_str())))
            .put_or_delete(META, lease.meta.clone())
            .put_or_delete(EPOCH, lease.epoch.map(|e| json!(e)))
            .put_or_delete(PRODUCER, lease.producer.as_ref().map(|v| json!(v)))
            .put_or_delete(WINDOW, lease.window.map(window_json))
            .put_or_delete(LAST_WRITE, lease.last_write.map(|at| json!(at.0 as f64)))
            .put_or_delete(CHAT, lease.chat.as_ref().map(|v| json!(v)))
            .put_or_delete(USER_MESSAGE, lease.user_message.as_ref().map(|v| json!(v)))
    }

    /// The same update without the deletes of keys `stored` does not hold (a delete is a billed
    /// row write even when there is nothing to delete).
    pub fn over(mut self, stored: &StoredStream) -> Self {
        self.deletes.retain(|key| stored.value(key).is_some());
        self
    }

    /// A revival's token `fresh`, before it claims the row from `held`, the token the row holds
    /// (this object's: the open's, or an earlier revival's claim that committed though its
    /// instance was lost before it stored so). Both are stored, so the next revival recognizes
    /// the row whichever claim it holds.
    pub fn claiming(held: &str, fresh: &str) -> Self {
        Self::default().put(HOST_TOKEN, json!(held)).put(CLAIMING, json!(fresh))
    }

    /// A revival won the row with `host_token` (or had no host column to claim), and its window.
    pub fn revived(host_token: Option<&str>, window: Window) -> Self {
        let update = match host_token {
            Some(token) => Self::default().put(HOST_TOKEN, json!(token)).put_or_delete(CLAIMING, None),
            None => Self::default(),
        };
        update.put(WINDOW, window_json(window))
    }

    /// A resume (or a pump) took the stream: the new epoch, whom it went to, and no window.
    pub fn resumed(epoch: u64, producer: Option<&str>) -> Self {
        Self::default().put(EPOCH, json!(epoch)).put_or_delete(PRODUCER, producer.map(|p| json!(p))).put_or_delete(WINDOW, None)
    }

    /// The stream's end is told to its chat's feed (`engine::feed::Notices`): the keys its
    /// notices are sent again from go.
    pub fn told() -> Self {
        Self::default().put_or_delete(CHAT, None).put_or_delete(USER_MESSAGE, None)
    }

    /// The producer's last write, kept with the lease.
    pub fn last_write(at: Timestamp) -> Self {
        Self::default().put(LAST_WRITE, json!(at.0 as f64))
    }
}

fn window_json(window: Window) -> Value {
    let cause = match window.cause {
        SealCause::IdleProducer => "idle",
        SealCause::LeaseExpired => "lease",
        _ => "reset",
    };
    json!({"until": window.until.0 as f64, "cause": cause})
}

fn window_of(value: &Value) -> Option<Window> {
    let until = Timestamp(value.get("until")?.as_f64()? as u64);
    let cause = match value.get("cause")?.as_str()? {
        "idle" => SealCause::IdleProducer,
        "lease" => SealCause::LeaseExpired,
        _ => SealCause::ResumeWindowExpired,
    };
    Some(Window { until, cause })
}

impl StoredStream {
    /// The record from the values a read of [`KEYS`] gave (`get(key)`: the stored JSON, if
    /// any). A value of the wrong shape reads as absent.
    pub fn from_values(get: impl Fn(&str) -> Option<Value>) -> Self {
        let text = |key| get(key).and_then(|v| v.as_str().map(str::to_owned));
        let time = |key| get(key).and_then(|v| v.as_f64()).map(|ms| Timestamp(ms as u64));
        Self {
            stream_id: text(STREAM_ID),
            host_token: text(HOST_TOKEN),
            claiming: text(CLAIMING),
            armed_at: time(ARMED_AT),
            format: text(FORMAT).as_deref().and_then(Format::parse),
            meta: get(META),
            epoch: get(EPOCH).and_then(|v| v.as_u64().or_else(|| v.as_f64().filter(|e| *e >= 1.0).map(|e| e as u64))),
            producer: text(PRODUCER),
            window: get(WINDOW).as_ref().and_then(window_of),
            last_write: time(LAST_WRITE),
            chat: text(CHAT),
            user_message: text(USER_MESSAGE),
        }
    }

    /// Applies `update` as the object's storage would (the simulator's storage).
    pub fn apply(&mut self, update: &KeyUpdate) {
        let mut values: Vec<(&str, Option<Value>)> = KEYS.iter().map(|k| (*k, self.value(k))).collect();
        for (key, value) in &update.puts {
            if let Some(slot) = values.iter_mut().find(|(k, _)| k == key) {
                slot.1 = Some(value.clone());
            }
        }
        for key in &update.deletes {
            if let Some(slot) = values.iter_mut().find(|(k, _)| k == key) {
                slot.1 = None;
            }
        }
        *self = Self::from_values(|key| values.iter().find(|(k, _)| *k == key).and_then(|(_, v)| v.clone()));
    }

    /// The stored JSON of `key`.
    pub fn value(&self, key: &str) -> Option<Value> {
        let full = KeyUpdate::arming(self);
        let claiming = self.claiming.as_ref().map(|c| json!(c));
        match key {
            CLAIMING => claiming,
            _ => full.puts.into_iter().find(|(k, _)| *k == key).map(|(_, v)| v),
        }
    }
}

/// What the object keeps when its lease is released: the `ui` format where no format column is
/// mapped (a `/ui` reader must still learn it); otherwise nothing.
pub fn kept_at_release(format: Option<Format>, format_column: bool) -> &'static [&'static str] {
    match (format, format_column) {
        (Some(Format::Ui), false) => &[FORMAT],
        _ => &[],
    }
}
