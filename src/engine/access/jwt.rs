//! HS256 JSON Web Tokens (RFC 7519, signed as an RFC 7515 JWS with HMAC-SHA256), verified and
//! signed with RustCrypto's `hmac` and `sha2`.
//!
//! Not through `jsonwebtoken`: its crypto backend is a process-wide default
//! (`CryptoProvider::install_default`), installable once per process. Installing an HS256-only
//! provider there would take RS256/ES256 verification away from an embedding Worker that uses
//! `jsonwebtoken` for tokens of its own; linking the crate's full provider would add RSA,
//! ECDSA and EdDSA (a third of the Worker's wasm) for algorithms this service refuses anyway.
//! What a verifier must get right is small and lives here: three parts, `alg` exactly
//! `HS256` (`none` and every other algorithm refused, as is a header with `crit`), and a
//! constant-time signature comparison (the `hmac` crate's).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use thiserror::Error;

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum JwtError {
    #[error("the token is malformed: {0}")]
    Malformed(String),
    #[error("the token's algorithm is {0:?}; only HS256 is accepted")]
    Algorithm(String),
    #[error("the token's header has a `crit` parameter, which no extension here understands")]
    Critical,
    #[error("the token's signature does not match")]
    Signature,
    #[error("the token's claims are not as expected: {0}")]
    Claims(String),
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    crit: Option<serde_json::Value>,
}

/// Verifies an HS256 token signed with `secret` and returns its claims.
pub fn verify<T: DeserializeOwned>(token: &str, secret: &[u8]) -> Result<T, JwtError> {
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(JwtError::Malformed("a token has three dot-separated parts".into()));
    };
    let head: Header = serde_json::from_slice(&decode(header, "header")?).map_err(|e| JwtError::Malformed(format!("its header: {e}")))?;
    if head.alg != "HS256" {
        return Err(JwtError::Algorithm(head.alg));
    }
    if head.crit.is_some() {
        return Err(JwtError::Critical);
    }
    let signed = &token[..header.len() + 1 + payload.len()];
    mac(secret, signed).verify_slice(&decode(signature, "signature")?).map_err(|_| JwtError::Signature)?;
    serde_json::from_slice(&decode(payload, "payload")?).map_err(|e| JwtError::Claims(e.to_string()))
}

/// Signs `claims` as an HS256 token.
pub fn sign(claims: &impl Serialize, secret: &[u8]) -> Result<String, JwtError> {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).map_err(|e| JwtError::Claims(e.to_string()))?);
    let signed = format!("{header}.{payload}");
    let signature = URL_SAFE_NO_PAD.encode(mac(secret, &signed).finalize().into_bytes());
    Ok(format!("{signed}.{signature}"))
}

fn mac(secret: &[u8], signed: &str) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(signed.as_bytes());
    mac
}

fn decode(part: &str, what: &str) -> Result<Vec<u8>, JwtError> {
    URL_SAFE_NO_PAD.decode(part).map_err(|e| JwtError::Malformed(format!("its {what} is not base64url: {e}")))
}
