//! The HS256 tokens of `engine::access::jwt` against `jsonwebtoken`, the maintained crate, as an
//! independent oracle; and the proof that verifying and minting here leaves `jsonwebtoken`'s
//! process-wide crypto provider alone, so an embedding Worker that verifies tokens of its own
//! (RS256, ES256, …) with `jsonwebtoken` installs whatever provider it needs.
//!
//! One test function: the provider is process-wide, so its steps must run in this order.

#[path = "support/hmac_provider.rs"]
mod hmac_provider;

use hmac_provider::EMBEDDERS_PROVIDER;
use jsonwebtoken::crypto::CryptoProvider;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rindle_streams::engine::access::auth::{AuthRequest, JwtAuthorizer, Principal, Scope};
use rindle_streams::engine::access::jwt::{self, JwtError};
use serde::{Deserialize, Serialize};

const SECRET: &[u8] = b"test-secret-0123456789";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Claims {
    sub: String,
    stream: String,
    scope: String,
    exp: u64,
}

fn claims() -> Claims {
    Claims { sub: "u1".into(), stream: "m1".into(), scope: "read write".into(), exp: 4_000_000_000 }
}

#[test]
fn tokens_agree_with_jsonwebtoken_and_its_process_wide_provider_is_left_to_the_embedder() {
    // 1. Everything this crate does with tokens: verify, authorize, mint.
    let ours = jwt::sign(&claims(), SECRET).unwrap();
    assert_eq!(jwt::verify::<Claims>(&ours, SECRET), Ok(claims()));
    let authorizer = JwtAuthorizer::new(SECRET).unwrap();
    let request = AuthRequest {
        token: Some(&ours),
        token_in_query: false,
        stream_id: "m1",
        chat: None,
        scope: Scope::Write,
        from: None,
        headers: &[],
        meta: None,
        now_secs: claims().exp - 60, // within the token's lifetime, under the default maximum
    };
    assert_eq!(authorizer.check(&request), Ok(Principal { sub: "u1".into() }));

    // 2. …installed no provider: the embedding Worker's choice is still open.
    assert!(CryptoProvider::try_get_default().is_none(), "verifying or minting here must not install a process-wide provider");
    EMBEDDERS_PROVIDER.install_default().expect("the embedding Worker installs its own provider");

    // 3. The oracle: jsonwebtoken reads our tokens, and we read its.
    let mut validation = Validation::new(Algorithm::HS256);
    validation.validate_exp = false;
    let decoded = jsonwebtoken::decode::<Claims>(&ours, &DecodingKey::from_secret(SECRET).unwrap(), &validation).unwrap();
    assert_eq!(decoded.claims, claims());
    let theirs = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims(), &EncodingKey::from_secret(SECRET).unwrap()).unwrap();
    assert_eq!(jwt::verify::<Claims>(&theirs, SECRET), Ok(claims()));
    assert_eq!(authorizer.check(&AuthRequest { token: Some(&theirs), ..request }), Ok(Principal { sub: "u1".into() }));

    // 4. What jsonwebtoken refuses, we refuse: another algorithm (even with the right secret),
    //    a wrong key, a tampered payload.
    let hs384 = jsonwebtoken::encode(&Header::new(Algorithm::HS384), &claims(), &EncodingKey::from_secret(SECRET).unwrap()).unwrap();
    assert_eq!(jwt::verify::<Claims>(&hs384, SECRET), Err(JwtError::Algorithm("HS384".into())));
    assert_eq!(jwt::verify::<Claims>(&theirs, b"another-secret-9876543210"), Err(JwtError::Signature));
    let (head, rest) = theirs.split_once('.').unwrap();
    let (_, signature) = rest.split_once('.').unwrap();
    let forged_claims = Claims { scope: "read write cancel".into(), ..claims() };
    let forged_payload = {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged_claims).unwrap())
    };
    let tampered = format!("{head}.{forged_payload}.{signature}");
    assert_eq!(jwt::verify::<Claims>(&tampered, SECRET), Err(JwtError::Signature));
    assert!(jsonwebtoken::decode::<Claims>(&tampered, &DecodingKey::from_secret(SECRET).unwrap(), &validation).is_err());
}

#[test]
fn malformed_tokens_are_refused_with_a_reason() {
    let good = jwt::sign(&claims(), SECRET).unwrap();
    for bad in ["", "a.b", "a.b.c.d", "!!.e30.sig", &format!("{good}x"), &good.replacen('.', ".x", 1)] {
        assert!(jwt::verify::<Claims>(bad, SECRET).is_err(), "{bad:?}");
    }
    let crit = {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let signed = format!("{}.{}", b64(br#"{"alg":"HS256","crit":["exp"]}"#), b64(&serde_json::to_vec(&claims()).unwrap()));
        use hmac::{Hmac, KeyInit, Mac};
        let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(SECRET).unwrap();
        mac.update(signed.as_bytes());
        format!("{signed}.{}", b64(&mac.finalize().into_bytes()))
    };
    assert_eq!(jwt::verify::<Claims>(&crit, SECRET), Err(JwtError::Critical));
}
