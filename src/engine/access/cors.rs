//! Cross-origin calls (SPEC §4, "Cross-origin"): which page origins may call the API from a
//! browser (`ALLOWED_ORIGINS`), and the headers that tell the browser so.
//!
//! An allowed origin gets `Access-Control-Allow-Origin: <that origin>` (never `*`) and
//! `Access-Control-Allow-Credentials: true` on every answer, and its preflights (`OPTIONS`) are
//! answered 204. Any other origin gets no CORS header and nothing else changes: its preflight
//! is answered as before (405), so the browser refuses the call. With no setting, only the
//! Worker's own origin can call it from a browser (same-origin calls need no CORS).

use thiserror::Error;

/// The headers a page may read on an answer (beyond the CORS-safelisted ones).
pub const EXPOSED_HEADERS: &str = "x-vercel-ai-ui-message-stream, x-rindle-lease-ms";

/// The request headers a preflight allows when it names none: the token, a JSON body, and an
/// `EventSource`'s reconnect.
const DEFAULT_ALLOWED_HEADERS: &str = "authorization, content-type, last-event-id";

/// How long a browser may keep a preflight's answer.
const PREFLIGHT_MAX_AGE_SECS: u32 = 600;

/// The origins allowed to call the API from a browser.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedOrigins {
    rules: Vec<OriginRule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum OriginRule {
    /// `https://app.example.com` (a non-default port included: `http://127.0.0.1:5173`).
    Exact(String),
    /// `https://*.example.com`: every origin of that scheme (and port) whose host ends in
    /// `.example.com`, at any depth; not `https://example.com` itself.
    Suffix { scheme: String, suffix: String, port: Option<String> },
}

/// An `ALLOWED_ORIGINS` entry the service refuses to start with.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{entry:?} {reason}; write exact origins such as https://app.example.com or http://127.0.0.1:5173, or a suffix pattern such as https://*.example.com, separated by commas")]
pub struct BadOrigin {
    entry: String,
    reason: &'static str,
}

impl AllowedOrigins {
    /// Reads `ALLOWED_ORIGINS`: entries separated by commas or whitespace; empty means none.
    pub fn parse(setting: &str) -> Result<Self, BadOrigin> {
        let rules = setting
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|e| !e.is_empty())
            .map(OriginRule::parse)
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether a request's `Origin` header names an allowed origin.
    pub fn allows(&self, origin: &str) -> bool {
        self.rules.iter().any(|rule| rule.matches(origin))
    }

    /// What a request from `origin` gets (see [`Cors`]). `route_method`: the one method the
    /// path answers (`None`: no route there); `requested`: a preflight's
    /// `Access-Control-Request-Headers`.
    pub fn decide(&self, origin: Option<&str>, method: &str, route_method: Option<&str>, requested: Option<&str>) -> Cors {
        let Some(origin) = origin.filter(|o| self.allows(o)) else { return Cors::None };
        let mut headers = vec![
            ("access-control-allow-origin", origin.to_owned()),
            ("access-control-allow-credentials", "true".to_owned()),
            ("vary", "Origin".to_owned()),
        ];
        match route_method {
            Some(allowed) if method == "OPTIONS" => {
                let methods = if allowed == "GET" { "GET, HEAD" } else { allowed };
                headers.push(("access-control-allow-methods", methods.to_owned()));
                headers.push(("access-control-allow-headers", allowed_headers(requested)));
                headers.push(("access-control-max-age", PREFLIGHT_MAX_AGE_SECS.to_string()));
                Cors::Preflight(headers)
            }
            _ => {
                headers.push(("access-control-expose-headers", EXPOSED_HEADERS.to_owned()));
                Cors::Add(headers)
            }
        }
    }
}

/// What the front Worker does about CORS for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cors {
    /// Not a cross-origin call it allows: nothing (the answer is what it would have been).
    None,
    /// A preflight from an allowed origin: answer 204 with these headers, forward nothing.
    Preflight(Vec<(&'static str, String)>),
    /// A call from an allowed origin: its answer gets these headers.
    Add(Vec<(&'static str, String)>),
}

/// The headers a preflight allows: those it asked for (an allowed origin is trusted with any
/// header, such as an app's own session header for an embedding authorizer), as long as they
/// are header names; otherwise the defaults.
fn allowed_headers(requested: Option<&str>) -> String {
    let is_name = |h: &str| !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    match requested.map(|r| r.split(',').map(str::trim).filter(|h| !h.is_empty()).collect::<Vec<_>>()) {
        Some(names) if !names.is_empty() && names.iter().all(|h| is_name(h)) => names.join(", ").to_ascii_lowercase(),
        _ => DEFAULT_ALLOWED_HEADERS.to_owned(),
    }
}

impl OriginRule {
    fn parse(entry: &str) -> Result<Self, BadOrigin> {
        let bad = |reason| Err(BadOrigin { entry: entry.to_owned(), reason });
        if entry == "*" {
            return bad("would let every site call the API with its tokens and cookies: list the origins instead");
        }
        let Some((scheme, rest)) = entry.split_once("://") else { return bad("has no scheme (http:// or https://)") };
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return bad("is not an http or https origin");
        }
        if rest.contains('/') || rest.contains('?') || rest.contains('#') {
            return bad("has a path: an origin is a scheme, a host and a port, nothing after them (no trailing slash)");
        }
        if rest.contains('@') {
            return bad("has a user name: an origin has none");
        }
        let (host, port) = split_port(rest);
        let port = match port {
            Some(p) if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 5 => return bad("has a bad port"),
            // A browser's Origin leaves out the scheme's default port.
            Some("443") if scheme == "https" => None,
            Some("80") if scheme == "http" => None,
            p => p.map(str::to_owned),
        };
        let host = host.to_ascii_lowercase();
        let host_ok = |h: &str| {
            !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'[' || b == b']' || b == b':')
        };
        if let Some(suffix) = host.strip_prefix("*.") {
            if !host_ok(suffix) || suffix.contains('*') || !suffix.contains('.') && suffix != "localhost" {
                return bad("is not a suffix pattern of a domain (https://*.example.com)");
            }
            return Ok(OriginRule::Suffix { scheme, suffix: format!(".{suffix}"), port });
        }
        if !host_ok(&host) {
            return bad("has a bad host (a wildcard may only be the first label: https://*.example.com)");
        }
        let port = port.map(|p| format!(":{p}")).unwrap_or_default();
        Ok(OriginRule::Exact(format!("{scheme}://{host}{port}")))
    }

    fn matches(&self, origin: &str) -> bool {
        match self {
            OriginRule::Exact(exact) => exact == origin,
            OriginRule::Suffix { scheme, suffix, port } => {
                let Some(rest) = origin.strip_prefix(scheme.as_str()).and_then(|r| r.strip_prefix("://")) else { return false };
                let (host, origin_port) = split_port(rest);
                origin_port == port.as_deref() && host.len() > suffix.len() && host.ends_with(suffix.as_str())
            }
        }
    }
}

/// `host[:port]` (an IPv6 host is bracketed, so its colons are not a port's).
fn split_port(authority: &str) -> (&str, Option<&str>) {
    match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (&authority[..i], Some(&authority[i + 1..])),
        _ => (authority, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(setting: &str) -> AllowedOrigins {
        AllowedOrigins::parse(setting).unwrap()
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        let none = allowed("");
        assert!(none.is_empty());
        assert_eq!(none.decide(Some("https://app.example.com"), "GET", Some("GET"), None), Cors::None);
    }

    #[test]
    fn exact_origins_match_exactly_with_the_default_port_left_out() {
        let a = allowed("https://app.example.com, http://127.0.0.1:5173 HTTPS://Caps.Example.com:443");
        for yes in ["https://app.example.com", "http://127.0.0.1:5173", "https://caps.example.com"] {
            assert!(a.allows(yes), "{yes}");
        }
        for no in [
            "http://app.example.com",
            "https://app.example.com:8443",
            "https://evil-app.example.com",
            "https://app.example.com.evil.com",
            "http://127.0.0.1:5174",
            "null",
            "",
        ] {
            assert!(!a.allows(no), "{no}");
        }
    }

    #[test]
    fn a_suffix_pattern_matches_subdomains_of_that_scheme_and_port_only() {
        let a = allowed("https://*.example.com,http://*.localhost:5173");
        for yes in ["https://app.example.com", "https://a.b.example.com", "http://x.localhost:5173"] {
            assert!(a.allows(yes), "{yes}");
        }
        for no in [
            "https://example.com",
            "http://app.example.com",
            "https://app.example.com:444",
            "https://appexample.com",
            "https://app.example.com.evil.io",
            "http://x.localhost",
        ] {
            assert!(!a.allows(no), "{no}");
        }
    }

    #[test]
    fn bad_entries_are_refused_with_what_is_wrong() {
        for (entry, says) in [
            ("*", "every site"),
            ("app.example.com", "no scheme"),
            ("ftp://example.com", "not an http"),
            ("https://app.example.com/", "has a path"),
            ("https://app.example.com/chat", "has a path"),
            ("https://user@app.example.com", "user name"),
            ("https://app.example.com:x", "bad port"),
            ("https://*.com", "suffix pattern"),
            ("https://a.*.example.com", "bad host"),
            ("https://*", "suffix pattern"),
        ] {
            let e = AllowedOrigins::parse(&format!("https://ok.example.com, {entry}")).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains(entry), "{entry}: {e}");
        }
    }

    #[test]
    fn an_allowed_origin_gets_its_own_origin_back_and_its_preflight_answered() {
        let a = allowed("https://app.example.com");
        let Cors::Add(h) = a.decide(Some("https://app.example.com"), "GET", Some("GET"), None) else { panic!() };
        assert!(h.contains(&("access-control-allow-origin", "https://app.example.com".into())));
        assert!(h.contains(&("access-control-allow-credentials", "true".into())));
        assert!(h.contains(&("vary", "Origin".into())));
        assert!(h.iter().any(|(n, v)| *n == "access-control-expose-headers" && v.contains("x-vercel-ai-ui-message-stream")));

        let Cors::Preflight(h) = a.decide(Some("https://app.example.com"), "OPTIONS", Some("POST"), Some("Authorization, Content-Type"))
        else {
            panic!()
        };
        assert!(h.contains(&("access-control-allow-methods", "POST".into())));
        assert!(h.contains(&("access-control-allow-headers", "authorization, content-type".into())));
        let Cors::Preflight(h) = a.decide(Some("https://app.example.com"), "OPTIONS", Some("GET"), Some("x\r\ny")) else { panic!() };
        assert!(h.contains(&("access-control-allow-headers", DEFAULT_ALLOWED_HEADERS.into())), "a malformed ask gets the defaults");
        assert!(h.contains(&("access-control-allow-methods", "GET, HEAD".into())));

        assert_eq!(a.decide(Some("https://other.example.com"), "OPTIONS", Some("POST"), None), Cors::None, "nothing changes");
        assert_eq!(a.decide(None, "POST", Some("POST"), None), Cors::None);
        assert!(matches!(a.decide(Some("https://app.example.com"), "OPTIONS", None, None), Cors::Add(_)), "no route: no preflight");
    }
}
