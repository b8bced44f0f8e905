//! Which database an answer's rows live in (SPEC §13): beyond one database, the app chooses, by
//! a rule it controls, and every path of the answer follows it.
//!
//! **The rule: the id names its database.** `DATABASES` maps database names to bindings,
//! `{"default": "DB", "eu": "DB_EU", "acme": "DB_ACME"}` (D1 bindings; Hyperdrive bindings with
//! `DURABLE_BACKEND = "postgres"`). With it set, an id `name:rest` (a stream id, or a chat id)
//! lives in database `name`, and an id without `:` in `default`. Per tenant, as Cloudflare
//! advises: the app names a database after a tenant (or a group of them) and prefixes that
//! tenant's message and chat ids with it (`acme:msg_42`). The id is on every path of an answer
//! (the open, its checkpoints and seal, the lease's revival, which reads the id from the
//! object's storage, `/text`, `/ui`, a chat's reads, the chat feed's rebuild), so every path finds
//! the same database with no lookup, and a database is moved by pointing its name at another
//! binding (docs/LOAD.md, "From one database to many").
//!
//! An id naming a database that is not configured is refused, 400 `unknown_database`, never a
//! 500. Without `DATABASES` there is one database (`DB`, or `HYPERDRIVE`) and ids are not read.

use thiserror::Error;

/// The name an id without a prefix lives under.
pub const DEFAULT_DATABASE: &str = "default";

/// The configured databases, and whether ids name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Databases {
    /// Name to binding.
    named: Vec<(String, String)>,
    /// `DATABASES` is set: ids name their database.
    by_id: bool,
}

/// One database: its name (what ids carry) and its binding (where it is reached).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Database<'a> {
    pub name: &'a str,
    pub binding: &'a str,
}

/// An id names a database that is not configured.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the id names database {name:?}, which is not configured")]
pub struct UnknownDatabase {
    pub name: String,
}

/// `DATABASES` that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct BadDatabases(String);

impl Databases {
    /// One database, reached through `binding`; ids are not read.
    pub fn single(binding: &str) -> Self {
        Self { named: vec![(DEFAULT_DATABASE.to_owned(), binding.to_owned())], by_id: false }
    }

    /// `DATABASES`: a JSON object of names (1-32 of `[A-Za-z0-9_-]`) to bindings (1-64 of
    /// `[A-Za-z0-9_]`).
    pub fn parse(json: &str) -> Result<Self, BadDatabases> {
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(json).map_err(|e| BadDatabases(format!("is not a JSON object of names to bindings: {e}")))?;
        if map.is_empty() {
            return Err(BadDatabases("names no database".into()));
        }
        let mut named = Vec::with_capacity(map.len());
        for (name, binding) in map {
            let good_name = (1..=32).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !good_name {
                return Err(BadDatabases(format!("database name {name:?} must be 1-32 letters, digits, _ or -")));
            }
            let Some(binding) =
                binding.as_str().filter(|b| (1..=64).contains(&b.len()) && b.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'))
            else {
                return Err(BadDatabases(format!("database {name:?}: its binding must be a binding name (letters, digits, _)")));
            };
            named.push((name, binding.to_owned()));
        }
        Ok(Self { named, by_id: true })
    }

    /// The database `id` (a stream id or a chat id) lives in.
    pub fn of_id(&self, id: &str) -> Result<Database<'_>, UnknownDatabase> {
        let name = match id.split_once(':') {
            Some((name, _)) if self.by_id => name,
            _ => DEFAULT_DATABASE,
        };
        self.named(name)
    }

    /// The database an id without a prefix lives in.
    pub fn default_database(&self) -> Result<Database<'_>, UnknownDatabase> {
        self.named(DEFAULT_DATABASE)
    }

    /// The configured databases, in their order.
    pub fn all(&self) -> impl Iterator<Item = Database<'_>> {
        self.named.iter().map(|(name, binding)| Database { name, binding })
    }

    fn named(&self, name: &str) -> Result<Database<'_>, UnknownDatabase> {
        self.named
            .iter()
            .find(|(n, _)| n == name)
            .map(|(name, binding)| Database { name, binding })
            .ok_or_else(|| UnknownDatabase { name: name.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_databases_every_id_lives_in_the_one_database_whatever_it_holds() {
        let one = Databases::single("DB");
        for id in ["m1", "acme:m1", "chat-9:turn.2"] {
            assert_eq!(one.of_id(id), Ok(Database { name: "default", binding: "DB" }), "{id}");
        }
    }

    #[test]
    fn with_databases_the_id_names_its_database_and_an_unknown_name_is_refused() {
        let many = Databases::parse(r#"{"default": "DB", "eu": "DB_EU", "acme": "DB_ACME"}"#).unwrap();
        assert_eq!(many.of_id("eu:msg_1"), Ok(Database { name: "eu", binding: "DB_EU" }));
        assert_eq!(many.of_id("acme:chat:7"), Ok(Database { name: "acme", binding: "DB_ACME" }), "the first ':' ends the name");
        assert_eq!(many.of_id("msg_2"), Ok(Database { name: "default", binding: "DB" }), "no prefix: the default");
        assert_eq!(many.of_id("us:msg_3"), Err(UnknownDatabase { name: "us".into() }));
        assert_eq!(many.all().count(), 3);
        let shared = Databases::parse(r#"{"default": "DB", "acme": "DB"}"#).unwrap();
        assert_eq!(
            shared.of_id("acme:m1"),
            Ok(Database { name: "acme", binding: "DB" }),
            "a tenant's name may share a database until it moves"
        );
        let no_default = Databases::parse(r#"{"eu": "DB_EU"}"#).unwrap();
        assert_eq!(no_default.of_id("msg_2"), Err(UnknownDatabase { name: "default".into() }), "no default configured");
    }

    #[test]
    fn a_bad_databases_setting_is_refused_with_what_to_fix() {
        for (bad, says) in [
            ("[]", "is not a JSON object"),
            ("{}", "names no database"),
            (r#"{"": "DB"}"#, "must be 1-32"),
            (r#"{"a b": "DB"}"#, "must be 1-32"),
            (r#"{"eu": 3}"#, "its binding must be"),
            (r#"{"eu": "DB-EU"}"#, "its binding must be"),
        ] {
            let err = Databases::parse(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
