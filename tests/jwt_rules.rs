//! Each rule of the JWT check (SPEC §12) against `jsonwebtoken`, the maintained crate, as the
//! oracle: `aud` when configured, `nbf`, `exp`, a maximum lifetime, a previous secret during a
//! rotation, the example secret refused outside development, query tokens that cannot write.
//!
//! `jsonwebtoken` reads the system clock, so the cases the oracle judges stand at least 100 s
//! from a boundary (a second ticking between its check and ours cannot change a verdict); the
//! boundaries themselves are asserted against RFC 7519 directly, where `jsonwebtoken` differs
//! (it accepts a token at its `exp` second, RFC 7519 §4.1.4 says the time must be before it).

#[path = "support/hmac_provider.rs"]
mod hmac_provider;

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use rindle_streams::engine::access::auth::{
    AuthRequest, BadSecret, Denied, JwtAuthorizer, JwtPolicy, JwtSecrets, Principal, Scope, DEFAULT_MAX_LIFETIME_SECS, EXAMPLE_SECRET,
};
use rindle_streams::engine::access::jwt;
use serde_json::{json, Value};

const SECRET: &[u8] = b"current-secret-0123456789";
const PREVIOUS: &[u8] = b"previous-secret-0123456789";
const MAX: u64 = DEFAULT_MAX_LIFETIME_SECS;

fn install_oracle_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| hmac_provider::EMBEDDERS_PROVIDER.install_default().expect("no other provider in this test binary"));
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// Claims for stream `m1` with `scope`, plus `extra` (exp, nbf, iat, aud…).
fn claims(scope: &str, extra: Value) -> Value {
    let mut c = json!({"sub": "u1", "stream": "m1", "scope": scope});
    c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    c
}

fn sign(claims: &Value, secret: &[u8]) -> String {
    jwt::sign(claims, secret).unwrap()
}

/// jsonwebtoken's verdict: no leeway, `nbf` validated, `aud` validated and required only when
/// configured (a token naming no audience is not this service's either).
fn oracle(token: &str, secret: &[u8], audience: Option<&str>) -> bool {
    install_oracle_provider();
    let mut v = Validation::new(Algorithm::HS256);
    v.leeway = 0;
    v.validate_nbf = true;
    match audience {
        Some(a) => {
            v.set_audience(&[a]);
            v.set_required_spec_claims(&["exp", "aud"]);
        }
        None => v.validate_aud = false,
    }
    jsonwebtoken::decode::<Value>(token, &DecodingKey::from_secret(secret).unwrap(), &v).is_ok()
}

fn authorizer(previous: Option<&[u8]>, audience: Option<&str>) -> JwtAuthorizer {
    let policy = JwtPolicy { audience: audience.map(str::to_owned), max_lifetime_secs: MAX };
    JwtAuthorizer::with(JwtSecrets { current: SECRET, previous, development: false }, policy).unwrap()
}

fn ask(auth: &JwtAuthorizer, token: &str, scope: Scope, in_query: bool, now_secs: u64) -> Result<Principal, Denied> {
    auth.check(&AuthRequest {
        token: Some(token),
        token_in_query: in_query,
        stream_id: "m1",
        chat: None,
        scope,
        from: None,
        headers: &[],
        meta: None,
        now_secs,
    })
}

#[test]
fn aud_is_checked_when_configured_as_jsonwebtoken_checks_it() {
    let now = now();
    let auds = [None, Some(json!("svc")), Some(json!("other")), Some(json!(["x", "svc"])), Some(json!(["x"])), Some(json!([]))];
    let mut checked = 0;
    for configured in [None, Some("svc")] {
        let auth = authorizer(None, configured);
        for aud in &auds {
            let extra = match aud {
                Some(aud) => json!({"exp": now + 600, "aud": aud}),
                None => json!({"exp": now + 600}),
            };
            let token = sign(&claims("read", extra), SECRET);
            let ours = ask(&auth, &token, Scope::Read, false, now);
            assert_eq!(ours.is_ok(), oracle(&token, SECRET, configured), "aud {aud:?}, configured {configured:?}: {ours:?}");
            if ours.is_err() {
                assert_eq!(ours, Err(Denied::WrongAudience));
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 12);
}

#[test]
fn nbf_and_exp_are_honoured_as_jsonwebtoken_honours_them_away_from_the_boundaries() {
    let now = now();
    let auth = authorizer(None, None);
    for exp in [now - 100, now + 100] {
        for nbf in [None, Some(now - 100), Some(now + 100)] {
            let extra = match nbf {
                Some(nbf) => json!({"exp": exp, "nbf": nbf}),
                None => json!({"exp": exp}),
            };
            let token = sign(&claims("read", extra), SECRET);
            let ours = ask(&auth, &token, Scope::Read, false, now);
            assert_eq!(ours.is_ok(), oracle(&token, SECRET, None), "exp now{:+}, nbf {nbf:?}: {ours:?}", exp as i64 - now as i64);
            let expected = if exp < now {
                Err(Denied::Expired)
            } else if nbf.is_some_and(|n| n > now) {
                Err(Denied::NotYetValid)
            } else {
                Ok(Principal { sub: "u1".into() })
            };
            assert_eq!(ours, expected);
        }
    }
}

#[test]
fn at_the_boundaries_the_rfc_decides() {
    let (now, auth) = (1_800_000_000, authorizer(None, None));
    let at = |extra: Value| ask(&auth, &sign(&claims("read", extra), SECRET), Scope::Read, false, now);
    // RFC 7519 §4.1.4: the current time must be before `exp` (jsonwebtoken still accepts it).
    assert_eq!(at(json!({"exp": now})), Err(Denied::Expired));
    assert!(at(json!({"exp": now + 1})).is_ok());
    // §4.1.5: the current time must be after or equal to `nbf`.
    assert!(at(json!({"exp": now + 60, "nbf": now})).is_ok());
    assert_eq!(at(json!({"exp": now + 60, "nbf": now + 1})), Err(Denied::NotYetValid));
}

#[test]
fn a_token_lives_at_most_the_maximum_lifetime() {
    let now = now();
    let auth = authorizer(None, None);
    let mut refused = 0;
    for iat in [None, Some(now - 10), Some(now - MAX), Some(now + 300)] {
        for exp in [now + 300, now + MAX - 300, now + MAX + 300, u64::MAX] {
            let mut extra = json!({"exp": exp});
            if let Some(iat) = iat {
                extra["iat"] = json!(iat);
            }
            let token = sign(&claims("read", extra), SECRET);
            // jsonwebtoken has no lifetime rule: its verdict, and the lifetime from the issue
            // time (or from now, when none is given or it is later) within the maximum.
            let lifetime = exp - iat.map_or(now, |iat| iat.min(now));
            let expected = oracle(&token, SECRET, None) && lifetime <= MAX;
            let ours = ask(&auth, &token, Scope::Read, false, now);
            assert_eq!(ours.is_ok(), expected, "iat {iat:?}, exp now{:+}: {ours:?}", exp.wrapping_sub(now) as i64);
            if !expected {
                assert_eq!(ours, Err(Denied::TooLong { lifetime, max: MAX }));
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 10, "exp = u64::MAX always, a day and more from now always, and any exp from an iat a day ago but one");
    let short = JwtAuthorizer::with(
        JwtSecrets { current: SECRET, previous: None, development: false },
        JwtPolicy { audience: None, max_lifetime_secs: 60 },
    )
    .unwrap();
    let token = sign(&claims("read", json!({"exp": now + 120})), SECRET);
    assert_eq!(ask(&short, &token, Scope::Read, false, now), Err(Denied::TooLong { lifetime: 120, max: 60 }), "configurable");
}

#[test]
fn a_token_signed_with_the_previous_secret_is_accepted_during_a_rotation() {
    let now = now();
    let old = sign(&claims("write", json!({"exp": now + 600})), PREVIOUS);
    let new = sign(&claims("write", json!({"exp": now + 600})), SECRET);
    let foreign = sign(&claims("write", json!({"exp": now + 600})), b"another-secret-0123456789");
    let rotating = authorizer(Some(PREVIOUS), None);
    let rotated = authorizer(None, None);
    for (token, signed_with) in [(&old, PREVIOUS), (&new, SECRET)] {
        assert!(oracle(token, signed_with, None));
        assert!(ask(&rotating, token, Scope::Write, false, now).is_ok());
    }
    assert!(!oracle(&old, SECRET, None));
    assert!(matches!(ask(&rotated, &old, Scope::Write, false, now), Err(Denied::Invalid(_))), "once the previous secret is unset");
    assert!(!oracle(&foreign, SECRET, None) && !oracle(&foreign, PREVIOUS, None));
    assert!(matches!(ask(&rotating, &foreign, Scope::Write, false, now), Err(Denied::Invalid(_))));
}

#[test]
fn the_example_secret_is_refused_outside_development() {
    let with = |current: &[u8], previous: Option<&[u8]>, development| {
        JwtAuthorizer::with(JwtSecrets { current, previous, development }, JwtPolicy::default()).map(|_| ())
    };
    assert_eq!(with(EXAMPLE_SECRET, None, false), Err(BadSecret::Example("STREAM_JWT_SECRET")));
    assert_eq!(with(SECRET, Some(EXAMPLE_SECRET), false), Err(BadSecret::Example("STREAM_JWT_SECRET_PREVIOUS")));
    assert_eq!(with(EXAMPLE_SECRET, None, true), Ok(()), "development (the dev build with DEV_MODE=1)");
    assert_eq!(with(b"short", None, true), Err(BadSecret::TooShort("STREAM_JWT_SECRET")));
    assert_eq!(with(SECRET, Some(b"short"), false), Err(BadSecret::TooShort("STREAM_JWT_SECRET_PREVIOUS")));
    assert!(JwtAuthorizer::new(EXAMPLE_SECRET).is_err());
}

#[test]
fn a_token_in_the_url_may_read_and_cancel_but_never_write() {
    let now = now();
    let auth = authorizer(None, None);
    for (scope, asked, in_query, expected) in [
        ("read", Scope::Read, true, Ok(())),
        ("read cancel", Scope::Read, true, Ok(())),
        ("read write cancel", Scope::Read, true, Err(Denied::WriteTokenInQuery)),
        ("write read", Scope::Read, true, Err(Denied::WriteTokenInQuery)),
        ("read write cancel", Scope::Read, false, Ok(())),
        ("read write", Scope::Write, false, Ok(())),
    ] {
        let token = sign(&claims(scope, json!({"exp": now + 600})), SECRET);
        assert!(oracle(&token, SECRET, None), "a valid token: the refusal is the URL's rule alone");
        assert_eq!(ask(&auth, &token, asked, in_query, now).map(|_| ()), expected, "{scope:?} in the query: {in_query}");
    }
}

#[test]
fn a_remembered_token_meets_every_rule_again_at_each_request() {
    let now = 1_800_000_000;
    let auth = authorizer(None, Some("svc"));
    let token = sign(&claims("read write", json!({"exp": now + 600, "nbf": now + 10, "aud": "svc"})), SECRET);
    assert_eq!(ask(&auth, &token, Scope::Read, false, now), Err(Denied::NotYetValid), "verified, then refused, and remembered");
    assert!(ask(&auth, &token, Scope::Read, false, now + 10).is_ok());
    assert_eq!(ask(&auth, &token, Scope::Read, true, now + 10), Err(Denied::WriteTokenInQuery));
    assert_eq!(ask(&auth, &token, Scope::Read, false, now + 600), Err(Denied::Expired));
    let other = authorizer(None, Some("other"));
    assert_eq!(ask(&other, &token, Scope::Read, false, now + 10), Err(Denied::WrongAudience));
}
