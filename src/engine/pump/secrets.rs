//! The credentials a pump may send upstream, named on an allow-list (`PUMP_SECRETS`).
//!
//! A pump request names a Worker secret (`{"auth": {"secret": "OPENAI_API_KEY"}}`) instead of
//! carrying a key; the shell reads the secret's value from the environment at each upstream
//! call and sends it as the upstream format's credential header
//! ([`UpstreamFormat::credential_header`]). So the key is in no request body, no storage and no
//! log, and a background pump can re-attach after a reset with nothing but the name it stored.
//!
//! An entry is `NAME=PREFIX` (or, in the dev build only, `NAME`). A pinned secret goes only to
//! URLs under that prefix, an origin and a path prefix (`OPENAI_API_KEY=https://api.openai.com/v1/`),
//! which must lie within an upstream `PUMP_UPSTREAMS` allows ([`super::upstreams`]): any producer
//! with write scope chooses the pump's URL, and without the pin could send the key to another
//! allowed upstream. The production build refuses an unpinned name; the dev build lets one go
//! wherever its pumps may (loopback unless listed), for a local mock.

use super::upstream::UpstreamFormat;
use super::upstreams::{Build, PumpUpstreams, UpstreamPrefix, UpstreamUrl};
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
    /// The URLs it may go to; `None`: wherever pumps may (the dev build only).
    pin: Option<UpstreamPrefix>,
}

/// Why `PUMP_SECRETS` was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SecretsError {
    #[error("entry {0:?} is not NAME=http(s)://host[:port][/path] (a name is letters, digits and '_', not starting with a digit)")]
    Malformed(String),
    #[error("{0} is not pinned to an upstream (NAME=https://host/path/): the production build sends a secret only where it is pinned")]
    Unpinned(String),
    #[error("{name} is pinned to {pin}, which PUMP_UPSTREAMS does not allow (a pin lies within an allowed upstream)")]
    PinNotAllowed { name: String, pin: String },
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
            let (name, pin) = match entry.split_once('=') {
                Some((name, pin)) => (name, Some(UpstreamPrefix::parse(pin).ok_or_else(|| SecretsError::Malformed(entry.to_owned()))?)),
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
            grants.push(Grant { name: name.to_owned(), pin });
        }
        Ok(PumpSecrets { grants })
    }

    /// Refuses a list whose secrets could go where pumps may not: an unpinned name in the
    /// production build, a pin outside `upstreams`.
    pub fn check(&self, upstreams: &PumpUpstreams, build: Build) -> Result<(), SecretsError> {
        for grant in &self.grants {
            match &grant.pin {
                None if build == Build::Production => return Err(SecretsError::Unpinned(grant.name.clone())),
                None => {}
                Some(pin) if !upstreams.allows_pin(pin) => {
                    return Err(SecretsError::PinNotAllowed { name: grant.name.clone(), pin: pin.to_string() })
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The secrets listed (the service checks at start that each is set).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.grants.iter().map(|g| g.name.as_str())
    }

    /// Whether a pump to `url` (one [`PumpUpstreams::permit`] allowed) may send the secret `name`.
    pub fn permit(&self, name: &str, url: &UpstreamUrl) -> Result<(), BadPump> {
        let grant = self.grants.iter().find(|g| g.name == name).ok_or_else(|| {
            BadPump(format!("auth.secret {:?} is not on the PUMP_SECRETS allow-list", super::upstream::truncate(name, 64)))
        })?;
        match &grant.pin {
            None => Ok(()),
            Some(pin) if pin.covers(url) => Ok(()),
            Some(pin) => Err(BadPump(format!("auth.secret {name} may be sent only to {pin}"))),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn url(raw: &str) -> UpstreamUrl {
        UpstreamUrl::parse(raw).unwrap()
    }

    #[test]
    fn the_allow_list_parses_names_and_pinned_prefixes() {
        let list =
            PumpSecrets::parse("OPENAI_API_KEY=https://API.openai.com/v1/, ANTHROPIC_API_KEY=https://api.anthropic.com\tDEV_KEY").unwrap();
        assert_eq!(list.names().collect::<Vec<_>>(), ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEV_KEY"]);
        assert_eq!(PumpSecrets::parse("").unwrap(), PumpSecrets::default());
        assert_eq!(PumpSecrets::parse(" , ").unwrap(), PumpSecrets::default());
        for bad in ["1KEY", "KEY-X", "KEY=ftp://x", "KEY=https://x/v1?q", "KEY=https://u@x", "KEY=", "=https://x", "KEY=https://x/../y"] {
            assert!(matches!(PumpSecrets::parse(bad), Err(SecretsError::Malformed(_))), "{bad}");
        }
        assert_eq!(PumpSecrets::parse("STREAM_JWT_SECRET"), Err(SecretsError::Reserved));
        assert_eq!(PumpSecrets::parse("A,A=https://x"), Err(SecretsError::Duplicate("A".into())));
    }

    #[test]
    fn a_secret_is_permitted_only_when_listed_and_only_under_its_pin() {
        let list = PumpSecrets::parse("OPENAI_API_KEY=https://api.openai.com/v1/,WHOLE=https://api.openai.com,DEV_KEY").unwrap();
        assert_eq!(list.permit("OPENAI_API_KEY", &url("https://api.openai.com/v1/responses")), Ok(()));
        assert_eq!(list.permit("OPENAI_API_KEY", &url("HTTPS://Api.OpenAI.com/v1/x?y=1")), Ok(()));
        assert_eq!(list.permit("WHOLE", &url("https://api.openai.com/anything")), Ok(()), "an origin alone pins every path");
        assert_eq!(
            list.permit("DEV_KEY", &url("http://127.0.0.1:9/v1/responses")),
            Ok(()),
            "an unpinned name (dev build) goes where pumps may"
        );
        for (name, to) in [
            ("OPENAI_API_KEY", "https://api.openai.com/v2/responses"),
            ("OPENAI_API_KEY", "https://api.openai.com/"),
            ("OPENAI_API_KEY", "https://evil.example/v1/responses"),
            ("OPENAI_API_KEY", "https://api.openai.com.evil.example/v1/x"),
            ("OPENAI_API_KEY", "http://api.openai.com/v1/responses"),
            ("OPENAI_API_KEY", "https://api.openai.com:8443/v1/responses"),
            ("STREAM_JWT_SECRET", "https://api.openai.com/v1/x"),
            ("NOT_LISTED", "https://api.openai.com/v1/x"),
        ] {
            assert!(list.permit(name, &url(to)).is_err(), "{name} to {to}");
        }
        assert_eq!(
            list.permit("NOT_LISTED", &url("https://x")).unwrap_err().to_string(),
            "bad pump request: auth.secret \"NOT_LISTED\" is not on the PUMP_SECRETS allow-list"
        );
    }

    #[test]
    fn the_production_build_refuses_an_unpinned_secret_and_every_pin_lies_within_an_allowed_upstream() {
        let upstreams = PumpUpstreams::parse("https://api.openai.com/v1/", Build::Production).unwrap();
        let check = |raw: &str, build| PumpSecrets::parse(raw).unwrap().check(&upstreams, build);
        assert_eq!(check("K=https://api.openai.com/v1/responses", Build::Production), Ok(()));
        assert_eq!(check("K", Build::Production), Err(SecretsError::Unpinned("K".into())));
        assert_eq!(check("K", Build::Development), Ok(()));
        assert_eq!(
            check("K=https://api.openai.com", Build::Development),
            Err(SecretsError::PinNotAllowed { name: "K".into(), pin: "https://api.openai.com/".into() })
        );
        assert!(check("K=https://api.anthropic.com/v1/", Build::Production).is_err());
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
