//! The Durable Object's own storage: every key it keeps, in one place, as one record
//! ([`StoredStream`]) read in one call and written as [`KeyUpdate`]s. An alarm carries no
//! request, so what the lease alarm and a revival need is stored when the lease is armed
//! (before the row is marked), and kept up to date while the stream lives.
//!
//! | key          | written                                   | read by                                 |
//! |--------------|-------------------------------------------|-----------------------------------------|
//! | `streamId`   | lease armed (before the mark)             | the alarm, a revival                    |
//! | `hostToken`  | lease armed; a revival's claim            | a revival (proof of ownership)          |
//! | `claiming`   | each revival, before its claim (its fresh token added to the list) | the next revival (every token it stored is its own) |
//! | `armedAt`    | lease armed                               | a revival (a mark may be in flight)     |
//! | `format`     | lease armed                               | a revival; `/ui`, `/text` after the stream retired |
//! | `meta`       | lease armed (with a `meta`)               | a revival (the authorizer)              |
//! | `epoch`      | a resume or a pump (before it answers)    | a revival (the fence survives resets)   |
//! | `producer`   | a resume with an `x-rindle-producer` id   | a revival (a retried resume gets its grant) |
//! | `window`     | a revival (when the resume window ends)   | a later revival (no restart); a resume deletes it |
//! | `lastWrite`  | a renewal that finds the producer quiet; deleted at its next write | a revival (the idle timeout counts from it; from the revival's time without one) |
//! | `chat`       | lease armed (an open naming a chat)       | the notices to the chat's feed after a reset (SPEC §11); deleted once its end is told |
//! | `userMessage`| lease armed (an open naming a chat with one) | the Started notice sent again after a reset; deleted with `chat` |
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

/// How many revival tokens the keys keep (the newest). A claim can only apply from the token the
/// row holds, so a token stored before the row's holder is dead once a revival read that holder;
/// more than this many revivals in a row whose claims all failed without one winning is an outage
/// of the store, and the oldest token's claim has long been given up by its connection.
pub const MAX_CLAIMS: usize = 16;

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
    /// Every revival's token since the one in `host_token`, each stored before its claim was
    /// sent (oldest first, at most [`MAX_CLAIMS`]): a claim that timed out may still commit, even
    /// after the next revival read the row, so the row may come to hold any of them.
    pub claiming: Vec<String>,
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
            .put_or_delete(CLAIMING, claims_json(&lease.claiming))
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

    /// A revival's token `fresh`, stored before it claims the row: added to the tokens `stored`
    /// holds (the newest [`MAX_CLAIMS`] kept), so any revival after it recognizes the row
    /// whichever of this object's claims it holds, this one's included should it commit late.
    pub fn claiming(stored: &StoredStream, fresh: &str) -> Self {
        let mut claims = stored.claiming.clone();
        claims.push(fresh.to_owned());
        let keep = claims.len().saturating_sub(MAX_CLAIMS);
        Self::default().put(CLAIMING, json!(claims[keep..]))
    }

    /// A revival won the row with `host_token` (or had no host column to claim), and its window.
    /// The claim's token is now the only one the row can hold: no earlier claim can apply from it.
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

    /// The producer wrote again: its stored last write is no longer the last.
    pub fn forget_last_write() -> Self {
        Self::default().put_or_delete(LAST_WRITE, None)
    }
}

fn claims_json(claims: &[String]) -> Option<Value> {
    (!claims.is_empty()).then(|| json!(claims))
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
            // A list; an older version stored one token as a string.
            claiming: match get(CLAIMING) {
                Some(Value::Array(tokens)) => tokens.iter().filter_map(|t| t.as_str().map(str::to_owned)).collect(),
                Some(Value::String(token)) => vec![token],
                _ => vec![],
            },
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
        KeyUpdate::arming(self).puts.into_iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Every token the row may hold that is this object's: the one it holds the row with, and
    /// each revival's claim since.
    pub fn own_tokens(&self) -> impl Iterator<Item = &str> {
        self.host_token.iter().chain(&self.claiming).map(String::as_str)
    }
}

/// An arming of the lease, and how to undo it: an open refused without having marked the row
/// gives the object back what its lease held before (an earlier open's lease, whose mark may have
/// landed, keeps guarding its row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arming {
    host_token: Option<String>,
    before: StoredStream,
}

impl Arming {
    /// Arms `lease` over `before`, the keys read just before: the arming, and the update to
    /// apply. A read that failed fails the arming (the open retries it, and answers 503 if it
    /// keeps failing): an arming over keys nobody could read could not be undone, and undoing it
    /// to nothing could drop the lease of an earlier open whose mark landed.
    pub fn over(lease: &StoredStream, before: Result<StoredStream, String>) -> Result<(Self, KeyUpdate), String> {
        let before = before.map_err(|e| format!("the keys could not be read before the arming: {e}"))?;
        let update = KeyUpdate::arming(lease).over(&before);
        Ok((Self { host_token: lease.host_token.clone(), before }, update))
    }

    /// Undoes this arming, if it is the one with `host_token`: the keys as they were before it.
    pub fn undo(&self, host_token: &str) -> Option<KeyUpdate> {
        (self.host_token.as_deref() == Some(host_token)).then(|| KeyUpdate::arming(&self.before))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An arming is undone to what the keys held before it, and only by its own token; an
    /// arming over keys that could not be read does not happen.
    #[test]
    fn an_arming_is_undone_to_the_keys_before_it_and_never_armed_over_unknown_keys() {
        let earlier = StoredStream { stream_id: Some("m1".into()), host_token: Some("open-1".into()), ..StoredStream::default() };
        let lease = StoredStream { stream_id: Some("m1".into()), host_token: Some("open-2".into()), ..StoredStream::default() };
        let (arming, update) = Arming::over(&lease, Ok(earlier.clone())).unwrap();
        let mut keys = earlier.clone();
        keys.apply(&update);
        assert_eq!(keys, lease);
        assert_eq!(arming.undo("open-3"), None, "another arming's token");
        keys.apply(&arming.undo("open-2").expect("its own"));
        assert_eq!(keys, earlier, "the earlier open's lease guards its row again");
        assert!(Arming::over(&lease, Err("no answer in 15000 ms".into())).is_err());
    }

    /// Each revival's token is added before its claim and kept, the newest [`MAX_CLAIMS`] of
    /// them; a won claim leaves its own token alone; a token stored as one string by an older
    /// version reads as a list of one.
    #[test]
    fn every_revival_token_is_kept_until_a_claim_wins_and_the_list_is_bounded() {
        let mut keys = StoredStream { stream_id: Some("m1".into()), host_token: Some("open".into()), ..StoredStream::default() };
        for n in 0..MAX_CLAIMS + 3 {
            let update = KeyUpdate::claiming(&keys, &format!("fresh-{n}"));
            keys.apply(&update);
        }
        assert_eq!(keys.claiming.len(), MAX_CLAIMS);
        assert_eq!(keys.claiming.first().map(String::as_str), Some("fresh-3"), "the oldest go first");
        assert_eq!(keys.own_tokens().count(), MAX_CLAIMS + 1, "the open's token and every kept claim");
        keys.apply(&KeyUpdate::revived(Some("fresh-18"), Window { until: Timestamp(1), cause: SealCause::ResumeWindowExpired }));
        assert_eq!(keys.own_tokens().collect::<Vec<_>>(), ["fresh-18"]);
        let older = StoredStream::from_values(|key| (key == CLAIMING).then(|| json!("fresh-1")));
        assert_eq!(older.claiming, ["fresh-1"]);
    }
}
