//! Strict validation of a `ui` stream's lines (SPEC §9): each chunk as the AI SDK's own schema
//! (`uiMessageChunkSchema` of the `ai` package) would check it, so a line rindle stores and
//! serves never makes `useChat` throw at its readers.
//!
//! The table is `ui_chunks.json`: every chunk type with its fields, each field's type and
//! whether it is required, plus the `data-*` types. It is derived from the installed `ai`
//! package by `scripts/ui-chunk-schema.mjs`, and `tests/ai/chunk-schema.test.mjs` fails when
//! it no longer matches the SDK. This module reads it once and checks a line against it in one
//! pass of the JSON, building no tree (a union, rare and small, is the exception).
//!
//! Where JSON and JavaScript differ the check follows what the SDK sees after `JSON.parse`: an
//! absent key is `undefined` (an optional field may be absent, never `null`), a duplicate key's
//! last value is the one checked.

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt::{self, Write};
use std::sync::OnceLock;

/// The table, derived from the SDK (see the module comment).
const TABLE: &str = include_str!("ui_chunks.json");

/// The type of a field, as the table writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    Str,
    Bool,
    /// A finite number; `integer`: a safe integer; `min`: at least this.
    Number {
        integer: bool,
        min: Option<f64>,
    },
    /// Anything, `null` included (required all the same: the key must be there).
    Unknown,
    /// Any JSON value.
    Json,
    Literal(String),
    Enum(Vec<String>),
    /// The key may be absent.
    Optional(Box<Ty>),
    /// An object with any keys, each value of this type.
    Record(Box<Ty>),
    Array(Box<Ty>),
    /// An object with these fields (other keys are allowed).
    Object(Fields),
    /// One of these.
    Union(Vec<Ty>),
}

/// An object's fields, in the table's order.
pub type Fields = Vec<(String, Ty)>;

/// The chunk types and the fields each one has.
#[derive(Debug)]
pub struct ChunkSchema {
    types: Vec<(String, Fields)>,
    type_prefixes: Vec<(String, Fields)>,
}

impl ChunkSchema {
    /// The AI SDK's chunk schema (parsed from the table on first use).
    pub fn sdk() -> &'static ChunkSchema {
        static SCHEMA: OnceLock<ChunkSchema> = OnceLock::new();
        SCHEMA.get_or_init(|| ChunkSchema::parse(TABLE).expect("ui_chunks.json is a valid table (tested natively)"))
    }

    /// Reads a table: `{"types": {name: fields}, "typePrefixes": {prefix: fields}}`.
    pub fn parse(json: &str) -> Result<Self, String> {
        let table: serde_json::Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
        let section = |name: &str| -> Result<Vec<(String, Fields)>, String> {
            let entries = table.get(name).and_then(|v| v.as_object()).ok_or_else(|| format!("the table has no \"{name}\" object"))?;
            entries.iter().map(|(k, v)| Ok((k.clone(), fields_of(v)?))).collect()
        };
        Ok(Self { types: section("types")?, type_prefixes: section("typePrefixes")? })
    }

    /// The fields of chunk type `name`, or `None` when the SDK has no such type.
    pub fn fields(&self, name: &str) -> Option<&Fields> {
        self.types
            .iter()
            .find(|(t, _)| t == name)
            .or_else(|| self.type_prefixes.iter().find(|(prefix, _)| name.starts_with(prefix.as_str())))
            .map(|(_, fields)| fields)
    }

    /// Every chunk type name the table lists (prefixes with a `*`), for tests.
    #[cfg(test)]
    pub fn type_names(&self) -> impl Iterator<Item = String> + '_ {
        self.types.iter().map(|(t, _)| t.clone()).chain(self.type_prefixes.iter().map(|(p, _)| format!("{p}*")))
    }
}

fn fields_of(v: &serde_json::Value) -> Result<Fields, String> {
    let map = v.as_object().ok_or_else(|| format!("fields must be an object, not {v}"))?;
    map.iter().map(|(k, t)| Ok((k.clone(), ty_of(t)?))).collect()
}

fn ty_of(v: &serde_json::Value) -> Result<Ty, String> {
    if let Some(name) = v.as_str() {
        return match name {
            "string" => Ok(Ty::Str),
            "boolean" => Ok(Ty::Bool),
            "number" => Ok(Ty::Number { integer: false, min: None }),
            "unknown" => Ok(Ty::Unknown),
            "json" => Ok(Ty::Json),
            other => Err(format!("unknown type {other:?}")),
        };
    }
    let (kind, arg) = v.as_object().filter(|o| o.len() == 1).and_then(|o| o.iter().next()).ok_or_else(|| format!("a bad type: {v}"))?;
    let strings = |a: &serde_json::Value| -> Result<Vec<String>, String> {
        a.as_array().map(|xs| xs.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect()).ok_or_else(|| format!("a bad enum: {a}"))
    };
    Ok(match kind.as_str() {
        "literal" => Ty::Literal(arg.as_str().ok_or_else(|| format!("a bad literal: {arg}"))?.to_owned()),
        "enum" => Ty::Enum(strings(arg)?),
        "optional" => Ty::Optional(Box::new(ty_of(arg)?)),
        "record" => Ty::Record(Box::new(ty_of(arg)?)),
        "array" => Ty::Array(Box::new(ty_of(arg)?)),
        "object" => Ty::Object(fields_of(arg)?),
        "union" => Ty::Union(arg.as_array().ok_or_else(|| format!("a bad union: {arg}"))?.iter().map(ty_of).collect::<Result<_, _>>()?),
        "number" => Ty::Number {
            integer: arg.get("integer").and_then(|b| b.as_bool()).unwrap_or(false),
            min: arg.get("min").and_then(|m| m.as_f64()),
        },
        other => return Err(format!("unknown type kind {other:?}")),
    })
}

/// Why a chunk's field does not fit the SDK's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldFault {
    /// Where: `delta`, `providerMetadata.openai`, `citations[0].startIndex`.
    pub path: String,
    pub problem: Problem,
}

/// What is wrong with the field at a [`FieldFault`]'s path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// A required field is absent; it must be this.
    Missing { expected: String },
    /// It is the wrong kind of value.
    WrongType { expected: String, found: &'static str },
    /// A string the schema does not list (a literal or an enum).
    NotAllowed { expected: String, found: String },
    /// A number out of the schema's range, or not an integer where one is required.
    BadNumber { expected: String },
}

impl fmt::Display for FieldFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = &self.path;
        match &self.problem {
            Problem::Missing { expected } => write!(f, "\"{path}\" is missing (it must be {expected})"),
            Problem::WrongType { expected, found } => write!(f, "\"{path}\" must be {expected}, not {found}"),
            Problem::NotAllowed { expected, found } => write!(f, "\"{path}\" must be {expected}, not {found:?}"),
            Problem::BadNumber { expected } => write!(f, "\"{path}\" must be {expected}"),
        }
    }
}

impl FieldFault {
    fn at(path: String, problem: Problem) -> Self {
        Self { path, problem }
    }

    /// The same fault, one level further in: under key `key` (or index, written `[n]`).
    fn within(mut self, segment: &str) -> Self {
        self.path = if self.path.is_empty() {
            segment.to_owned()
        } else if self.path.starts_with('[') {
            format!("{segment}{}", self.path)
        } else {
            format!("{segment}.{}", self.path)
        };
        self
    }
}

/// What a type expects, in words ("a string", "one of \"stop\", \"length\"").
fn describe(ty: &Ty) -> String {
    match ty {
        Ty::Str => "a string".into(),
        Ty::Bool => "a boolean".into(),
        Ty::Number { integer: true, min: Some(m) } => format!("an integer of at least {m}"),
        Ty::Number { integer: true, min: None } => "an integer".into(),
        Ty::Number { integer: false, min: Some(m) } => format!("a number of at least {m}"),
        Ty::Number { .. } => "a number".into(),
        Ty::Unknown => "present (any value)".into(),
        Ty::Json => "a JSON value".into(),
        Ty::Literal(s) => format!("{s:?}"),
        Ty::Enum(xs) => {
            let mut out = String::from("one of ");
            for (i, x) in xs.iter().enumerate() {
                let _ = write!(out, "{}{x:?}", if i > 0 { ", " } else { "" });
            }
            out
        }
        Ty::Optional(inner) => describe(inner),
        Ty::Record(_) => "an object".into(),
        Ty::Array(_) => "an array".into(),
        Ty::Object(_) => "an object".into(),
        Ty::Union(options) => options.iter().map(describe).collect::<Vec<_>>().join(" or "),
    }
}

/// The verdict on one value: fine, or the first fault found in it.
type Verdict = Result<(), FieldFault>;

/// Checks the fields of one chunk line (a JSON object, whose `type` was already read) against
/// `fields`. `Err` of the outer result: the line is not JSON (already ruled out by the caller's
/// first pass, but the check is total).
pub fn check_fields(line: &str, fields: &Fields) -> Result<Verdict, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(line);
    let verdict = ObjectCheck { fields, skip: Some("type") }.deserialize(&mut de)?;
    de.end()?;
    Ok(verdict)
}

/// Checks a value against a type.
#[derive(Clone, Copy)]
struct Check<'t>(&'t Ty);

impl<'de> DeserializeSeed<'de> for Check<'_> {
    type Value = Verdict;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Verdict, D::Error> {
        match self.0 {
            Ty::Unknown | Ty::Json => IgnoredAny::deserialize(d).map(|_| Ok(())),
            Ty::Optional(inner) => Check(inner).deserialize(d),
            Ty::Object(fields) => ObjectCheck { fields, skip: None }.deserialize(d),
            Ty::Union(options) => {
                // Rare and small (citations, steering parts): read the value, try each option on
                // its text (one deserializer for every check keeps the wasm small).
                let text = serde_json::Value::deserialize(d)?.to_string();
                let mut faults = Vec::with_capacity(options.len());
                for option in options {
                    let mut de = serde_json::Deserializer::from_str(&text);
                    match Check(option).deserialize(&mut de) {
                        Ok(Ok(())) => return Ok(Ok(())),
                        Ok(Err(fault)) => faults.push(fault),
                        Err(e) => return Err(de::Error::custom(e)),
                    }
                }
                // The option the value came closest to: its fault is not at a literal field
                // (the discriminator) that picked another option.
                let best = faults.iter().position(|f| !matches!(&f.problem, Problem::NotAllowed { .. })).unwrap_or(0);
                Ok(Err(faults.swap_remove(best)))
            }
            ty => d.deserialize_any(ValueCheck(ty)),
        }
    }
}

/// The kind of a JSON value, in words.
const fn found(kind: Kind) -> &'static str {
    match kind {
        Kind::Str => "a string",
        Kind::Number => "a number",
        Kind::Bool => "a boolean",
        Kind::Null => "null",
        Kind::Object => "an object",
        Kind::Array => "an array",
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Str,
    Number,
    Bool,
    Null,
    Object,
    Array,
}

/// Checks one value of a scalar, record or array type.
struct ValueCheck<'t>(&'t Ty);

impl ValueCheck<'_> {
    fn wrong(&self, kind: Kind) -> Verdict {
        Err(FieldFault::at(String::new(), Problem::WrongType { expected: describe(self.0), found: found(kind) }))
    }

    fn number(&self, n: f64) -> Verdict {
        let Ty::Number { integer, min } = self.0 else { return self.wrong(Kind::Number) };
        const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
        let fits = n.is_finite() && (!integer || (n.fract() == 0.0 && n.abs() <= MAX_SAFE)) && min.is_none_or(|m| n >= m);
        if fits {
            Ok(())
        } else {
            Err(FieldFault::at(String::new(), Problem::BadNumber { expected: describe(self.0) }))
        }
    }
}

impl<'de> Visitor<'de> for ValueCheck<'_> {
    type Value = Verdict;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Verdict, E> {
        Ok(match self.0 {
            Ty::Str => Ok(()),
            Ty::Literal(l) if l == s => Ok(()),
            Ty::Enum(xs) if xs.iter().any(|x| x == s) => Ok(()),
            ty @ (Ty::Literal(_) | Ty::Enum(_)) => {
                Err(FieldFault::at(String::new(), Problem::NotAllowed { expected: describe(ty), found: s.to_owned() }))
            }
            _ => self.wrong(Kind::Str),
        })
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Verdict, E> {
        Ok(if *self.0 == Ty::Bool { Ok(()) } else { self.wrong(Kind::Bool) })
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Verdict, E> {
        Ok(self.number(n as f64))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Verdict, E> {
        Ok(self.number(n as f64))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Verdict, E> {
        Ok(self.number(n))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Verdict, E> {
        Ok(self.wrong(Kind::Null))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Verdict, A::Error> {
        let Ty::Record(value_ty) = self.0 else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(self.wrong(Kind::Object));
        };
        let mut verdict = Ok(());
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let v = map.next_value_seed(Check(value_ty))?;
            if verdict.is_ok() {
                verdict = v.map_err(|f| f.within(&key));
            }
        }
        Ok(verdict)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Verdict, A::Error> {
        let Ty::Array(element) = self.0 else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(self.wrong(Kind::Array));
        };
        let mut verdict = Ok(());
        let mut i = 0usize;
        while let Some(v) = seq.next_element_seed(Check(element))? {
            if verdict.is_ok() {
                verdict = v.map_err(|f| f.within(&format!("[{i}]")));
            }
            i += 1;
        }
        Ok(verdict)
    }
}

/// Checks an object against its fields; `skip` names a key already checked (the chunk's `type`).
struct ObjectCheck<'t> {
    fields: &'t Fields,
    skip: Option<&'static str>,
}

impl<'de> DeserializeSeed<'de> for ObjectCheck<'_> {
    type Value = Verdict;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Verdict, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ObjectCheck<'_> {
    type Value = Verdict;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Verdict, A::Error> {
        // One verdict per field, the last occurrence's (as `JSON.parse` keeps the last value).
        let mut seen: Vec<Option<Verdict>> = vec![None; self.fields.len()];
        while let Some(key) = map.next_key_seed(FieldKey { fields: self.fields, skip: self.skip })? {
            match key {
                Some(i) => seen[i] = Some(map.next_value_seed(Check(&self.fields[i].1))?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        for ((name, ty), verdict) in self.fields.iter().zip(seen) {
            match verdict {
                Some(Err(fault)) => return Ok(Err(fault.within(name))),
                Some(Ok(())) => {}
                None if matches!(ty, Ty::Optional(_)) => {}
                None => return Ok(Err(FieldFault::at(name.clone(), Problem::Missing { expected: describe(ty) }))),
            }
        }
        Ok(Ok(()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Verdict, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Err(FieldFault::at(String::new(), Problem::WrongType { expected: "an object".into(), found: "an array" })))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Verdict, E> {
        Ok(Err(FieldFault::at(String::new(), Problem::WrongType { expected: "an object".into(), found: "a string" })))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Verdict, E> {
        Ok(Err(FieldFault::at(String::new(), Problem::WrongType { expected: "an object".into(), found: "a boolean" })))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Verdict, E> {
        Ok(Err(FieldFault::at(String::new(), Problem::WrongType { expected: "an object".into(), found: "a number" })))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Verdict, E> {
        Ok(Err(FieldFault::at(String::new(), Problem::WrongType { expected: "an object".into(), found: "a number" })))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Verdict, E> {
        Ok(Err(FieldFault::at(String::new(), Problem::WrongType { expected: "an object".into(), found: "a number" })))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Verdict, E> {
        Ok(Err(FieldFault::at(String::new(), Problem::WrongType { expected: "an object".into(), found: "null" })))
    }
}

/// An object key: the index of the field it names, or `None` (another key, or the skipped one).
struct FieldKey<'t> {
    fields: &'t Fields,
    skip: Option<&'static str>,
}

impl<'de> DeserializeSeed<'de> for FieldKey<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for FieldKey<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Option<usize>, E> {
        if self.skip == Some(key) {
            return Ok(None);
        }
        Ok(self.fields.iter().position(|(name, _)| name == key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str) -> Verdict {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let fields = ChunkSchema::sdk().fields(v["type"].as_str().unwrap()).expect("a known type");
        check_fields(line, fields).unwrap()
    }

    fn fault(line: &str) -> String {
        check(line).unwrap_err().to_string()
    }

    #[test]
    fn the_table_parses_and_lists_the_sdks_types() {
        let names: Vec<String> = ChunkSchema::sdk().type_names().collect();
        for t in ["start", "text-start", "text-delta", "text-end", "finish", "error", "abort", "tool-input-available", "data-*"] {
            assert!(names.iter().any(|n| n == t), "{t} in {names:?}");
        }
        assert!(ChunkSchema::sdk().fields("data-weather").is_some(), "data-* by prefix");
        assert!(ChunkSchema::sdk().fields("text").is_none());
    }

    #[test]
    fn a_chunk_with_its_required_fields_passes_and_extra_keys_are_fine() {
        for line in [
            r#"{"type":"text-delta","id":"t","delta":"hé 👋"}"#,
            r#"{"type":"text-delta","delta":"x","id":"t","extra":[1,{"a":null}]}"#,
            r#"{"type":"start"}"#,
            r#"{"type":"start","messageId":"m1","messageMetadata":null}"#,
            r#"{"type":"finish","finishReason":"stop","messageMetadata":{"usage":{"inputTokens":3}}}"#,
            r#"{"type":"tool-input-available","toolCallId":"c","toolName":"w","input":null}"#,
            r#"{"type":"data-weather","data":{"t":1}}"#,
            r#"{"type":"text-start","id":"a","providerMetadata":{"openai":{"x":[1,{"y":2}],"z":null}}}"#,
            r#"{"type":"text-end","id":"a","citations":[{"source":{"type":"source","sourceType":"document","id":"1","mediaType":"m","title":"t"},"startIndex":0}]}"#,
            r#"{"type":"steering-message","id":"s","parts":[{"type":"text","text":"hi"},{"type":"file","mediaType":"m","url":"u"}]}"#,
            r#"{"type":"text-delta","id":1,"delta":"x","id":"t"}"#,
        ] {
            assert_eq!(check(line), Ok(()), "{line}");
        }
    }

    #[test]
    fn each_fault_names_its_field() {
        for (line, expected) in [
            (r#"{"type":"text-delta","id":"t"}"#, r#""delta" is missing (it must be a string)"#),
            (r#"{"type":"text-delta","id":"t","delta":7}"#, r#""delta" must be a string, not a number"#),
            (r#"{"type":"text-delta","id":null,"delta":""}"#, r#""id" must be a string, not null"#),
            (r#"{"type":"start","messageId":null}"#, r#""messageId" must be a string, not null"#),
            (r#"{"type":"data-x"}"#, r#""data" is missing (it must be present (any value))"#),
            (r#"{"type":"tool-approval-response","approvalId":"a","approved":"yes"}"#, r#""approved" must be a boolean, not a string"#),
            (
                r#"{"type":"finish","finishReason":"done"}"#,
                r#""finishReason" must be one of "stop", "length", "content-filter", "tool-calls", "error", "interrupted", "other", not "done""#,
            ),
            (
                r#"{"type":"text-start","id":"a","providerMetadata":{"openai":1}}"#,
                r#""providerMetadata.openai" must be an object, not a number"#,
            ),
            (r#"{"type":"text-start","id":"a","providerMetadata":[]}"#, r#""providerMetadata" must be an object, not an array"#),
            (
                r#"{"type":"text-end","id":"a","citations":[{"source":{"type":"source","sourceType":"url","id":"1","url":"u"},"startIndex":1.5}]}"#,
                r#""citations[0].startIndex" must be an integer of at least 0"#,
            ),
            (
                r#"{"type":"text-end","id":"a","citations":[{"source":{"type":"source","sourceType":"document","id":"1","mediaType":"m"}}]}"#,
                r#""citations[0].source.title" is missing (it must be a string)"#,
            ),
            (r#"{"type":"steering-message","id":"s","parts":[{"type":"text"}]}"#, r#""parts[0].text" is missing (it must be a string)"#),
            (r#"{"type":"text-delta","id":"t","delta":"x","delta":false}"#, r#""delta" must be a string, not a boolean"#),
        ] {
            assert_eq!(fault(line), expected, "{line}");
        }
    }

    #[test]
    fn a_bad_table_is_refused_with_a_reason() {
        assert!(ChunkSchema::parse(r#"{"types":{"a":{"x":"strin"}},"typePrefixes":{}}"#).unwrap_err().contains("strin"));
        assert!(ChunkSchema::parse(r#"{"types":{}}"#).unwrap_err().contains("typePrefixes"));
    }
}
