//! Authorization: which bearer may do what to which stream.
//!
//! The default is an HS256 JWT (claims `sub`, `stream`, `scope`, `exp`) verified by
//! [`super::jwt`]; an embedding Worker can implement [`Authorizer`] instead (it is async, so it
//! may look a session up). Time is an input (`now_secs`), so expiry is checked here rather
//! than by a clock.

use serde::Deserialize;
use std::future::Future;
use std::pin::Pin;
use thiserror::Error;

/// What a request needs to be allowed to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Read,
    Write,
    Cancel,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Cancel => "cancel",
        }
    }
}

/// Who was allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub sub: String,
}

/// Why a request was denied. The HTTP answer is the same `forbidden` for every variant (so a
/// denial never reveals whether a stream exists); the variant is for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Denied {
    #[error("no token was presented")]
    MissingToken,
    #[error("the token could not be verified: {0}")]
    Invalid(String),
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid for this stream")]
    WrongStream,
    #[error("the token lacks the {0:?} scope")]
    MissingScope(Scope),
    #[error("denied: {0}")]
    Custom(String),
}

/// One authorization question.
#[derive(Debug, Clone, Copy)]
pub struct AuthRequest<'a> {
    /// The bearer token (`Authorization: Bearer …`, or `?token=` on read routes).
    pub token: Option<&'a str>,
    pub stream_id: &'a str,
    pub scope: Scope,
    /// Where a reader joins (`Last-Event-ID`, else `?from=`; SPEC §3), on `events` and `ui`;
    /// `None` on every other route.
    pub from: Option<u64>,
    /// The request's headers, names in lower case (cookies, a session header, the origin).
    pub headers: &'a [(String, String)],
    /// The `meta` the stream was opened with, when the stream is here (opening, live or
    /// lingering).
    pub meta: Option<&'a serde_json::Value>,
    pub now_secs: u64,
}

impl AuthRequest<'_> {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// What an authorizer answers with, when it has looked.
pub type AuthFuture<'a> = Pin<Box<dyn Future<Output = Result<Principal, Denied>> + 'a>>;

/// Decides whether a request may proceed. Runs before anything else touches the stream, and
/// before anything could reveal whether it exists; its future is awaited with no state borrowed.
pub trait Authorizer {
    fn authorize<'a>(&'a self, request: &'a AuthRequest<'a>) -> AuthFuture<'a>;
}

#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    stream: String,
    scope: String,
    exp: u64,
}

/// HS256 JWTs signed with the app's secret.
pub struct JwtAuthorizer {
    secret: Vec<u8>,
}

/// A signing secret too short to be one.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("STREAM_JWT_SECRET must be at least {MIN_SECRET_BYTES} bytes (set it with `wrangler secret put STREAM_JWT_SECRET`, or in .dev.vars locally)")]
pub struct WeakSecret;

/// The shortest HS256 secret accepted.
pub const MIN_SECRET_BYTES: usize = 16;

impl JwtAuthorizer {
    pub fn new(secret: &[u8]) -> Result<Self, WeakSecret> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(WeakSecret);
        }
        Ok(Self { secret: secret.to_vec() })
    }

    /// The verdict, at once (the [`Authorizer`] answers with it).
    pub fn check(&self, req: &AuthRequest<'_>) -> Result<Principal, Denied> {
        let token = req.token.filter(|t| !t.is_empty()).ok_or(Denied::MissingToken)?;
        // Only HS256 is accepted (see `jwt`); expiry is checked here against the caller's clock.
        let claims: Claims = super::jwt::verify(token, &self.secret).map_err(|e| Denied::Invalid(e.to_string()))?;
        if claims.exp <= req.now_secs {
            return Err(Denied::Expired);
        }
        if !stream_claim_matches(&claims.stream, req.stream_id) {
            return Err(Denied::WrongStream);
        }
        if !claims.scope.split_ascii_whitespace().any(|s| s == req.scope.as_str()) {
            return Err(Denied::MissingScope(req.scope));
        }
        Ok(Principal { sub: claims.sub })
    }
}

impl Authorizer for JwtAuthorizer {
    fn authorize<'a>(&'a self, request: &'a AuthRequest<'a>) -> AuthFuture<'a> {
        Box::pin(std::future::ready(self.check(request)))
    }
}

/// Signs `claims` as an HS256 JWT (the development session's tokens, and tests).
pub fn mint_hs256(claims: &impl serde::Serialize, secret: &[u8]) -> Result<String, super::jwt::JwtError> {
    super::jwt::sign(claims, secret)
}

/// A `stream` claim is an exact id, or a prefix ending in `*`.
pub fn stream_claim_matches(claim: &str, stream_id: &str) -> bool {
    match claim.strip_suffix('*') {
        Some(prefix) => stream_id.starts_with(prefix),
        None => claim == stream_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SECRET: &[u8] = b"test-secret-0123456789";
    const NOW: u64 = 1_800_000_000;

    fn token(claims: serde_json::Value, secret: &[u8]) -> String {
        mint_hs256(&claims, secret).unwrap()
    }

    fn ask(token: Option<&str>, stream: &str, scope: Scope) -> Result<Principal, Denied> {
        let request = AuthRequest { token, stream_id: stream, scope, from: None, headers: &[], meta: None, now_secs: NOW };
        JwtAuthorizer::new(SECRET).unwrap().check(&request)
    }

    fn claims(stream: &str, scope: &str, exp: u64) -> serde_json::Value {
        json!({"sub": "u1", "stream": stream, "scope": scope, "exp": exp})
    }

    #[test]
    fn a_short_secret_is_refused() {
        assert!(JwtAuthorizer::new(b"short").is_err());
    }

    #[test]
    fn a_valid_token_is_allowed() {
        let t = token(claims("m1", "read write", NOW + 60), SECRET);
        assert_eq!(ask(Some(&t), "m1", Scope::Write), Ok(Principal { sub: "u1".into() }));
    }

    #[test]
    fn prefix_claims_match_by_prefix() {
        let t = token(claims("chat-7:*", "read", NOW + 60), SECRET);
        assert!(ask(Some(&t), "chat-7:m1", Scope::Read).is_ok());
        assert_eq!(ask(Some(&t), "chat-8:m1", Scope::Read), Err(Denied::WrongStream));
    }

    #[test]
    fn every_bad_token_is_denied() {
        assert_eq!(ask(None, "m1", Scope::Read), Err(Denied::MissingToken));
        let wrong_key = token(claims("m1", "read", NOW + 60), b"another-secret-9876543210");
        assert!(matches!(ask(Some(&wrong_key), "m1", Scope::Read), Err(Denied::Invalid(_))));
        let expired = token(claims("m1", "read", NOW - 1), SECRET);
        assert_eq!(ask(Some(&expired), "m1", Scope::Read), Err(Denied::Expired));
        let read_only = token(claims("m1", "read", NOW + 60), SECRET);
        assert_eq!(ask(Some(&read_only), "m1", Scope::Cancel), Err(Denied::MissingScope(Scope::Cancel)));
        assert!(matches!(ask(Some("not.a.jwt"), "m1", Scope::Read), Err(Denied::Invalid(_))));
    }

    #[test]
    fn alg_none_and_other_algorithms_are_refused() {
        use base64_url as b64;
        let body = b64(claims("m1", "read", NOW + 60).to_string());
        let none = format!("{}.{}.", b64(r#"{"alg":"none","typ":"JWT"}"#), body);
        assert!(matches!(ask(Some(&none), "m1", Scope::Read), Err(Denied::Invalid(_))));
        // A genuine HS512 token with the right secret: refused for its algorithm alone.
        use hmac::{Hmac, KeyInit, Mac};
        let signed = format!("{}.{}", b64(r#"{"alg":"HS512","typ":"JWT"}"#), body);
        let mut mac = <Hmac<sha2::Sha512> as KeyInit>::new_from_slice(SECRET).unwrap();
        mac.update(signed.as_bytes());
        let hs512 = format!("{signed}.{}", b64(mac.finalize().into_bytes().as_slice()));
        assert!(matches!(ask(Some(&hs512), "m1", Scope::Read), Err(Denied::Invalid(_))));
    }

    /// Unpadded base64url, enough to hand-build tokens.
    fn base64_url(b: impl AsRef<[u8]>) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let b = b.as_ref();
        let mut out = String::new();
        for chunk in b.chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |acc, (i, &x)| acc | u32::from(x) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }
}
