//! Authorization: which bearer may do what to which stream.
//!
//! The default is an HS256 JWT (claims `sub`, `stream` and/or `chat`, `scope`, `exp`, and
//! optionally `nbf`, `iat`, `aud`) verified by [`crate::engine::access::jwt`]; an embedding Worker
//! can implement [`Authorizer`] instead (it is async, so it may look a session up). Time is an
//! input (`now_secs`), so expiry is checked here rather than by a clock.
//!
//! **Where it runs.** An authorizer that needs no state of the stream ([`Authorizer::reads_meta`]
//! false: the JWT check, and any custom one by default) runs in the front Worker, before any
//! Durable Object is reached: a denied request is answered there at once, its body is never
//! read, and it creates no object. One that reads the stream's `meta` runs in the stream's
//! object, where the meta is.

use crate::engine::text::utf16::Offset;
use serde::Deserialize;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
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
    #[error("the token is not valid yet (its nbf is in the future)")]
    NotYetValid,
    #[error("the token lives {lifetime} s, longer than the {max} s allowed (STREAM_JWT_MAX_LIFETIME_SECS)")]
    TooLong { lifetime: u64, max: u64 },
    #[error("the token is not for this service's audience (STREAM_JWT_AUDIENCE)")]
    WrongAudience,
    #[error("a token in the URL (?token=) may only read and cancel; this one may write")]
    WriteTokenInQuery,
    #[error("the token is not valid for this stream")]
    WrongStream,
    #[error("the stream is not of the chat the request names")]
    NotInChat,
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
    /// The token came from the URL (`?token=`), which ends up in logs and browser history: the
    /// JWT check accepts only tokens that cannot write there.
    pub token_in_query: bool,
    /// The stream; empty on a chat lookup (`GET {prefix}/chats/{chat}/stream`), which runs
    /// before the chat's answer is known.
    pub stream_id: &'a str,
    /// The chat a read names: on a chat lookup, and on the read of the answer it found. The
    /// service has checked that `stream_id` (when not empty) belongs to that chat.
    pub chat: Option<&'a str>,
    pub scope: Scope,
    /// Where a reader joins (`Last-Event-ID`, else `?from=`; SPEC §3), on `events` and `ui`;
    /// `None` on every other route.
    pub from: Option<Offset>,
    /// The request's headers, names in lower case (cookies, a session header, the origin);
    /// empty for an authorizer that says it reads none ([`Authorizer::reads_headers`]).
    pub headers: &'a [(String, String)],
    /// The `meta` the stream was opened with, when the stream is here (opening, live or
    /// lingering), for an authorizer that [reads it](Authorizer::reads_meta); `None` in the front
    /// Worker.
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

    /// Whether it reads [`AuthRequest::headers`]. When it does not, they are not collected:
    /// reading every header across the JavaScript boundary was a third of the boundary
    /// crossings of a plain append.
    fn reads_headers(&self) -> bool {
        true
    }

    /// Whether it reads [`AuthRequest::meta`], the stream's state: then it runs in the stream's
    /// object (a denied request reaches the object, which answers it). When it does not (the
    /// default), it runs in the front Worker and a denied request never reaches an object.
    fn reads_meta(&self) -> bool {
        false
    }

    /// When the credential of an allowed `request` expires (Unix seconds), if it does: a reader's
    /// connection (a stream's `/events` and `/ui`, a chat's feed) ends then, and its client
    /// reconnects with a fresh one (SPEC §11: no connection outlives its token). `None` (the
    /// default): the connection lasts as long as the client keeps it.
    fn expires_at(&self, request: &AuthRequest<'_>) -> Option<u64> {
        let _ = request;
        None
    }
}

#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    /// An exact stream id, or a prefix ending in `*`.
    #[serde(default)]
    stream: Option<String>,
    /// An exact chat id, or a prefix ending in `*`: reads of the chat's answers (with a mapped
    /// chat column), such as the stock AI SDK transport's resume GET for that chat.
    #[serde(default)]
    chat: Option<String>,
    scope: String,
    exp: u64,
    /// Not before (RFC 7519 §4.1.5).
    #[serde(default)]
    nbf: Option<u64>,
    /// Issued at: with `exp`, the lifetime the token was minted with.
    #[serde(default)]
    iat: Option<u64>,
    /// The audiences the token is for: one, or a list (RFC 7519 §4.1.3).
    #[serde(default)]
    aud: Option<Audience>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Audience {
    fn names(&self, audience: &str) -> bool {
        match self {
            Audience::One(a) => a == audience,
            Audience::Many(all) => all.iter().any(|a| a == audience),
        }
    }
}

/// What the JWT check requires of a token beyond its signature, stream and scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtPolicy {
    /// The `aud` a token must name (`STREAM_JWT_AUDIENCE`); `None`: `aud` is not checked.
    pub audience: Option<String>,
    /// The longest a token may live, in seconds (`STREAM_JWT_MAX_LIFETIME_SECS`): from its
    /// `iat` (or now, when it has none, or when `iat` is later) to its `exp`. A leaked token is
    /// good for at most this long.
    pub max_lifetime_secs: u64,
}

/// The default maximum lifetime: a day. The longest-lived tokens the project's own flows mint
/// are a page's read token and the development session's (an hour, `mint-token.mjs`'s and
/// `/dev/session`'s default); a producer's must outlive one answer (minutes, at most
/// `IDLE_TIMEOUT_MS` between writes). A day leaves room for a page open all day, and bounds
/// what a leaked token is good for (docs/SECURITY.md).
pub const DEFAULT_MAX_LIFETIME_SECS: u64 = 86_400;

impl Default for JwtPolicy {
    fn default() -> Self {
        Self { audience: None, max_lifetime_secs: DEFAULT_MAX_LIFETIME_SECS }
    }
}

/// The secrets a [`JwtAuthorizer`] verifies with.
#[derive(Debug, Clone, Copy)]
pub struct JwtSecrets<'a> {
    /// `STREAM_JWT_SECRET`: verifies, and signs what this service mints.
    pub current: &'a [u8],
    /// `STREAM_JWT_SECRET_PREVIOUS`, during a rotation: tokens signed with it are still
    /// accepted, so producers running with them are not cut off.
    pub previous: Option<&'a [u8]>,
    /// Whether this is a development deployment (the dev build with `DEV_MODE=1`), where the
    /// example secret of `.dev.vars.example` is accepted.
    pub development: bool,
}

/// How many verified tokens a [`JwtAuthorizer`] remembers.
const VERIFIED_TOKENS: usize = 32;

/// A token's cache key: its SHA-256. A lookup compares digests, never the token itself, so
/// how long a comparison takes says nothing about a valid token's bytes.
type TokenKey = [u8; 32];

fn token_key(token: &str) -> TokenKey {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// HS256 JWTs signed with the app's secret.
///
/// A producer presents the same token on every append, so the signature check and the claims'
/// decoding of a token are done once and remembered (the most recent `VERIFIED_TOKENS` (32),
/// keyed by the token's SHA-256, signature included); what depends on the request (expiry,
/// `nbf` and the lifetime against the caller's clock, the audience, the stream, the scope,
/// where the token came from) is checked every time.
pub struct JwtAuthorizer {
    secret: Vec<u8>,
    previous: Option<Vec<u8>>,
    policy: JwtPolicy,
    /// Verified tokens and their claims, most recently used last.
    verified: RefCell<VecDeque<(TokenKey, Rc<Claims>)>>,
    /// Signature checks done (for tests: a remembered token is not checked again).
    verifications: Cell<u64>,
}

/// A signing secret the service refuses to start with.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BadSecret {
    #[error("{0} must be at least {MIN_SECRET_BYTES} bytes (set it with `wrangler secret put {0}`, or in .dev.vars locally)")]
    TooShort(&'static str),
    #[error(
        "{0} is the example secret of .dev.vars.example, accepted only in development (the dev build with DEV_MODE=1): set a random one with `wrangler secret put {0}`"
    )]
    Example(&'static str),
}

impl BadSecret {
    /// The secret at fault.
    pub fn name(&self) -> &'static str {
        match self {
            BadSecret::TooShort(name) | BadSecret::Example(name) => name,
        }
    }
}

/// The shortest HS256 secret accepted.
pub const MIN_SECRET_BYTES: usize = 16;

/// The example secret of `.dev.vars.example`: public, so refused outside development.
pub const EXAMPLE_SECRET: &[u8] = b"dev-secret-change-me";

impl JwtAuthorizer {
    /// One secret, the default policy, outside development.
    pub fn new(secret: &[u8]) -> Result<Self, BadSecret> {
        Self::with(JwtSecrets { current: secret, previous: None, development: false }, JwtPolicy::default())
    }

    pub fn with(secrets: JwtSecrets<'_>, policy: JwtPolicy) -> Result<Self, BadSecret> {
        let check = |secret: &[u8], name: &'static str| {
            if secret.len() < MIN_SECRET_BYTES {
                Err(BadSecret::TooShort(name))
            } else if secret == EXAMPLE_SECRET && !secrets.development {
                Err(BadSecret::Example(name))
            } else {
                Ok(secret.to_vec())
            }
        };
        Ok(Self {
            secret: check(secrets.current, "STREAM_JWT_SECRET")?,
            previous: secrets.previous.map(|p| check(p, "STREAM_JWT_SECRET_PREVIOUS")).transpose()?,
            policy,
            verified: RefCell::default(),
            verifications: Cell::new(0),
        })
    }

    /// The claims of a token whose signature is valid (with the current secret, else the
    /// previous one), checking it only the first time. Only HS256 is accepted (see `jwt`).
    fn verified_claims(&self, token: &str) -> Result<Rc<Claims>, Denied> {
        use crate::engine::access::jwt::{verify, JwtError};
        let key = token_key(token);
        let mut verified = self.verified.borrow_mut();
        if let Some(at) = verified.iter().rposition(|(k, _)| *k == key) {
            let entry = verified.remove(at).expect("the position was just found");
            let claims = Rc::clone(&entry.1);
            verified.push_back(entry);
            return Ok(claims);
        }
        self.verifications.set(self.verifications.get() + 1);
        let claims = match (verify(token, &self.secret), &self.previous) {
            (Err(JwtError::Signature), Some(previous)) => verify(token, previous),
            (verdict, _) => verdict,
        };
        let claims: Rc<Claims> = Rc::new(claims.map_err(|e| Denied::Invalid(e.to_string()))?);
        if verified.len() == VERIFIED_TOKENS {
            verified.pop_front();
        }
        verified.push_back((key, Rc::clone(&claims)));
        Ok(claims)
    }

    /// The verdict, at once (the [`Authorizer`] answers with it).
    pub fn check(&self, req: &AuthRequest<'_>) -> Result<Principal, Denied> {
        let token = req.token.filter(|t| !t.is_empty()).ok_or(Denied::MissingToken)?;
        // Times are checked here against the caller's clock.
        let claims = self.verified_claims(token)?;
        let now = req.now_secs;
        if claims.exp <= now {
            return Err(Denied::Expired);
        }
        if claims.nbf.is_some_and(|nbf| nbf > now) {
            return Err(Denied::NotYetValid);
        }
        // From when it was issued, or from now when it says nothing (or a later time).
        let lifetime = claims.exp - claims.iat.map_or(now, |iat| iat.min(now));
        if lifetime > self.policy.max_lifetime_secs {
            return Err(Denied::TooLong { lifetime, max: self.policy.max_lifetime_secs });
        }
        if let Some(audience) = &self.policy.audience {
            if !claims.aud.as_ref().is_some_and(|aud| aud.names(audience)) {
                return Err(Denied::WrongAudience);
            }
        }
        let scopes = || claims.scope.split_ascii_whitespace();
        if req.token_in_query && scopes().any(|s| s == Scope::Write.as_str()) {
            return Err(Denied::WriteTokenInQuery);
        }
        let stream_ok = claims.stream.as_deref().is_some_and(|claim| stream_claim_matches(claim, req.stream_id));
        let chat_ok = match (claims.chat.as_deref(), req.chat) {
            (Some(claim), Some(chat)) => req.scope == Scope::Read && stream_claim_matches(claim, chat),
            _ => false,
        };
        if !stream_ok && !chat_ok {
            return Err(Denied::WrongStream);
        }
        if !scopes().any(|s| s == req.scope.as_str()) {
            return Err(Denied::MissingScope(req.scope));
        }
        Ok(Principal { sub: claims.sub.clone() })
    }
}

impl Authorizer for JwtAuthorizer {
    fn authorize<'a>(&'a self, request: &'a AuthRequest<'a>) -> AuthFuture<'a> {
        Box::pin(std::future::ready(self.check(request)))
    }

    /// A JWT is all it looks at.
    fn reads_headers(&self) -> bool {
        false
    }

    /// The token's `exp`.
    fn expires_at(&self, request: &AuthRequest<'_>) -> Option<u64> {
        let token = request.token.filter(|t| !t.is_empty())?;
        self.verified_claims(token).ok().map(|claims| claims.exp)
    }
}

/// Signs `claims` as an HS256 JWT (the development session's tokens, and tests).
pub fn mint_hs256(claims: &impl serde::Serialize, secret: &[u8]) -> Result<String, crate::engine::access::jwt::JwtError> {
    crate::engine::access::jwt::sign(claims, secret)
}

/// A `stream` claim is an exact id, or a prefix ending in `*`. An empty claim names nothing (a
/// chat's lookup asks with an empty stream id: it would match every chat).
pub fn stream_claim_matches(claim: &str, stream_id: &str) -> bool {
    if claim.is_empty() {
        return false;
    }
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

    /// A request with a header token (`token_in_query`: false), no offset, headers or meta.
    fn request<'a>(token: Option<&'a str>, stream: &'a str, chat: Option<&'a str>, scope: Scope, now_secs: u64) -> AuthRequest<'a> {
        AuthRequest { token, token_in_query: false, stream_id: stream, chat, scope, from: None, headers: &[], meta: None, now_secs }
    }

    fn ask(token: Option<&str>, stream: &str, scope: Scope) -> Result<Principal, Denied> {
        JwtAuthorizer::new(SECRET).unwrap().check(&request(token, stream, None, scope, NOW))
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
    fn a_chat_claim_allows_reads_of_that_chats_answers_and_nothing_else() {
        let auth = JwtAuthorizer::new(SECRET).unwrap();
        let t = token(json!({"sub": "u1", "chat": "c1", "scope": "read cancel", "exp": NOW + 60}), SECRET);
        let ask = |stream: &'static str, chat: Option<&'static str>, scope| auth.check(&request(Some(&t), stream, chat, scope, NOW));
        assert!(ask("", Some("c1"), Scope::Read).is_ok(), "the lookup");
        assert!(ask("a-1", Some("c1"), Scope::Read).is_ok(), "the answer it found");
        assert_eq!(ask("", Some("c2"), Scope::Read), Err(Denied::WrongStream));
        assert_eq!(ask("a-1", None, Scope::Read), Err(Denied::WrongStream), "no stream claim: only through its chat");
        assert_eq!(ask("a-1", Some("c1"), Scope::Cancel), Err(Denied::WrongStream), "reads only");
        let any = token(claims("*", "read", NOW + 60), SECRET);
        let lookup = AuthRequest {
            token: Some(&any),
            token_in_query: false,
            stream_id: "",
            chat: Some("c9"),
            scope: Scope::Read,
            from: None,
            headers: &[],
            meta: None,
            now_secs: NOW,
        };
        assert!(auth.check(&lookup).is_ok(), "a token for every stream reads every chat");
        let m1 = token(claims("m1", "read", NOW + 60), SECRET);
        assert_eq!(
            auth.check(&AuthRequest { token: Some(&m1), ..lookup }),
            Err(Denied::WrongStream),
            "an exact stream claim is not a chat's"
        );
    }

    #[test]
    fn an_empty_stream_or_chat_claim_reads_nothing() {
        let auth = JwtAuthorizer::new(SECRET).unwrap();
        for claim in [json!({"stream": ""}), json!({"chat": ""}), json!({"stream": "", "chat": ""})] {
            let mut claims = json!({"sub": "u1", "scope": "read", "exp": NOW + 60});
            claims.as_object_mut().unwrap().extend(claim.as_object().unwrap().clone());
            let t = token(claims.clone(), SECRET);
            // A chat's lookup and its feed are asked with an empty stream id.
            let lookup = request(Some(&t), "", Some("c9"), Scope::Read, NOW);
            assert_eq!(auth.check(&lookup), Err(Denied::WrongStream), "{claims}: not every chat");
            assert_eq!(auth.check(&request(Some(&t), "m1", None, Scope::Read, NOW)), Err(Denied::WrongStream), "{claims}: no stream");
        }
    }

    #[test]
    fn a_reader_learns_when_its_token_expires() {
        let auth = JwtAuthorizer::new(SECRET).unwrap();
        let t = token(claims("m1", "read", NOW + 20), SECRET);
        assert_eq!(auth.expires_at(&request(Some(&t), "m1", None, Scope::Read, NOW)), Some(NOW + 20));
        assert_eq!(auth.expires_at(&request(None, "m1", None, Scope::Read, NOW)), None);
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
    fn the_jwt_authorizer_reads_no_headers_and_an_authorizer_by_default_does() {
        struct Custom;
        impl Authorizer for Custom {
            fn authorize<'a>(&'a self, _: &'a AuthRequest<'a>) -> AuthFuture<'a> {
                Box::pin(std::future::ready(Err(Denied::Custom("no".into()))))
            }
        }
        assert!(!JwtAuthorizer::new(SECRET).unwrap().reads_headers());
        assert!(Custom.reads_headers(), "an embedding Worker's authorizer gets the headers unless it says otherwise");
    }

    #[test]
    fn a_token_is_verified_once_and_still_checked_against_every_request() {
        let auth = JwtAuthorizer::new(SECRET).unwrap();
        let ask = |token: &str, stream: &str, scope: Scope, now_secs: u64| auth.check(&request(Some(token), stream, None, scope, now_secs));
        let t = token(claims("m1", "write", NOW + 60), SECRET);
        for _ in 0..3 {
            assert!(ask(&t, "m1", Scope::Write, NOW).is_ok());
        }
        assert_eq!(auth.verifications.get(), 1, "the signature was checked once");
        assert_eq!(ask(&t, "m2", Scope::Write, NOW), Err(Denied::WrongStream));
        assert_eq!(ask(&t, "m1", Scope::Read, NOW), Err(Denied::MissingScope(Scope::Read)));
        assert_eq!(ask(&t, "m1", Scope::Write, NOW + 60), Err(Denied::Expired), "a remembered token still expires");
        // The same claims under another signature are a different token, checked (and refused).
        let (signed, _) = t.rsplit_once('.').unwrap();
        let forged = format!("{signed}.{}", base64_url([0u8; 32]));
        assert!(matches!(ask(&forged, "m1", Scope::Write, NOW), Err(Denied::Invalid(_))));
        assert_eq!(auth.verifications.get(), 2);
        assert!(matches!(ask(&forged, "m1", Scope::Write, NOW), Err(Denied::Invalid(_))), "a refused token is never remembered");
        assert_eq!(auth.verifications.get(), 3);
    }

    #[test]
    fn the_cache_keeps_each_tokens_digest_never_the_token() {
        let auth = JwtAuthorizer::new(SECRET).unwrap();
        let t = token(claims("m1", "read", NOW + 60), SECRET);
        assert!(ask_with(&auth, &t).is_ok());
        let verified = auth.verified.borrow();
        assert_eq!(verified.len(), 1);
        assert_eq!(verified[0].0, <[u8; 32]>::from(<sha2::Sha256 as sha2::Digest>::digest(t.as_bytes())));
    }

    fn ask_with(auth: &JwtAuthorizer, t: &str) -> Result<Principal, Denied> {
        auth.check(&request(Some(t), "m1", None, Scope::Read, NOW))
    }

    #[test]
    fn the_verified_tokens_are_bounded_and_the_least_recently_used_goes_first() {
        let auth = JwtAuthorizer::new(SECRET).unwrap();
        let ask = |t: &str| ask_with(&auth, t);
        let tokens: Vec<String> = (0..=VERIFIED_TOKENS as u64).map(|i| token(claims("m1", "read", NOW + 60 + i), SECRET)).collect();
        ask(&tokens[0]).unwrap();
        for t in &tokens[1..VERIFIED_TOKENS] {
            ask(t).unwrap();
        }
        ask(&tokens[0]).unwrap(); // used again: now the most recent
        ask(&tokens[VERIFIED_TOKENS]).unwrap(); // one more than fits: the least recent (tokens[1]) goes
        assert_eq!(auth.verified.borrow().len(), VERIFIED_TOKENS);
        let checks = auth.verifications.get();
        ask(&tokens[0]).unwrap();
        assert_eq!(auth.verifications.get(), checks, "kept");
        ask(&tokens[1]).unwrap();
        assert_eq!(auth.verifications.get(), checks + 1, "evicted, so checked again");
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
