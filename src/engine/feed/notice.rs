//! What a producer says about its chat at open (`{"chat": {"id", "userMessage"?}}`), the user
//! message it may hand over, and what a stream's object tells its chat's feed: the answer
//! started, the answer ended.

use crate::engine::access::stream_id;
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::EndStatus;
use crate::engine::wire::ui::Format;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

/// The largest user message a feed announces: its JSON, without insignificant whitespace, in
/// bytes. A message with large files (data URLs) is the app's to trim: the feed keeps every
/// message of its history, and sends the history to every tab that connects.
pub const MAX_USER_MESSAGE_BYTES: usize = 64 * 1024;

/// The longest user message id accepted (AI SDK ids are 16 to 36 characters).
const MAX_MESSAGE_ID_BYTES: usize = 256;

/// The chat an answer belongs to, named by its producer at open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatLink {
    /// The chat's id (the stream id rules: 1–128 of `[A-Za-z0-9._:-]`).
    pub chat_id: String,
    /// The user's message that started the turn, to announce before the answer.
    pub user_message: Option<UserMessage>,
}

/// A user's AI SDK `UIMessage`, checked and kept as compact JSON (no newline: it is sent on one
/// SSE `data:` line as it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserMessage {
    id: String,
    json: String,
}

impl UserMessage {
    /// The message's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The message as compact JSON.
    pub fn json(&self) -> &str {
        &self.json
    }
}

/// Why an open's `chat` is refused (400: nothing is opened, nothing announced).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BadChat {
    #[error("the open body's \"chat\" must be an object like {{\"id\": \"…\", \"userMessage\": {{…}}}}")]
    NotAnObject,
    #[error("the open body's chat id: {0}")]
    BadId(String),
    #[error("chat.userMessage is not a user UIMessage: {0}")]
    BadUserMessage(String),
    #[error("chat.userMessage is {bytes} bytes of JSON; at most {MAX_USER_MESSAGE_BYTES} are announced")]
    UserMessageTooLarge { bytes: usize },
}

impl ChatLink {
    /// Reads the open body's `chat` field.
    pub fn parse(chat: Value) -> Result<Self, BadChat> {
        let Value::Object(mut fields) = chat else { return Err(BadChat::NotAnObject) };
        let chat_id = match fields.remove("id") {
            Some(Value::String(id)) => id,
            _ => return Err(BadChat::BadId("\"id\" must be a string".into())),
        };
        stream_id::validate(&chat_id).map_err(|e| BadChat::BadId(e.to_string().replace("stream id", "chat id")))?;
        let user_message = match fields.remove("userMessage") {
            None | Some(Value::Null) => None,
            Some(message) => Some(UserMessage::parse(message)?),
        };
        Ok(Self { chat_id, user_message })
    }
}

impl UserMessage {
    /// Checks `message` as the AI SDK's `UIMessage` schema does for what a user sends: an object
    /// with a string `id`, `role` `"user"`, any `metadata`, and at least one part, each an object
    /// whose `type` is a known part type (with its required string fields) or `data-*`.
    pub fn parse(message: Value) -> Result<Self, BadChat> {
        let bad = |why: String| BadChat::BadUserMessage(why);
        let Value::Object(fields) = &message else { return Err(bad("it must be a JSON object".into())) };
        let id = match fields.get("id") {
            Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_MESSAGE_ID_BYTES => id.clone(),
            Some(Value::String(_)) => return Err(bad(format!("\"id\" must be 1 to {MAX_MESSAGE_ID_BYTES} bytes"))),
            _ => return Err(bad("\"id\" must be a string".into())),
        };
        if fields.get("role").and_then(Value::as_str) != Some("user") {
            return Err(bad("\"role\" must be \"user\"".into()));
        }
        let parts = match fields.get("parts") {
            Some(Value::Array(parts)) if !parts.is_empty() => parts,
            Some(Value::Array(_)) => return Err(bad("\"parts\" must hold at least one part".into())),
            _ => return Err(bad("\"parts\" must be an array".into())),
        };
        for (i, part) in parts.iter().enumerate() {
            check_part(part).map_err(|why| bad(format!("parts[{i}]: {why}")))?;
        }
        // serde_json writes compact JSON: no newline, whatever the producer sent.
        let json = message.to_string();
        if json.len() > MAX_USER_MESSAGE_BYTES {
            return Err(BadChat::UserMessageTooLarge { bytes: json.len() });
        }
        Ok(Self { id, json })
    }

    /// A message read back from the feed's own storage (already checked when it was announced).
    pub(crate) fn stored(json: String) -> Option<Self> {
        let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(&json) else { return None };
        let id = fields.get("id")?.as_str()?.to_owned();
        Some(Self { id, json })
    }
}

/// The string fields each static part type requires (the AI SDK's `staticPartSchema`).
const PART_FIELDS: [(&str, &[&str]); 9] = [
    ("text", &["text"]),
    ("reasoning", &["text"]),
    ("file", &["mediaType", "url"]),
    ("reasoning-file", &["mediaType", "url"]),
    ("source-url", &["sourceId", "url"]),
    ("source-document", &["sourceId", "mediaType", "title"]),
    ("custom", &["kind"]),
    ("step-start", &[]),
    ("steering-message", &["id"]),
];

/// One part of a user message: a known type with its required string fields, or `data-*`.
/// (Tool parts are an assistant's; a user message does not carry them.)
fn check_part(part: &Value) -> Result<(), String> {
    let Value::Object(fields) = part else { return Err("a part must be a JSON object".into()) };
    let Some(kind) = fields.get("type").and_then(Value::as_str) else { return Err("\"type\" must be a string".into()) };
    if kind.starts_with("data-") {
        return Ok(());
    }
    let Some((_, required)) = PART_FIELDS.iter().find(|(name, _)| *name == kind) else {
        return Err(format!("{kind:?} is not a part type of a user message"));
    };
    require_strings(fields, required)?;
    if kind == "steering-message" && !fields.get("parts").is_some_and(Value::is_array) {
        return Err("a steering message's \"parts\" must be an array".into());
    }
    Ok(())
}

fn require_strings(fields: &Map<String, Value>, names: &[&str]) -> Result<(), String> {
    match names.iter().find(|name| !fields.get(**name).is_some_and(Value::is_string)) {
        Some(name) => Err(format!("\"{name}\" must be a string")),
        None => Ok(()),
    }
}

/// What a stream's object tells its chat's feed (one internal request each, in this order for
/// one stream: started, then ended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", rename_all_fields = "camelCase")]
pub enum FeedNotice {
    /// The answer's stream opened (its row is `streaming`).
    Started {
        chat_id: String,
        stream_id: String,
        /// The UI message's id (rindle makes it the stream id).
        message_id: String,
        /// `"text"` or `"ui"`.
        format: String,
        /// The user message that started the turn, as compact JSON.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user_message: Option<String>,
    },
    /// The answer's stream ended: its status and the durable length it ended with.
    Ended {
        chat_id: String,
        stream_id: String,
        message_id: String,
        /// `None` when the object that sealed no longer knew it (the lease alarm, after a reset).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        format: Option<String>,
        status: EndStatus,
        durable_seq: Offset,
    },
}

impl FeedNotice {
    /// An open of `stream_id` that settled: the answer started.
    pub fn started(link: &ChatLink, stream_id: &str, format: Format) -> Self {
        FeedNotice::Started {
            chat_id: link.chat_id.clone(),
            stream_id: stream_id.to_owned(),
            message_id: stream_id.to_owned(),
            format: format.as_str().to_owned(),
            user_message: link.user_message.as_ref().map(|m| m.json.clone()),
        }
    }

    /// A seal of `stream_id`.
    pub fn ended(chat_id: &str, stream_id: &str, format: Option<Format>, status: EndStatus, durable_seq: Offset) -> Self {
        FeedNotice::Ended {
            chat_id: chat_id.to_owned(),
            stream_id: stream_id.to_owned(),
            message_id: stream_id.to_owned(),
            format: format.map(|f| f.as_str().to_owned()),
            status,
            durable_seq,
        }
    }

    /// The chat it is about.
    pub fn chat_id(&self) -> &str {
        match self {
            FeedNotice::Started { chat_id, .. } | FeedNotice::Ended { chat_id, .. } => chat_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(parts: Value) -> Value {
        json!({"id": "u1", "role": "user", "parts": parts})
    }

    #[test]
    fn a_user_message_with_text_files_and_data_parts_is_kept_as_compact_json() {
        let m = UserMessage::parse(json!({
            "id": "u1", "role": "user", "metadata": {"at": 1},
            "parts": [{"type": "text", "text": "hi\nthere"}, {"type": "file", "mediaType": "image/png", "url": "data:,x"}, {"type": "data-x", "data": [1]}]
        }))
        .unwrap();
        assert_eq!(m.id(), "u1");
        assert!(!m.json().contains('\n'), "one SSE data: line");
        assert_eq!(serde_json::from_str::<Value>(m.json()).unwrap()["parts"][0]["text"], "hi\nthere");
    }

    #[test]
    fn anything_but_a_user_uimessage_is_refused_with_its_reason() {
        let cases = [
            (json!("hi"), "a JSON object"),
            (json!({"role": "user", "parts": [{"type": "text", "text": "x"}]}), "\"id\" must be a string"),
            (json!({"id": "", "role": "user", "parts": [{"type": "text", "text": "x"}]}), "1 to 256 bytes"),
            (json!({"id": "u", "role": "assistant", "parts": [{"type": "text", "text": "x"}]}), "\"role\" must be \"user\""),
            (json!({"id": "u", "role": "user"}), "\"parts\" must be an array"),
            (user(json!([])), "at least one part"),
            (user(json!([{"type": "text"}])), "parts[0]: \"text\" must be a string"),
            (user(json!([{"type": "text", "text": 3}])), "parts[0]: \"text\" must be a string"),
            (user(json!([{"type": "text", "text": "a"}, 7])), "parts[1]: a part must be a JSON object"),
            (user(json!([{"type": "file", "url": "x"}])), "\"mediaType\" must be a string"),
            (user(json!([{"type": "picture"}])), "\"picture\" is not a part type"),
            (user(json!([{"type": "tool-weather", "toolCallId": "t", "state": "input-available"}])), "not a part type"),
            (user(json!([{"kind": "text"}])), "\"type\" must be a string"),
        ];
        for (message, why) in cases {
            let err = UserMessage::parse(message.clone()).unwrap_err().to_string();
            assert!(err.contains(why), "{message}: {err}");
        }
    }

    #[test]
    fn a_user_message_over_64_kib_is_refused_and_one_at_the_limit_is_kept() {
        let fits = |text_len: usize| user(json!([{"type": "text", "text": "a".repeat(text_len)}]));
        let overhead = fits(0).to_string().len();
        assert!(UserMessage::parse(fits(MAX_USER_MESSAGE_BYTES - overhead)).is_ok());
        let err = UserMessage::parse(fits(MAX_USER_MESSAGE_BYTES - overhead + 1)).unwrap_err();
        assert_eq!(err, BadChat::UserMessageTooLarge { bytes: MAX_USER_MESSAGE_BYTES + 1 });
    }

    #[test]
    fn the_chat_link_names_a_valid_chat_id() {
        let link = ChatLink::parse(json!({"id": "c-1"})).unwrap();
        assert_eq!(link, ChatLink { chat_id: "c-1".into(), user_message: None });
        for bad in [json!({"id": "a/b"}), json!({"id": 3}), json!({}), json!({"id": ""})] {
            assert!(matches!(ChatLink::parse(bad.clone()), Err(BadChat::BadId(_))), "{bad}");
        }
        assert_eq!(ChatLink::parse(json!("c-1")), Err(BadChat::NotAnObject));
        assert!(ChatLink::parse(json!({"id": "c", "userMessage": null})).unwrap().user_message.is_none());
    }

    #[test]
    fn notices_travel_as_json_between_objects() {
        let link = ChatLink::parse(json!({"id": "c", "userMessage": user(json!([{"type": "text", "text": "q"}]))})).unwrap();
        for notice in [
            FeedNotice::started(&link, "a-1", Format::Ui),
            FeedNotice::ended("c", "a-1", Some(Format::Ui), EndStatus::Complete, Offset(42)),
            FeedNotice::ended("c", "a-1", None, EndStatus::Interrupted, Offset(0)),
        ] {
            let wire = serde_json::to_string(&notice).unwrap();
            assert_eq!(serde_json::from_str::<FeedNotice>(&wire).unwrap(), notice, "{wire}");
        }
        let started = serde_json::to_value(FeedNotice::started(&link, "a-1", Format::Ui)).unwrap();
        assert_eq!(started["type"], "started");
        assert_eq!(started["messageId"], "a-1");
    }
}
