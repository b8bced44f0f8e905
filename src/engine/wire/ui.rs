//! The `ui` format (SPEC §9): the text of a `ui` stream is NDJSON, one AI SDK UI message chunk
//! (a JSON object with a string `type`) per line, each line ending in `\n`.
//!
//! Three pure pieces live here:
//! - `LineAssembler` keeps the unfinished last line across appends (a producer may split a
//!   line anywhere, even inside a UTF-8 sequence) and hands back each run of complete,
//!   validated lines, or the [`ChunkFault`] of the first bad one;
//! - the `/ui` wire: `encode_lines` writes each complete line as one SSE event whose `id:` is
//!   the UTF-16 offset just after the line, so a reconnecting `EventSource` resumes at an exact
//!   chunk boundary, and `line_start_byte` moves a join offset to the start of its line;
//! - the `Ending` a `/ui` reader gets after the last line, then `data: [DONE]`.
//!
//! Validation runs on every line of every delta, so it never builds a JSON tree: a borrowing
//! visitor reads `type` and skips everything else; [`Validation::Strict`] (the default) then
//! checks the chunk's fields against the AI SDK's own schema (`ui_schema`) in a second
//! pass of the line.

use crate::engine::text::utf16::{self, Offset};
use crate::engine::wire::frame::{EndStatus, Frame};
use crate::engine::wire::ui_schema::{self, ChunkSchema, FieldFault, Fields};
use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Serialize, Serializer};
use std::borrow::Cow;
use std::fmt::{self, Write};
use thiserror::Error;

/// The longest line accepted, in UTF-8 bytes (the AI SDK's chunks are far smaller; a bound
/// keeps an unfinished line from growing without end).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The deepest nesting of objects and arrays a line may hold, the chunk object itself counting
/// as 1. The deepest line of the project's recorded chunks and upstream events is 7 levels; the
/// readers that receive a line parse it, then store, copy and render it, and V8 (Node 20)
/// throws a `RangeError` past 4,175 levels in `JSON.stringify` and 3,292 in `structuredClone`
/// (measured): a line nested 100,000 deep passed `JSON.parse` and broke its readers.
pub const MAX_JSON_DEPTH: usize = 64;

/// The response header that tells the AI SDK this is a UI message stream.
pub const UI_STREAM_HEADER: (&str, &str) = ("x-vercel-ai-ui-message-stream", "v1");

/// The last event of a `/ui` answer for a stream that ended.
pub const DONE: &str = "data: [DONE]\n\n";

/// The `id:` of a `/ui` ending's first event. It is not an offset (the ending is not part of
/// the text): a client that saw the ending and reconnects anyway (an `EventSource` that does not
/// close at `[DONE]`) sends it back as `Last-Event-ID` and is answered 204, which tells an
/// `EventSource` to stop reconnecting, instead of getting the ending again.
pub const ENDED_ID: &str = "done";

/// How a `ui` stream's lines are checked (the `UI_VALIDATION` setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Validation {
    /// As the AI SDK's own chunk schema checks them: a known `type` (or `data-*`) with its
    /// required fields, each of the schema's type. A line the SDK would refuse is refused here,
    /// so it never makes `useChat` throw at every reader.
    #[default]
    Strict,
    /// Any JSON object with a string `type` (chunk types newer than the schema rindle knows).
    Lenient,
}

impl Validation {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "strict" => Some(Validation::Strict),
            "lenient" => Some(Validation::Lenient),
            _ => None,
        }
    }
}

/// What a stream's text is, chosen at open and remembered after the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Plain text (SPEC §2–§7).
    #[default]
    Text,
    /// NDJSON UI message chunks (SPEC §9).
    Ui,
}

impl Format {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "text" => Some(Format::Text),
            "ui" => Some(Format::Ui),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Ui => "ui",
        }
    }
}

impl Serialize for Format {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Why a line is not a UI message chunk.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ChunkFault {
    #[error("it is longer than {max} bytes")]
    TooLong { max: usize },
    #[error("it is not valid UTF-8 (at byte {at} of the line)")]
    InvalidUtf8 { at: usize },
    #[error("it holds a raw carriage return (at byte {at} of the line), which ends an SSE line; JSON writes it as \\r")]
    CarriageReturn { at: usize },
    #[error("it is empty; every line must be one JSON object")]
    Empty,
    #[error("it nests objects and arrays more than {max} deep")]
    TooDeep { max: usize },
    #[error("it is not JSON ({0})")]
    NotJson(String),
    #[error("it is JSON but {0}, not an object")]
    NotAnObject(&'static str),
    #[error("the object has no \"type\"")]
    MissingType,
    #[error("its \"type\" is {0}, not a string")]
    TypeNotAString(&'static str),
    #[error("its type {0:?} is not a UI message chunk type of the AI SDK (UI_VALIDATION=lenient accepts any)")]
    UnknownType(String),
    #[error("its {chunk:?} chunk does not fit the AI SDK's schema: {fault}")]
    Field { chunk: String, fault: Box<FieldFault> },
}

impl ChunkFault {
    /// The field at fault, where one is: `type`, or the path of a chunk's field.
    pub fn field(&self) -> Option<&str> {
        match self {
            ChunkFault::MissingType | ChunkFault::TypeNotAString(_) | ChunkFault::UnknownType(_) => Some("type"),
            ChunkFault::Field { fault, .. } => Some(&fault.path),
            _ => None,
        }
    }
}

/// A refused line: the UTF-16 offset where it starts (the `seq` the stream reached) and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the line at offset {offset} is not a UI message chunk: {fault}")]
pub struct BadChunk {
    pub offset: Offset,
    pub fault: ChunkFault,
}

/// Which chunks that matter to the ending a run of lines holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holds {
    /// A `finish` chunk: a `complete` end adds none of its own.
    pub finish: bool,
    /// An `error` chunk: an `error` or `interrupted` end adds none of its own (the reader was
    /// told, and `onError` must fire once).
    pub error: bool,
}

impl Holds {
    fn note(&mut self, kind: ChunkKind) {
        self.finish |= kind == ChunkKind::Finish;
        self.error |= kind == ChunkKind::Error;
    }

    /// Both runs' chunks.
    pub fn and(self, other: Holds) -> Holds {
        Holds { finish: self.finish || other.finish, error: self.error || other.error }
    }
}

/// What one piece of a `ui` stream's text yields.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Assembled<'a> {
    /// The complete lines it finished, validated, each ending in `\n` (empty when none).
    pub lines: Cow<'a, str>,
    /// The chunks among them that matter to the ending.
    pub holds: Holds,
    /// The first bad line: it, the unfinished line it completed and the rest of the piece
    /// were dropped.
    pub fault: Option<ChunkFault>,
}

/// Assembles complete lines from pieces split anywhere. Only validated, complete lines come
/// out; the unfinished last line waits here (as bytes, so a UTF-8 sequence may be split too).
#[derive(Debug, Default)]
pub(crate) struct LineAssembler {
    partial: Vec<u8>,
    /// `partial[..checked]` is valid UTF-8; the rest is at most one incomplete sequence.
    checked: usize,
    validation: Validation,
}

impl LineAssembler {
    pub fn new(validation: Validation) -> Self {
        Self { validation, ..Self::default() }
    }

    /// Bytes of the unfinished line held.
    #[cfg(test)]
    pub fn partial_len(&self) -> usize {
        self.partial.len()
    }

    /// The unfinished line held, as bytes.
    pub fn partial(&self) -> &[u8] {
        &self.partial
    }

    /// Feeds one piece. Faults are found as early as the piece shows them: a bad byte, a raw
    /// carriage return or an over-long line is refused before its `\n` arrives.
    pub fn feed<'a>(&mut self, piece: &'a [u8]) -> Assembled<'a> {
        let (complete, rest) = match piece.iter().rposition(|&b| b == b'\n') {
            Some(last_nl) => piece.split_at(last_nl + 1),
            None => (&piece[..0], piece),
        };
        let (lines, holds, fault) = if complete.is_empty() {
            (Cow::Borrowed(""), Holds::default(), None)
        } else if self.partial.is_empty() {
            let (good, holds, fault) = check_run(complete, self.validation);
            let lines = std::str::from_utf8(&complete[..good]).expect("check_run accepts only valid UTF-8");
            (Cow::Borrowed(lines), holds, fault)
        } else {
            self.complete_partial(complete)
        };
        let fault = match fault {
            Some(f) => Some(f),
            None => self.extend_partial(rest).err(),
        };
        if fault.is_some() {
            self.reset();
        }
        Assembled { lines, holds, fault }
    }

    /// Ends the text: the unfinished line, if any, as text. It is never validated (a close
    /// keeps what the producer sent); an incomplete trailing UTF-8 sequence becomes U+FFFD.
    pub fn take_partial(&mut self) -> Option<String> {
        let partial = std::mem::take(&mut self.partial);
        self.checked = 0;
        (!partial.is_empty()).then(|| String::from_utf8_lossy(&partial).into_owned())
    }

    /// The first line of `complete` finishes the held fragment; the lines after it stand alone.
    fn complete_partial<'a>(&mut self, complete: &'a [u8]) -> (Cow<'a, str>, Holds, Option<ChunkFault>) {
        let first_end = complete.iter().position(|&b| b == b'\n').expect("complete ends in a newline") + 1;
        let mut first = std::mem::take(&mut self.partial);
        self.checked = 0;
        first.extend_from_slice(&complete[..first_end]);
        let (good, holds, fault) = check_run(&first, self.validation);
        if fault.is_some() {
            return (Cow::Borrowed(""), Holds::default(), fault);
        }
        debug_assert_eq!(good, first.len());
        let (good, more, fault) = check_run(&complete[first_end..], self.validation);
        first.extend_from_slice(&complete[first_end..first_end + good]);
        let lines = String::from_utf8(first).expect("check_run accepts only valid UTF-8");
        (Cow::Owned(lines), holds.and(more), fault)
    }

    /// Adds bytes that complete no line, checking what can be checked before the `\n`.
    fn extend_partial(&mut self, bytes: &[u8]) -> Result<(), ChunkFault> {
        if bytes.is_empty() {
            return Ok(());
        }
        if self.partial.len() + bytes.len() > MAX_LINE_BYTES {
            return Err(ChunkFault::TooLong { max: MAX_LINE_BYTES });
        }
        if let Some(i) = bytes.iter().position(|&b| b == b'\r') {
            return Err(ChunkFault::CarriageReturn { at: self.partial.len() + i });
        }
        self.partial.extend_from_slice(bytes);
        match std::str::from_utf8(&self.partial[self.checked..]) {
            Ok(_) => self.checked = self.partial.len(),
            Err(e) if e.error_len().is_none() => self.checked += e.valid_up_to(),
            Err(e) => return Err(ChunkFault::InvalidUtf8 { at: self.checked + e.valid_up_to() }),
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.partial.clear();
        self.checked = 0;
    }
}

/// Checks a run of lines, each ending in `\n`. Returns the bytes of the good lines before the
/// first bad one, the chunks among them that matter to the ending, and the bad line's fault.
fn check_run(run: &[u8], validation: Validation) -> (usize, Holds, Option<ChunkFault>) {
    // One UTF-8 pass over the run; a line past the first invalid byte is that line's fault.
    let (text, invalid_at) = match std::str::from_utf8(run) {
        Ok(text) => (text, None),
        Err(e) => (std::str::from_utf8(&run[..e.valid_up_to()]).expect("validated prefix"), Some(e.valid_up_to())),
    };
    let mut good = 0;
    let mut holds = Holds::default();
    for line in text.split_inclusive('\n') {
        let Some(body) = line.strip_suffix('\n') else { break }; // the line the bad byte is in
        match check_line(body, validation) {
            Ok(kind) => holds.note(kind),
            Err(fault) => return (good, holds, Some(fault)),
        }
        good += line.len();
    }
    let Some(at) = invalid_at else { return (good, holds, None) };
    let line_len = run[good..].iter().position(|&b| b == b'\n').unwrap_or(run.len() - good);
    let fault =
        if line_len > MAX_LINE_BYTES { ChunkFault::TooLong { max: MAX_LINE_BYTES } } else { ChunkFault::InvalidUtf8 { at: at - good } };
    (good, holds, Some(fault))
}

/// What a valid line is, as far as the stream cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkKind {
    /// `{"type":"finish", …}`: the text ends its own message, so a `complete` end adds none.
    Finish,
    /// `{"type":"error", …}`: the reader was told of a failure, so an error end adds none.
    Error,
    Other,
}

impl ChunkKind {
    fn of(chunk_type: &str) -> Self {
        match chunk_type {
            "finish" => ChunkKind::Finish,
            "error" => ChunkKind::Error,
            _ => ChunkKind::Other,
        }
    }
}

/// Validates one line (without its `\n`): at most [`MAX_LINE_BYTES`], no raw carriage return,
/// and a JSON object whose `type` is a string; with [`Validation::Strict`], also a chunk the AI
/// SDK's schema accepts.
pub(crate) fn check_line(line: &str, validation: Validation) -> Result<ChunkKind, ChunkFault> {
    if line.len() > MAX_LINE_BYTES {
        return Err(ChunkFault::TooLong { max: MAX_LINE_BYTES });
    }
    if let Some(at) = line.bytes().position(|b| b == b'\r') {
        return Err(ChunkFault::CarriageReturn { at });
    }
    if line.bytes().all(|b| b == b' ' || b == b'\t') {
        return Err(ChunkFault::Empty);
    }
    if nesting_exceeds(line, MAX_JSON_DEPTH) {
        return Err(ChunkFault::TooDeep { max: MAX_JSON_DEPTH });
    }
    let mut de = serde_json::Deserializer::from_str(line);
    let seen = Describe { read_type: true }.deserialize(&mut de).and_then(|seen| de.end().map(|()| seen));
    let chunk = match seen.map_err(|e| ChunkFault::NotJson(e.to_string()))? {
        Seen::Object(TypeField::Str(chunk)) => chunk,
        Seen::Object(TypeField::Missing) => return Err(ChunkFault::MissingType),
        Seen::Object(TypeField::Other(what)) => return Err(ChunkFault::TypeNotAString(what)),
        Seen::Str(_) => return Err(ChunkFault::NotAnObject("a string")),
        Seen::Other(what) => return Err(ChunkFault::NotAnObject(what)),
    };
    match (validation, chunk.fields) {
        (Validation::Lenient, _) => Ok(chunk.kind),
        (Validation::Strict, None) => Err(ChunkFault::UnknownType(chunk.name.unwrap_or_default())),
        (Validation::Strict, Some(fields)) => match ui_schema::check_fields(line, fields) {
            Ok(Ok(())) => Ok(chunk.kind),
            Ok(Err(fault)) => Err(ChunkFault::Field { chunk: type_of(line), fault: Box::new(fault) }),
            Err(e) => Err(ChunkFault::NotJson(e.to_string())),
        },
    }
}

/// Whether `line` opens more than `max` objects and arrays inside one another (brackets inside
/// strings do not count). One pass over the bytes, before any parsing, with no recursion: a
/// line that is not JSON at all is judged by the parser after it.
fn nesting_exceeds(line: &str, max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in line.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// A chunk's `type`, as the first pass read it.
struct ChunkType {
    kind: ChunkKind,
    /// Its fields in the SDK's schema; `None` for a type the SDK does not have.
    fields: Option<&'static Fields>,
    /// The type itself, kept only where a message needs it (an unknown type).
    name: Option<String>,
}

impl ChunkType {
    fn of(name: &str) -> Self {
        let fields = ChunkSchema::sdk().fields(name);
        Self { kind: ChunkKind::of(name), fields, name: fields.is_none().then(|| name.to_owned()) }
    }
}

/// The `type` of a line known to be a chunk, read again for a fault's message.
fn type_of(line: &str) -> String {
    let value: Option<serde_json::Value> = serde_json::from_str(line).ok();
    value.as_ref().and_then(|v| v.get("type")).and_then(|t| t.as_str()).unwrap_or_default().to_owned()
}

/// What a JSON value is, read without building it.
enum Seen {
    /// A string, and the chunk type it names if it is a `type`.
    Str(ChunkType),
    /// An object whose `type` was read.
    Object(TypeField),
    /// Anything else ("an array", "a number", "an object" whose `type` was not asked for, …).
    Other(&'static str),
}

/// An object's `type` member.
enum TypeField {
    Missing,
    Str(ChunkType),
    Other(&'static str),
}

/// Reads one value: with `read_type`, an object's keys are compared to `type` (the last one
/// wins, as in `JSON.parse`) and every other member is skipped; otherwise only its kind is noted.
#[derive(Clone, Copy)]
struct Describe {
    read_type: bool,
}

impl<'de> DeserializeSeed<'de> for Describe {
    type Value = Seen;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Seen, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Describe {
    type Value = Seen;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Seen, A::Error> {
        if !self.read_type {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(Seen::Other("an object"));
        }
        let mut ty = TypeField::Missing;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Type => {
                    ty = match map.next_value_seed(Describe { read_type: false })? {
                        Seen::Str(kind) => TypeField::Str(kind),
                        Seen::Object(_) => TypeField::Other("an object"),
                        Seen::Other(what) => TypeField::Other(what),
                    }
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Seen::Object(ty))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Seen, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Seen::Other("an array"))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Seen, E> {
        Ok(Seen::Str(ChunkType::of(s)))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Seen, E> {
        Ok(Seen::Other("a boolean"))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Seen, E> {
        Ok(Seen::Other("a number"))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Seen, E> {
        Ok(Seen::Other("a number"))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Seen, E> {
        Ok(Seen::Other("a number"))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Seen, E> {
        Ok(Seen::Other("null"))
    }
}

/// An object key: `type` or anything else, compared without allocating.
enum Key {
    Type,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
                Ok(if key == "type" { Key::Type } else { Key::Other })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

// ---- the `/ui` wire

/// Appends the `/ui` event of each complete line of `text`, which starts at UTF-16 offset
/// `from` at a line start: `id: <offset just after the line>` and `data: <the line>`. An
/// unfinished last line is skipped: it never surfaces as a chunk.
pub(crate) fn encode_lines(from: Offset, text: &str, out: &mut String) {
    let mut end = from;
    for line in text.split_inclusive('\n') {
        let Some(body) = line.strip_suffix('\n') else { break };
        end += utf16::len(line);
        let _ = write!(out, "id: {end}\ndata: {body}\n\n");
    }
}

/// A live frame in the `/ui` dialect: a chunk's complete lines (it starts at a line start), the
/// ending for `end` (whose `seq` is the durable length); the other frames write nothing.
/// `served` describes the lines the stream served: a live reader that got its `end` holds them all.
pub(crate) fn encode_frame(frame: &Frame, served: Served) -> String {
    match frame {
        Frame::Chunk { from, text, .. } => {
            let mut out = String::with_capacity(text.len() + 64);
            encode_lines(*from, text, &mut out);
            out
        }
        Frame::End { seq, status, error } => encode_end(*status, error.as_deref(), *seq, served),
        Frame::Open { .. } | Frame::Durable { .. } | Frame::Stale { .. } | Frame::Absent => String::new(),
    }
}

/// The byte index at which the line holding byte `at` of `text` starts, if `text` shows it (a
/// `\n` before `at`); `None` means the line starts at or before the text's first byte.
pub(crate) fn line_start_byte(text: &str, at: usize) -> Option<usize> {
    text.as_bytes()[..at].iter().rposition(|&b| b == b'\n').map(|nl| nl + 1)
}

/// Which chunks that matter to the ending the complete lines of `text` hold.
pub(crate) fn holds(text: &str) -> Holds {
    let mut holds = Holds::default();
    for line in text.split_inclusive('\n').filter_map(|l| l.strip_suffix('\n')) {
        if let Ok(kind) = check_line(line, Validation::Lenient) {
            holds.note(kind);
        }
    }
    holds
}

/// What a `/ui` reader holds when its stream's ending is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Served {
    /// The UTF-16 offset at which the lines the reader was given end.
    pub held: Offset,
    /// The chunks among those lines that matter to the ending.
    pub holds: Holds,
}

/// The chunk a `/ui` reader gets after the last line of a stream that ended (SPEC §9). It is
/// not part of the text: its `id:` is [`ENDED_ID`], not an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ending {
    /// `complete`, and the text holds no `finish` of its own.
    Finish,
    /// `cancelled`.
    Abort,
    /// `error` or `interrupted`, with the stream's error, and the text holds no `error` chunk of
    /// its own (a producer that forwarded its model's `error` chunk, then failed the stream with
    /// it, has told the reader already: `onError` fires once).
    Error(String),
    /// The reader was shown lines past the durable length the stream ended with (the object was
    /// lost with an unsaved tail, or the seal fell short), whatever the status: a UI message
    /// cannot take back what it rendered, so the ending says what was saved (an `error` chunk).
    Unsaved { status: EndStatus, error: Option<String>, durable: Offset, held: Offset },
}

impl Ending {
    /// The ending for a reader holding `served` of a stream that ended with `status`, `error`
    /// and `durable` UTF-16 units durable; `None` when the text's own `finish` (or `error`) ends
    /// the message.
    pub fn of(status: EndStatus, error: Option<&str>, durable: Offset, served: Served) -> Option<Self> {
        if served.held > durable {
            return Some(Ending::Unsaved { status, error: error.map(str::to_owned), durable, held: served.held });
        }
        match status {
            EndStatus::Complete if served.holds.finish => None,
            EndStatus::Error | EndStatus::Interrupted if served.holds.error => None,
            EndStatus::Complete => Some(Ending::Finish),
            EndStatus::Cancelled => Some(Ending::Abort),
            EndStatus::Error => Some(Ending::Error(error.unwrap_or("the stream failed").to_owned())),
            EndStatus::Interrupted => Some(Ending::Error(error.unwrap_or("the stream was interrupted").to_owned())),
        }
    }

    /// The chunk as JSON.
    pub fn chunk(&self) -> String {
        let error = |text: &str| format!(r#"{{"type":"error","errorText":{}}}"#, serde_json::Value::from(text));
        match self {
            Ending::Finish => r#"{"type":"finish"}"#.to_owned(),
            Ending::Abort => r#"{"type":"abort"}"#.to_owned(),
            Ending::Error(text) => error(text),
            Ending::Unsaved { status, error: reason, durable, held } => {
                let reason = reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
                error(&format!(
                    "only part of the answer shown was saved ({durable} of {held} UTF-16 units): the stream ended {}{reason}; reload to see the saved answer",
                    status.as_str()
                ))
            }
        }
    }
}

/// The end of a `/ui` answer for a stream that ended with `durable` UTF-16 units durable: its
/// ending chunk (if any), then `[DONE]`; the first of them carries `id: done` ([`ENDED_ID`]).
pub(crate) fn encode_end(status: EndStatus, error: Option<&str>, durable: Offset, served: Served) -> String {
    let mut out = format!("id: {ENDED_ID}\n");
    if let Some(ending) = Ending::of(status, error, durable, served) {
        let _ = write!(out, "data: {}\n\n", ending.chunk());
    }
    out.push_str(DONE);
    out
}

/// Whether a `/ui` reader's `Last-Event-ID` says it already got the ending ([`ENDED_ID`]).
pub fn saw_ending(last_event_id: Option<&str>) -> bool {
    last_event_id.is_some_and(|id| id.trim() == ENDED_ID)
}

/// The `/ui` body of a stream read from its durable text (no live stream holds it), for a
/// reader that holds the lines up to `from`: the lines from the line holding `from`, then, if
/// the stream ended, its ending and `[DONE]`. A stream still `streaming` gets its lines only:
/// the reader reconnects and finds the end later.
pub fn encode_durable(text: &str, from: Offset, ended: Option<(EndStatus, Option<&str>)>) -> String {
    let at = utf16::locate(text, from);
    let start = line_start_byte(text, at.byte).unwrap_or(0);
    let start_unit = at.unit - utf16::len(&text[start..at.byte]);
    let mut out = String::new();
    encode_lines(start_unit, &text[start..], &mut out);
    if let Some((status, error)) = ended {
        // A `from` past the durable text is what a reader was shown live and never saved.
        let served = Served { held: from, holds: holds(text) };
        out.push_str(&encode_end(status, error, utf16::len(text), served));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An assembler that checks only the line mechanics (a JSON object with a string `type`).
    fn lenient() -> LineAssembler {
        LineAssembler::new(Validation::Lenient)
    }

    /// The first line of every ending.
    const ENDED: &str = "id: done\n";

    fn finish_only(finish: bool) -> Holds {
        Holds { finish, error: false }
    }

    fn feed_all(a: &mut LineAssembler, pieces: &[&[u8]]) -> (String, bool, Option<ChunkFault>) {
        let mut lines = String::new();
        let mut finish = false;
        for p in pieces {
            let out = a.feed(p);
            lines.push_str(&out.lines);
            finish |= out.holds.finish;
            if out.fault.is_some() {
                return (lines, finish, out.fault);
            }
        }
        (lines, finish, None)
    }

    const TEXT: &str = concat!(
        r#"{"type":"start","messageId":"m1"}"#,
        "\n",
        r#"{"type":"text-delta","id":"t","delta":"héllo 👋🏽 日本"}"#,
        "\n",
        r#"{"type":"finish"}"#,
        "\n"
    );

    #[test]
    fn whole_lines_pass_through_borrowed() {
        let mut a = lenient();
        let out = a.feed(TEXT.as_bytes());
        assert_eq!(out, Assembled { lines: Cow::Borrowed(TEXT), holds: finish_only(true), fault: None });
        assert!(matches!(out.lines, Cow::Borrowed(_)), "no copy when no fragment is held");
        assert_eq!(a.partial_len(), 0);
    }

    #[test]
    fn a_line_split_at_every_byte_arrives_whole_including_utf8_sequences() {
        let bytes = TEXT.as_bytes();
        for cut in 1..bytes.len() {
            let mut a = lenient();
            let (lines, finish, fault) = feed_all(&mut a, &[&bytes[..cut], &bytes[cut..]]);
            assert_eq!((lines.as_str(), finish, fault), (TEXT, true, None), "cut at byte {cut}");
        }
        let mut a = lenient();
        let pieces: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(feed_all(&mut a, &pieces), (TEXT.to_owned(), true, None), "one byte at a time");
    }

    #[test]
    fn only_complete_lines_come_out_and_the_fragment_waits() {
        let mut a = lenient();
        let out = a.feed(b"{\"type\":\"a\"}\n{\"type\":");
        assert_eq!(out.lines, "{\"type\":\"a\"}\n");
        assert_eq!(a.partial_len(), 8);
        let out = a.feed(b"\"b\"}\n{\"ty");
        assert_eq!(out.lines, "{\"type\":\"b\"}\n");
        assert_eq!(a.take_partial().as_deref(), Some("{\"ty"));
        assert_eq!(a.take_partial(), None);
    }

    #[test]
    fn each_fault_is_named() {
        let cases: &[(&[u8], ChunkFault)] = &[
            (b"not json\n", ChunkFault::NotJson("expected ident at line 1 column 2".into())),
            (b"{\"type\":\"a\"\n", ChunkFault::NotJson("EOF while parsing an object at line 1 column 11".into())),
            (b"{\"type\":\"a\"} x\n", ChunkFault::NotJson("trailing characters at line 1 column 14".into())),
            (b"{}\n", ChunkFault::MissingType),
            (b"{\"kind\":\"text\"}\n", ChunkFault::MissingType),
            (b"{\"type\":1}\n", ChunkFault::TypeNotAString("a number")),
            (b"{\"type\":null}\n", ChunkFault::TypeNotAString("null")),
            (b"{\"type\":[\"a\"]}\n", ChunkFault::TypeNotAString("an array")),
            (b"{\"type\":{\"a\":1}}\n", ChunkFault::TypeNotAString("an object")),
            (b"{\"type\":\"a\",\"type\":true}\n", ChunkFault::TypeNotAString("a boolean")),
            (b"[{\"type\":\"a\"}]\n", ChunkFault::NotAnObject("an array")),
            (b"\"text\"\n", ChunkFault::NotAnObject("a string")),
            (b"42\n", ChunkFault::NotAnObject("a number")),
            (b"null\n", ChunkFault::NotAnObject("null")),
            (b"\n", ChunkFault::Empty),
            (b"  \n", ChunkFault::Empty),
            (b"{\"type\":\"a\"}\r\n", ChunkFault::CarriageReturn { at: 12 }),
            (b"{\"type\":\"a\xff\"}\n", ChunkFault::InvalidUtf8 { at: 10 }),
            (b"{\"type\":\"\xed\xa0\x80\"}\n", ChunkFault::InvalidUtf8 { at: 9 }),
            (
                b"{\"type\":\"a\",\"x\":\"\x01\"}\n",
                ChunkFault::NotJson("control character (\\u0000-\\u001F) found while parsing a string at line 1 column 17".into()),
            ),
        ];
        for (line, fault) in cases {
            let mut a = lenient();
            let out = a.feed(line);
            assert_eq!((out.lines.as_ref(), out.fault.as_ref()), ("", Some(fault)), "{:?}", String::from_utf8_lossy(line));
            assert_eq!(a.partial_len(), 0, "a refused line leaves nothing behind");
        }
    }

    #[test]
    fn strict_validation_refuses_what_the_sdk_would_and_names_the_field() {
        let strict = |line: &str| check_line(line, Validation::Strict);
        assert_eq!(strict(r#"{"type":"text-delta","id":"t","delta":"x"}"#), Ok(ChunkKind::Other));
        assert_eq!(strict(r#"{"type":"error","errorText":"no"}"#), Ok(ChunkKind::Error));
        assert_eq!(strict(r#"{"type":"finish"}"#), Ok(ChunkKind::Finish));
        assert_eq!(strict(r#"{"type":"data-x","data":1}"#), Ok(ChunkKind::Other));
        let e = strict(r#"{"type":"text-delta","id":"t"}"#).unwrap_err();
        assert_eq!(e.field(), Some("delta"));
        assert_eq!(e.to_string(), r#"its "text-delta" chunk does not fit the AI SDK's schema: "delta" is missing (it must be a string)"#);
        let e = strict(r#"{"type":"texte-delta","id":"t","delta":"x"}"#).unwrap_err();
        assert_eq!(e.field(), Some("type"));
        assert_eq!(e, ChunkFault::UnknownType("texte-delta".into()));
        assert_eq!(strict(r#"{"type":"data-x"}"#).unwrap_err().field(), Some("data"));
        assert_eq!(check_line(r#"{"type":"texte-delta"}"#, Validation::Lenient), Ok(ChunkKind::Other), "lenient: any string type");
        assert_eq!(strict("[]"), Err(ChunkFault::NotAnObject("an array")), "the line faults come first, as before");
    }

    #[test]
    fn a_strict_assembler_refuses_a_line_split_across_pieces_by_its_field() {
        let mut a = LineAssembler::new(Validation::Strict);
        assert_eq!(a.feed(br#"{"type":"start"}"#).fault, None);
        let out = a.feed(b"\n{\"type\":\"text-start\",\"id\":3}\n");
        assert_eq!(out.lines, "{\"type\":\"start\"}\n");
        assert_eq!(out.fault.as_ref().and_then(ChunkFault::field), Some("id"));
    }

    #[test]
    fn an_error_chunk_in_the_text_is_the_error_ending() {
        use EndStatus::*;
        let told = Served { held: Offset(10), holds: Holds { finish: false, error: true } };
        assert_eq!(Ending::of(Error, Some("model failed"), Offset(10), told), None, "the reader saw the error chunk");
        assert_eq!(Ending::of(Interrupted, None, Offset(10), told), None);
        assert_eq!(Ending::of(Cancelled, None, Offset(10), told), Some(Ending::Abort));
        assert_eq!(Ending::of(Complete, None, Offset(10), told), Some(Ending::Finish));
        assert_eq!(encode_end(Error, Some("x"), Offset(10), told), format!("{ENDED}{DONE}"));
        assert!(matches!(Ending::of(Error, None, Offset(5), told), Some(Ending::Unsaved { .. })), "what was saved is still said");
        let text = "{\"type\":\"start\"}\n{\"type\":\"error\",\"errorText\":\"boom\"}\n";
        assert_eq!(encode_durable(text, utf16::len(text), Some((Error, Some("boom")))), format!("{ENDED}{DONE}"));
    }

    #[test]
    fn a_reconnect_that_saw_the_ending_is_told_so() {
        assert!(saw_ending(Some("done")));
        assert!(saw_ending(Some(" done ")));
        assert!(!saw_ending(Some("120")));
        assert!(!saw_ending(None));
    }

    #[test]
    fn what_json_parse_accepts_is_accepted() {
        for line in [
            r#"{"type":"data-x","n":1e400,"big":123456789012345678901234567890}"#,
            r#"{"type":"text-delta","delta":"\ud83d"}"#,
            r#" {"type":"a"} "#,
            r#"{"ty\u0070e":"finish"}"#,
            r#"{"type":"x","nested":[[[[[[[[[[{"a":[1,2,{"b":null}]}]]]]]]]]]]}"#,
            r#"{"type":"a","type":"b"}"#,
        ] {
            assert!(check_line(line, Validation::Lenient).is_ok(), "{line}");
        }
        assert_eq!(check_line(r#"{"ty\u0070e":"fin\u0069sh"}"#, Validation::Strict), Ok(ChunkKind::Finish), "escapes are decoded");
        let nested = |depth: usize| format!("{{\"type\":\"x\",\"d\":{}{}}}", "[".repeat(depth - 1), "]".repeat(depth - 1));
        assert!(check_line(&nested(MAX_JSON_DEPTH), Validation::Lenient).is_ok(), "the chunk object and 63 levels inside it");
    }

    #[test]
    fn a_line_nested_deeper_than_the_bound_is_refused_before_it_is_parsed() {
        let nested =
            |depth: usize, inner: &str| format!("{{\"type\":\"x\",\"d\":{}{inner}{}}}", "[".repeat(depth - 1), "]".repeat(depth - 1));
        for depth in [MAX_JSON_DEPTH + 1, 1_000, 100_000] {
            assert_eq!(check_line(&nested(depth, ""), Validation::Lenient), Err(ChunkFault::TooDeep { max: MAX_JSON_DEPTH }), "{depth}");
        }
        let objects = format!("{{\"type\":\"x\",\"d\":{}1{}}}", "{\"a\":".repeat(MAX_JSON_DEPTH), "}".repeat(MAX_JSON_DEPTH));
        assert_eq!(check_line(&objects, Validation::Lenient), Err(ChunkFault::TooDeep { max: MAX_JSON_DEPTH }), "objects count too");
        // Brackets inside strings (escaped quotes included) are text, not nesting.
        let brackets = format!(r#"{{"type":"x","s":"{}\"{}"}}"#, "[".repeat(200), "{".repeat(200));
        assert!(check_line(&brackets, Validation::Lenient).is_ok());
        assert!(
            check_line(&nested(MAX_JSON_DEPTH, r#""]]]]\\""#), Validation::Lenient).is_ok(),
            "an escaped backslash ends before the quote"
        );
        let strict = format!(r#"{{"type":"data-x","data":{}{}}}"#, "[".repeat(MAX_JSON_DEPTH), "]".repeat(MAX_JSON_DEPTH));
        assert_eq!(check_line(&strict, Validation::Strict), Err(ChunkFault::TooDeep { max: MAX_JSON_DEPTH }), "strict too");
    }

    #[test]
    fn lines_before_a_bad_one_stay_and_the_rest_of_the_piece_is_dropped() {
        let mut a = lenient();
        let out = a.feed(b"{\"type\":\"a\"}\n{\"type\":\"b\"}\n[]\n{\"type\":\"c\"}\n{\"ty");
        assert_eq!(out.lines, "{\"type\":\"a\"}\n{\"type\":\"b\"}\n");
        assert_eq!(out.fault, Some(ChunkFault::NotAnObject("an array")));
        assert_eq!(a.partial_len(), 0);
        let out = a.feed(b"{\"type\":\"d\"}\n");
        assert_eq!((out.lines.as_ref(), out.fault), ("{\"type\":\"d\"}\n", None), "the next request starts a fresh line");
    }

    #[test]
    fn a_split_line_that_turns_out_bad_drops_its_fragment() {
        let mut a = lenient();
        assert_eq!(a.feed(b"{\"type\":\"a\"}\n{\"type\"").lines, "{\"type\":\"a\"}\n");
        let out = a.feed(b":7}\n{\"type\":\"b\"}\n");
        assert_eq!((out.lines.as_ref(), out.fault), ("", Some(ChunkFault::TypeNotAString("a number"))));
        assert_eq!(a.take_partial(), None);
    }

    #[test]
    fn faults_in_an_unfinished_line_are_found_before_its_newline() {
        let mut a = lenient();
        assert_eq!(a.feed(b"{\"type\":\"a\xf0\x9f").fault, None, "an incomplete sequence may still complete");
        assert_eq!(a.feed(b"\x98").fault, None);
        assert_eq!(a.feed(b"x").fault, Some(ChunkFault::InvalidUtf8 { at: 10 }), "a sequence cut short");
        assert_eq!(a.partial_len(), 0);

        assert_eq!(a.feed(b"{\"type\"").fault, None);
        assert_eq!(a.feed(b":\r").fault, Some(ChunkFault::CarriageReturn { at: 8 }));

        let long = vec![b' '; MAX_LINE_BYTES];
        assert_eq!(a.feed(&long).fault, None);
        assert_eq!(a.feed(b"{").fault, Some(ChunkFault::TooLong { max: MAX_LINE_BYTES }));
        assert_eq!(a.partial_len(), 0);
        let mut exact = vec![b' '; MAX_LINE_BYTES - 12];
        exact.extend_from_slice(b"{\"type\":\"a\"}\n");
        assert_eq!(a.feed(&exact).fault, None, "a line of exactly the bound is fine");
        let mut over = vec![b' '; MAX_LINE_BYTES - 11];
        over.extend_from_slice(b"{\"type\":\"a\"}\n");
        assert_eq!(a.feed(&over).fault, Some(ChunkFault::TooLong { max: MAX_LINE_BYTES }));
    }

    #[test]
    fn a_fragment_taken_at_the_close_keeps_what_was_sent() {
        let mut a = lenient();
        a.feed("{\"type\":\"text-delta\",\"delta\":\"😀".as_bytes());
        assert_eq!(a.take_partial().as_deref(), Some("{\"type\":\"text-delta\",\"delta\":\"😀"));
        a.feed(&"x😀".as_bytes()[..3]);
        assert_eq!(a.take_partial().as_deref(), Some("x\u{FFFD}"), "a sequence cut by the close");
    }

    #[test]
    fn lines_are_encoded_with_the_offset_just_after_each() {
        let mut out = String::new();
        encode_lines(Offset(10), "{\"type\":\"a\",\"d\":\"😀\"}\n{\"type\":\"b\"}\n{\"type\":\"c", &mut out);
        let first = "{\"type\":\"a\",\"d\":\"😀\"}";
        let at1 = 10 + first.encode_utf16().count() as u64 + 1;
        let at2 = at1 + 13;
        assert_eq!(out, format!("id: {at1}\ndata: {first}\n\nid: {at2}\ndata: {{\"type\":\"b\"}}\n\n"));
    }

    #[test]
    fn endings_follow_the_status() {
        use EndStatus::*;
        let all = |finish| Served { held: Offset(10), holds: finish_only(finish) };
        assert_eq!(encode_end(Complete, None, Offset(10), all(false)), "id: done\ndata: {\"type\":\"finish\"}\n\ndata: [DONE]\n\n");
        assert_eq!(encode_end(Complete, None, Offset(10), all(true)), "id: done\ndata: [DONE]\n\n", "the text's own finish ends it");
        assert_eq!(encode_end(Cancelled, None, Offset(10), all(true)), "id: done\ndata: {\"type\":\"abort\"}\n\ndata: [DONE]\n\n");
        assert_eq!(
            encode_end(Error, Some("model \"x\" failed"), Offset(12), all(false)),
            "id: done\ndata: {\"type\":\"error\",\"errorText\":\"model \\\"x\\\" failed\"}\n\ndata: [DONE]\n\n"
        );
        assert_eq!(Ending::of(Interrupted, None, Offset(10), all(true)), Some(Ending::Error("the stream was interrupted".into())));
    }

    #[test]
    fn a_reader_shown_lines_past_the_durable_length_gets_an_error_that_says_what_was_saved() {
        use EndStatus::*;
        let shown = Served { held: Offset(30), holds: finish_only(true) };
        for status in [Complete, Cancelled, Error, Interrupted] {
            let ending = Ending::of(status, Some("why"), Offset(20), shown);
            assert_eq!(
                ending,
                Some(Ending::Unsaved { status, error: Some("why".into()), durable: Offset(20), held: Offset(30) }),
                "{status:?}"
            );
        }
        assert_eq!(
            Ending::of(Interrupted, Some("the object was lost"), Offset(20), shown).unwrap().chunk(),
            r#"{"type":"error","errorText":"only part of the answer shown was saved (20 of 30 UTF-16 units): the stream ended interrupted: the object was lost; reload to see the saved answer"}"#
        );
        assert_eq!(
            Ending::of(Complete, None, Offset(0), shown).unwrap().chunk(),
            r#"{"type":"error","errorText":"only part of the answer shown was saved (0 of 30 UTF-16 units): the stream ended complete; reload to see the saved answer"}"#
        );
        assert_eq!(Ending::of(Complete, None, Offset(30), shown), None, "everything shown is durable: the text's own finish ends it");

        let end = Frame::End { seq: Offset(20), status: Complete, error: None };
        assert!(
            encode_frame(&end, shown).starts_with(
                r#"id: done
data: {"type":"error","errorText":"only part"#
            ),
            "the live end of a short seal"
        );
        assert_eq!(
            encode_frame(&end, Served { held: Offset(20), holds: finish_only(false) }),
            format!("{ENDED}data: {{\"type\":\"finish\"}}\n\n{DONE}")
        );
    }

    #[test]
    fn a_durable_read_joins_at_the_start_of_the_line_holding_from() {
        let text = "{\"type\":\"a\"}\n{\"type\":\"😀\"}\n{\"type\":\"finish\"}\n{\"ty";
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let end = |n: usize| lines[..n].iter().fold(Offset::ZERO, |at, l| at + utf16::len(l));
        let event = |n: usize| format!("id: {}\ndata: {}\n\n", end(n + 1), lines[n].trim_end());
        for from in [end(1), end(1) + Offset(1), end(2) - Offset(1)] {
            assert_eq!(encode_durable(text, from, None), format!("{}{}", event(1), event(2)), "from {from}");
        }
        assert_eq!(encode_durable(text, Offset(0), None), format!("{}{}{}", event(0), event(1), event(2)));
        assert_eq!(encode_durable(text, Offset(10_000), None), "", "past the end: only the fragment's line, which never surfaces");
        assert_eq!(encode_durable(text, end(3), Some((EndStatus::Complete, None))), format!("{ENDED}{DONE}"), "the text holds a finish");
        assert_eq!(
            encode_durable("{\"type\":\"a\"}\n", Offset(13), Some((EndStatus::Complete, None))),
            format!("{ENDED}data: {{\"type\":\"finish\"}}\n\n{DONE}")
        );
    }

    #[test]
    fn a_durable_read_from_past_the_durable_text_of_an_ended_stream_says_what_was_saved() {
        let text = "{\"type\":\"a\"}\n{\"type\":\"finish\"}\n"; // 13 + 18 units
        let interrupted = Some((EndStatus::Interrupted, Some("lost")));
        let unsaved = Ending::Unsaved { status: EndStatus::Interrupted, error: Some("lost".into()), durable: Offset(31), held: Offset(40) };
        assert_eq!(encode_durable(text, Offset(40), interrupted), format!("{ENDED}data: {}\n\n{DONE}", unsaved.chunk()));
        let complete = Ending::Unsaved { status: EndStatus::Complete, error: None, durable: Offset(31), held: Offset(32) };
        assert_eq!(
            encode_durable(text, Offset(32), Some((EndStatus::Complete, None))),
            format!("{ENDED}data: {}\n\n{DONE}", complete.chunk())
        );
        assert_eq!(
            encode_durable(text, Offset(31), Some((EndStatus::Complete, None))),
            format!("{ENDED}{DONE}"),
            "at the end: nothing unsaved"
        );
        assert_eq!(encode_durable(text, Offset(40), None), "", "still streaming: no ending yet");
    }
}
