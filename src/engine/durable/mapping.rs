//! Where the durable plane lives in the app's database: the message table the app owns, the
//! chunk table the protocol owns, and the column names on each.

use serde::Deserialize;
use thiserror::Error;

/// A mapping the plane refuses to use.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MappingError {
    #[error("invalid table/column name {name:?}: {reason}")]
    BadIdentifier { name: String, reason: &'static str },
    #[error("invalid column mapping JSON: {0}")]
    BadJson(String),
    #[error("invalid table/column name {name:?}: it is {bytes} bytes, longer than the {max} {dialect} keeps (it would cut it short without an error, so two names could become one)")]
    TooLongFor { name: String, bytes: usize, max: usize, dialect: &'static str },
}

/// The longest identifier accepted; far above any real name, far below D1's statement limit.
pub(super) const MAX_IDENTIFIER_BYTES: usize = 128;

/// A table or column name that is safe to double-quote into SQL text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident(String);

impl Ident {
    /// Refuses rather than escapes an embedded `"`: a mapping is configuration, and a name that
    /// needs escaping is a mistake worth failing loudly on.
    pub fn new(name: &str) -> Result<Self, MappingError> {
        let bad = |reason| Err(MappingError::BadIdentifier { name: name.to_owned(), reason });
        if name.is_empty() {
            return bad("it is empty");
        }
        if name.contains('"') {
            return bad("it contains a double quote");
        }
        if name.contains('\0') {
            return bad("it contains a NUL byte");
        }
        if name.len() > MAX_IDENTIFIER_BYTES {
            return bad("it is longer than 128 bytes");
        }
        Ok(Self(name.to_owned()))
    }

    /// The name as it appears unquoted.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Ident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{}\"", self.0)
    }
}

/// Column names as configured (JSON, camelCase keys); every key is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ColumnNames {
    pub key: Option<String>,
    pub body: Option<String>,
    pub status: Option<String>,
    pub seq: Option<String>,
    pub cancel: Option<String>,
    pub error: Option<String>,
    pub host: Option<String>,
    /// The chat a message belongs to: enables `GET {prefix}/chats/{chat}/stream` and tokens
    /// with a `chat` claim.
    pub chat: Option<String>,
    /// The stream's format (`text` or `ui`), written at the open: a `/ui` read of a finished
    /// stream learns it from the row, so the object keeps nothing once the stream is over.
    pub format: Option<String>,
    pub chunk_key: Option<String>,
    pub chunk_stream: Option<String>,
    pub chunk_seq: Option<String>,
    pub chunk_text: Option<String>,
}

impl ColumnNames {
    pub fn from_json(json: &str) -> Result<Self, MappingError> {
        serde_json::from_str(json).map_err(|e| MappingError::BadJson(e.to_string()))
    }
}

/// A validated mapping: every identifier is quotable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMapping {
    pub message: Ident,
    pub chunks: Ident,
    pub key: Ident,
    pub body: Ident,
    pub status: Ident,
    pub seq: Ident,
    pub cancel: Option<Ident>,
    pub error: Option<Ident>,
    pub host: Option<Ident>,
    pub chat: Option<Ident>,
    pub format: Option<Ident>,
    pub chunk_key: Ident,
    pub chunk_stream: Ident,
    pub chunk_seq: Ident,
    pub chunk_text: Ident,
}

impl TableMapping {
    /// Resolves defaults (`id`, `body`, `status`, `seq`; chunk `id`, `streamId`, `seq`, `text`)
    /// and validates every name. The optional columns are mapped only when named.
    pub fn new(message: &str, chunks: &str, names: &ColumnNames) -> Result<Self, MappingError> {
        let req = |v: &Option<String>, d: &str| Ident::new(v.as_deref().unwrap_or(d));
        let opt = |v: &Option<String>| v.as_deref().map(Ident::new).transpose();
        Ok(Self {
            message: Ident::new(message)?,
            chunks: Ident::new(chunks)?,
            key: req(&names.key, "id")?,
            body: req(&names.body, "body")?,
            status: req(&names.status, "status")?,
            seq: req(&names.seq, "seq")?,
            cancel: opt(&names.cancel)?,
            error: opt(&names.error)?,
            host: opt(&names.host)?,
            chat: opt(&names.chat)?,
            format: opt(&names.format)?,
            chunk_key: req(&names.chunk_key, "id")?,
            chunk_stream: req(&names.chunk_stream, "streamId")?,
            chunk_seq: req(&names.chunk_seq, "seq")?,
            chunk_text: req(&names.chunk_text, "text")?,
        })
    }

    /// Refuses a name longer than `dialect` keeps whole
    /// ([`Dialect::max_identifier_bytes`](super::Dialect::max_identifier_bytes)).
    pub fn check_for(&self, dialect: super::Dialect) -> Result<(), MappingError> {
        let max = dialect.max_identifier_bytes();
        let optional = [&self.cancel, &self.error, &self.host, &self.chat].into_iter().flatten();
        let required = [&self.message, &self.chunks, &self.key, &self.body, &self.status, &self.seq];
        let chunk_columns = [&self.chunk_key, &self.chunk_stream, &self.chunk_seq, &self.chunk_text];
        match required.into_iter().chain(chunk_columns).chain(optional).find(|i| i.name().len() > max) {
            Some(long) => Err(MappingError::TooLongFor {
                name: long.name().to_owned(),
                bytes: long.name().len(),
                max,
                dialect: match dialect {
                    super::Dialect::Sqlite => "SQLite",
                    super::Dialect::Postgres => "PostgreSQL",
                },
            }),
            None => Ok(()),
        }
    }

    /// The example schema's mapping: `messages` and `message_chunks` with every optional column.
    pub fn example() -> Self {
        let names = ColumnNames {
            cancel: Some("cancel".into()),
            error: Some("error".into()),
            host: Some("host".into()),
            chat: Some("chat_id".into()),
            format: Some("format".into()),
            ..ColumnNames::default()
        };
        Self::new("messages", "message_chunks", &names).expect("the example mapping is valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_containing_a_double_quote_is_refused() {
        let names = ColumnNames { body: Some("bo\"dy".into()), ..Default::default() };
        let err = TableMapping::new("messages", "chunks", &names).unwrap_err();
        assert!(matches!(err, MappingError::BadIdentifier { reason: "it contains a double quote", .. }));
        assert!(TableMapping::new("x\"y", "chunks", &ColumnNames::default()).is_err());
    }

    #[test]
    fn names_past_63_bytes_are_refused_for_postgres_and_kept_for_sqlite() {
        use super::super::Dialect;
        let long = "c".repeat(64);
        let fits = "c".repeat(63);
        for names in [
            ColumnNames { body: Some(long.clone()), ..Default::default() },
            ColumnNames { chat: Some(long.clone()), ..Default::default() },
            ColumnNames { chunk_text: Some(long.clone()), ..Default::default() },
        ] {
            let mapping = TableMapping::new("messages", "chunks", &names).unwrap();
            let err = mapping.check_for(Dialect::Postgres).unwrap_err();
            assert!(matches!(&err, MappingError::TooLongFor { bytes: 64, max: 63, .. }), "{err}");
            assert!(err.to_string().contains("longer than the 63 PostgreSQL keeps"), "{err}");
            assert_eq!(mapping.check_for(Dialect::Sqlite), Ok(()));
        }
        assert!(TableMapping::new(&long, "chunks", &ColumnNames::default()).unwrap().check_for(Dialect::Postgres).is_err(), "a table");
        let ok = TableMapping::new(&fits, &fits, &ColumnNames { body: Some(fits.clone()), ..Default::default() }).unwrap();
        assert_eq!(ok.check_for(Dialect::Postgres), Ok(()));
        assert!(TableMapping::new(&"c".repeat(129), "chunks", &ColumnNames::default()).is_err(), "129 bytes anywhere");
    }

    #[test]
    fn unknown_keys_in_the_json_are_refused() {
        assert!(ColumnNames::from_json(r#"{"bodyy":"b"}"#).is_err());
        assert_eq!(ColumnNames::from_json(r#"{"body":"b"}"#).unwrap().body.as_deref(), Some("b"));
    }
}
