//! The credentials a pump may send upstream, named on an allow-list (`PUMP_SECRETS`).
//!
//! A pump request names a Worker secret (`{"auth": {"secret": "OPENAI_API_KEY"}}`) instead of
//! carrying a key; the shell reads the secret's value from the environment at each upstream
//! call and sends it as the upstream format's credential header
//! ([`UpstreamFormat::credential_header`]). So the key is in no request body, no storage and no
//! log, and a background pump can re-attach after a reset with nothing but the name it stored.
//!
//! An entry is `NAME` or `NAME=ORIGIN`. A pinned secret goes only to that origin
//! (`OPENAI_API_KEY=https://api.openai.com`): any producer with write scope chooses the pump's
//! URL, and without the pin could send the key to a server of its own. An unpinned name goes to
//! whatever upstream a producer names; it suits development against a local mock.

use super::upstream::UpstreamFormat;
use super::BadPump;
use thiserror::Error;

/// The secret that signs stream tokens: never sent upstream, whatever the list says.
const RESERVED: &str = "STREAM_JWT_SECRET";

/// The secrets a pump may name, each with the origin it is pinned to, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PumpSecrets {
    grants: Vec<Grant>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    name: String,
    /// `scheme://host[:port]`, lowercase; `None`: any upstream.
    origin: Option<String>,
}

/// Why `PUMP_SECRETS` was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SecretsError {
    #[error("entry {0:?} is not NAME or NAME=http(s)://host[:port] (a name is letters, digits and '_', not starting with a digit)")]
    Malformed(String),
    #[error("{RESERVED} may not be listed: it signs the stream tokens and is never sent upstream")]
    Reserved,
    #[error("{0} is listed twice")]
    Duplicate(String),
}

impl PumpSecrets {
    /// Parses the allow-list: entries separated by commas or whitespace; empty is none.
    pub fn parse(raw: &str) -> Result<Self, SecretsError> {
        let mut grants: Vec<Grant> = Vec::new();
        for entry in raw.split([',', ' ', '\t', '\n']).filter(|e| !e.is_empty()) {
            let (name, origin) = match entry.split_once('=') {
                Some((name, origin)) => (name, Some(parse_origin(origin).ok_or_else(|| SecretsError::Malformed(entry.to_owned()))?)),
                None => (entry, None),
            };
            let first_ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
            if !first_ok || name.len() > 128 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(SecretsError::Malformed(entry.to_owned()));
            }
            if name == RESERVED {
                return Err(SecretsError::Reserved);
            }
            if grants.iter().any(|g| g.name == name) {
                return Err(SecretsError::Duplicate(name.to_owned()));
            }
            grants.push(Grant { name: name.to_owned(), origin });
        }
        Ok(PumpSecrets { grants })
    }

    /// The secrets listed (the service checks at start that each is set).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.grants.iter().map(|g| g.name.as_str())
    }

    /// Whether a pump to `url` may send the secret `name`.
    pub fn permit(&self, name: &str, url: &str) -> Result<(), BadPump> {
        let grant = self.grants.iter().find(|g| g.name == name).ok_or_else(|| {
            BadPump(format!("auth.secret {:?} is not on the PUMP_SECRETS allow-list", super::upstream::truncate(name, 64)))
        })?;
        match &grant.origin {
            None => Ok(()),
            Some(origin) if url_origin(url).as_deref() == Some(origin.as_str()) => Ok(()),
            Some(origin) => Err(BadPump(format!("auth.secret {name} may be sent only to {origin}"))),
        }
    }
}

impl UpstreamFormat {
    /// The header a credential goes in, and its value: OpenAI's bearer token, Anthropic's
    /// `x-api-key`.
    pub fn credential_header(self, value: &str) -> (&'static str, String) {
        match self {
            UpstreamFormat::OpenAiChat | UpstreamFormat::OpenAiResponses => ("authorization", format!("Bearer {value}")),
            UpstreamFormat::Anthropic => ("x-api-key", value.to_owned()),
        }
    }
}

/// Header names that carry a credential in the APIs the pump speaks (Azure OpenAI's `api-key`
/// too): a pump that names its credential, or must re-attach without a stored key, may not also
/// send one of these as given.
pub(super) fn is_credential_header(name: &str) -> bool {
    ["authorization", "x-api-key", "api-key"].iter().any(|h| name.eq_ignore_ascii_case(h))
}

/// `scheme://authority` of an http(s) URL, lowercase; `None` for a URL with userinfo (`@`),
/// which could make an origin check read one host and the fetch go to another.
fn url_origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let ok = matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") && !authority.is_empty() && !authority.contains('@');
    ok.then(|| format!("{}://{}", scheme.to_ascii_lowercase(), authority.to_ascii_lowercase()))
}

/// An allow-list entry's origin: an http(s) URL with nothing after its authority but an
/// optional `/`.
fn parse_origin(raw: &str) -> Option<String> {
    let origin = url_origin(raw)?;
    (raw.trim_end_matches('/').len() == origin.len()).then_some(origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allow_list_parses_names_and_pinned_origins() {
        let list =
            PumpSecrets::parse("OPENAI_API_KEY=https://API.openai.com/, ANTHROPIC_API_KEY=https://api.anthropic.com\tDEV_KEY").unwrap();
        assert_eq!(list.names().collect::<Vec<_>>(), ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEV_KEY"]);
        assert_eq!(PumpSecrets::parse("").unwrap(), PumpSecrets::default());
        assert_eq!(PumpSecrets::parse(" , ").unwrap(), PumpSecrets::default());
        for bad in ["1KEY", "KEY-X", "KEY=ftp://x", "KEY=https://x/v1", "KEY=https://u@x", "KEY=", "=https://x"] {
            assert!(matches!(PumpSecrets::parse(bad), Err(SecretsError::Malformed(_))), "{bad}");
        }
        assert_eq!(PumpSecrets::parse("STREAM_JWT_SECRET"), Err(SecretsError::Reserved));
        assert_eq!(PumpSecrets::parse("A,A=https://x"), Err(SecretsError::Duplicate("A".into())));
    }

    #[test]
    fn a_secret_is_permitted_only_when_listed_and_only_to_its_origin() {
        let list = PumpSecrets::parse("OPENAI_API_KEY=https://api.openai.com,DEV_KEY").unwrap();
        assert_eq!(list.permit("OPENAI_API_KEY", "https://api.openai.com/v1/responses"), Ok(()));
        assert_eq!(list.permit("OPENAI_API_KEY", "HTTPS://Api.OpenAI.com?x=1"), Ok(()));
        assert_eq!(list.permit("DEV_KEY", "http://127.0.0.1:9/v1/responses"), Ok(()), "an unpinned name goes anywhere");
        for (name, url) in [
            ("OPENAI_API_KEY", "https://evil.example/v1/responses"),
            ("OPENAI_API_KEY", "https://api.openai.com.evil.example/v1"),
            ("OPENAI_API_KEY", "https://api.openai.com@evil.example/v1"),
            ("OPENAI_API_KEY", "http://api.openai.com/v1/responses"),
            ("OPENAI_API_KEY", "https://api.openai.com:8443/v1/responses"),
            ("STREAM_JWT_SECRET", "https://api.openai.com/v1"),
            ("NOT_LISTED", "https://api.openai.com/v1"),
        ] {
            assert!(list.permit(name, url).is_err(), "{name} to {url}");
        }
        assert_eq!(
            list.permit("NOT_LISTED", "https://x").unwrap_err().to_string(),
            "bad pump request: auth.secret \"NOT_LISTED\" is not on the PUMP_SECRETS allow-list"
        );
    }

    #[test]
    fn credentials_go_in_each_format_s_own_header() {
        assert_eq!(UpstreamFormat::OpenAiResponses.credential_header("k"), ("authorization", "Bearer k".to_owned()));
        assert_eq!(UpstreamFormat::OpenAiChat.credential_header("k"), ("authorization", "Bearer k".to_owned()));
        assert_eq!(UpstreamFormat::Anthropic.credential_header("k"), ("x-api-key", "k".to_owned()));
        assert!(is_credential_header("Authorization") && is_credential_header("X-Api-Key") && is_credential_header("api-key"));
        assert!(!is_credential_header("anthropic-version"));
    }
}
