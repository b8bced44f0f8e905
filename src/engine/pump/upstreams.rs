//! Where a pump may go: `PUMP_UPSTREAMS`, an allow-list of upstream URL prefixes, each an
//! origin and a path prefix (`https://api.openai.com/v1/`).
//!
//! Any producer with write scope chooses the pump's URL; without the list, the object would
//! fetch whatever it is told (an internal address, a metadata service) and stream the answer to
//! readers. So a URL is fetched only when a listed prefix covers it, and its path may not hide a
//! different one: dot segments (`/v1/../admin`, which fetch resolves before sending),
//! percent-encoded dots, slashes and backslashes, and backslashes are refused outright. An
//! empty list refuses every pump in the production build; the dev build, with none listed,
//! goes to loopback only (the local mock model: `scripts/run.sh`, the tests). Redirects are
//! never followed (the shell fetches with `redirect: "manual"` and takes a 3xx for a failure).

use super::BadPump;
use thiserror::Error;

/// The build a setting is read for: some defaults differ in development.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    /// The production build (`scripts/build.sh`), what `wrangler deploy` bundles.
    Production,
    /// The dev build (`scripts/build.sh --dev`, the `dev` feature), served by `wrangler dev`.
    Development,
}

/// An http(s) URL split into its origin (`scheme://host[:port]`, lowercase, the scheme's
/// default port left out) and its path (from the first `/`, without query or fragment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl {
    origin: String,
    host: String,
    path: String,
}

/// Why a URL cannot name an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum BadUrl {
    #[error("it is not an http(s) URL")]
    Scheme,
    #[error("it has no host, or a user name or password before it")]
    Authority,
    #[error("its path holds a dot segment, a backslash, or a percent-encoded dot, slash or backslash")]
    Path,
}

impl UpstreamUrl {
    pub fn parse(url: &str) -> Result<Self, BadUrl> {
        let (scheme, rest) = url.split_once("://").ok_or(BadUrl::Scheme)?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => ":80",
            "https" => ":443",
            _ => return Err(BadUrl::Scheme),
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, after) = rest.split_at(end);
        if authority.is_empty() || authority.contains(['@', '\\']) {
            return Err(BadUrl::Authority);
        }
        let authority = authority.to_ascii_lowercase();
        let authority = authority.strip_suffix(default_port).unwrap_or(&authority);
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => authority.split(':').next().unwrap_or_default(),
        };
        let path = match after.find(['?', '#']) {
            Some(at) => &after[..at],
            None => after,
        };
        let lower = path.to_ascii_lowercase();
        let hides_a_path = path.contains('\\')
            || ["%2e", "%2f", "%5c"].iter().any(|e| lower.contains(e))
            || path.split('/').any(|s| s == "." || s == "..");
        if host.is_empty() || hides_a_path {
            return Err(if host.is_empty() { BadUrl::Authority } else { BadUrl::Path });
        }
        Ok(Self {
            origin: format!("{scheme}://{authority}"),
            host: host.to_owned(),
            path: if path.is_empty() { "/".into() } else { path.into() },
        })
    }

    /// `scheme://host[:port]`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    fn is_loopback(&self) -> bool {
        matches!(self.host.as_str(), "127.0.0.1" | "localhost" | "::1")
    }
}

/// One entry of an allow-list: an origin and a path prefix, matched at a segment boundary
/// (`/v1` covers `/v1` and `/v1/…`, not `/v10`; `/v1/` covers only `/v1/…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamPrefix(UpstreamUrl);

impl UpstreamPrefix {
    /// An http(s) URL with no query or fragment.
    pub fn parse(raw: &str) -> Option<Self> {
        let url = UpstreamUrl::parse(raw.trim()).ok()?;
        (!raw.contains(['?', '#'])).then_some(Self(url))
    }

    pub fn covers(&self, url: &UpstreamUrl) -> bool {
        let prefix = &self.0.path;
        self.0.origin == url.origin
            && (prefix == "/"
                || url.path == *prefix
                || (url.path.starts_with(prefix.as_str()) && (prefix.ends_with('/') || url.path[prefix.len()..].starts_with('/'))))
    }

    /// Whether every URL this prefix covers is covered by `other` too.
    pub fn within(&self, other: &UpstreamPrefix) -> bool {
        other.covers(&self.0)
    }

    pub fn as_url(&self) -> &UpstreamUrl {
        &self.0
    }
}

impl std::fmt::Display for UpstreamPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.0.origin, self.0.path)
    }
}

/// The upstreams pumps may fetch (`PUMP_UPSTREAMS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PumpUpstreams {
    /// These prefixes, and nothing else.
    Listed(Vec<UpstreamPrefix>),
    /// None listed, in the production build: every pump is refused.
    None,
    /// None listed, in the dev build: loopback hosts only (`127.0.0.1`, `localhost`, `[::1]`),
    /// any port and path: the local mock model.
    Loopback,
}

/// Why `PUMP_UPSTREAMS` was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("entry {0:?} is not an http(s) URL prefix like https://api.openai.com/v1/ (no user name, query, dot segments or encoded slashes)")]
pub struct UpstreamsError(pub String);

impl PumpUpstreams {
    /// Parses the list: entries separated by commas or whitespace.
    pub fn parse(raw: &str, build: Build) -> Result<Self, UpstreamsError> {
        let listed = raw
            .split([',', ' ', '\t', '\n'])
            .filter(|e| !e.is_empty())
            .map(|e| UpstreamPrefix::parse(e).ok_or_else(|| UpstreamsError(e.to_owned())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(match (listed.is_empty(), build) {
            (false, _) => PumpUpstreams::Listed(listed),
            (true, Build::Production) => PumpUpstreams::None,
            (true, Build::Development) => PumpUpstreams::Loopback,
        })
    }

    /// Whether a pump may fetch `url`.
    pub fn permit(&self, url: &str) -> Result<UpstreamUrl, BadPump> {
        let parsed = UpstreamUrl::parse(url).map_err(|e| BadPump(format!("url {:?}: {e}", redacted(url))))?;
        let allowed = match self {
            PumpUpstreams::Listed(prefixes) => prefixes.iter().any(|p| p.covers(&parsed)),
            PumpUpstreams::None => return Err(BadPump("pumps are off: PUMP_UPSTREAMS lists no upstream".into())),
            PumpUpstreams::Loopback => parsed.is_loopback(),
        };
        if allowed {
            Ok(parsed)
        } else {
            Err(BadPump(format!("url {:?} is not on the PUMP_UPSTREAMS allow-list", redacted(url))))
        }
    }

    /// Whether a secret pinned to `pin` goes only where pumps may go.
    pub fn allows_pin(&self, pin: &UpstreamPrefix) -> bool {
        match self {
            PumpUpstreams::Listed(prefixes) => prefixes.iter().any(|p| pin.within(p)),
            PumpUpstreams::None => false,
            PumpUpstreams::Loopback => pin.as_url().is_loopback(),
        }
    }
}

/// A URL without its query or fragment (which may carry a key), and short, for messages.
fn redacted(url: &str) -> &str {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    super::upstream::truncate(&url[..end], 120)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(raw: &str) -> PumpUpstreams {
        PumpUpstreams::parse(raw, Build::Production).unwrap()
    }

    #[test]
    fn a_url_is_allowed_only_under_a_listed_origin_and_path_prefix() {
        let list = listed("https://api.openai.com/v1/, https://API.anthropic.com/v1/messages");
        for ok in [
            "https://api.openai.com/v1/chat/completions",
            "https://api.openai.com:443/v1/responses?stream=true",
            "HTTPS://Api.OpenAI.com/v1/responses/resp_1",
            "https://api.anthropic.com/v1/messages",
            "https://api.anthropic.com/v1/messages/batches",
        ] {
            assert!(list.permit(ok).is_ok(), "{ok}");
        }
        for refused in [
            "https://api.openai.com/v2/chat",
            "https://api.openai.com/v1",
            "https://api.openai.com/",
            "http://api.openai.com/v1/chat/completions",
            "https://api.openai.com:8443/v1/chat",
            "https://api.openai.com.evil.example/v1/chat",
            "https://evil.example/v1/chat",
            "https://api.openai.com@evil.example/v1/chat",
            "https://api.anthropic.com/v1/messagesX",
            "https://api.anthropic.com/v1/messages2/x",
            "https://api.openai.com/v1/../admin",
            "https://api.openai.com/v1/./chat",
            "https://api.openai.com/v1/%2e%2e/admin",
            "https://api.openai.com/v1/%2E%2E/admin",
            "https://api.openai.com/v1/a%2Fb",
            "https://api.openai.com/v1\\..\\admin",
            "http://127.0.0.1:8788/v1/chat/completions",
            "http://169.254.169.254/latest/meta-data/",
            "ftp://api.openai.com/v1/",
            "not a url",
        ] {
            assert!(list.permit(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn with_none_listed_production_refuses_every_pump_and_development_goes_to_loopback_only() {
        let prod = PumpUpstreams::parse(" ", Build::Production).unwrap();
        assert_eq!(prod, PumpUpstreams::None);
        assert_eq!(prod.permit("https://api.openai.com/v1/responses").unwrap_err().0, "pumps are off: PUMP_UPSTREAMS lists no upstream");
        let dev = PumpUpstreams::parse("", Build::Development).unwrap();
        for ok in ["http://127.0.0.1:8788/v1/responses", "http://localhost:1/x", "http://[::1]:9/v1"] {
            assert!(dev.permit(ok).is_ok(), "{ok}");
        }
        for refused in ["https://api.openai.com/v1/responses", "http://127.0.0.2/x", "http://10.0.0.1/x", "http://127.0.0.1:8788/../x"] {
            assert!(dev.permit(refused).is_err(), "{refused}");
        }
        assert_eq!(
            PumpUpstreams::parse("http://127.0.0.1:9/v1/", Build::Development).unwrap(),
            listed("http://127.0.0.1:9/v1/"),
            "a list wins"
        );
    }

    #[test]
    fn entries_must_be_plain_url_prefixes() {
        for bad in ["api.openai.com", "https://", "https://u:p@x/", "https://x/v1?y", "https://x/#f", "https://x/../y", "file:///etc"] {
            assert!(PumpUpstreams::parse(bad, Build::Production).is_err(), "{bad}");
        }
        assert_eq!(listed("https://x").permit("https://x/anything").map(|_| ()), Ok(()), "an origin alone covers every path");
    }

    #[test]
    fn a_pin_is_allowed_only_within_a_listed_prefix() {
        let list = listed("https://api.openai.com/v1/");
        let pin = |raw| UpstreamPrefix::parse(raw).unwrap();
        assert!(list.allows_pin(&pin("https://api.openai.com/v1/")));
        assert!(list.allows_pin(&pin("https://api.openai.com/v1/responses")));
        assert!(!list.allows_pin(&pin("https://api.openai.com")), "the whole origin is more than the list allows");
        assert!(!list.allows_pin(&pin("https://api.anthropic.com/v1/")));
        assert!(!PumpUpstreams::None.allows_pin(&pin("https://api.openai.com/v1/")));
        assert!(PumpUpstreams::Loopback.allows_pin(&pin("http://127.0.0.1:8788")));
    }
}
