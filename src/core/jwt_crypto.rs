//! The cryptography `jsonwebtoken` uses here: HS256 only, from RustCrypto's `hmac` and `sha2`.
//! The crate's own `rust_crypto` provider also links RSA, ECDSA, EdDSA and SHA-384/512 (a
//! third of the Worker's wasm) for algorithms this service refuses anyway.

use hmac::{Hmac, KeyInit, Mac};
use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{Error, ErrorKind};
use jsonwebtoken::signature::{self, Signer, Verifier};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use sha2::Sha256;

/// One HS256 key.
struct Hs256Key(Vec<u8>);

impl Hs256Key {
    fn new(alg: Algorithm, key: &[u8]) -> Result<Self, Error> {
        match alg {
            Algorithm::HS256 => Ok(Self(key.to_vec())),
            _ => Err(ErrorKind::InvalidAlgorithm.into()),
        }
    }

    fn mac(&self, msg: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(msg);
        mac
    }
}

impl Signer<Vec<u8>> for Hs256Key {
    fn try_sign(&self, msg: &[u8]) -> Result<Vec<u8>, signature::Error> {
        Ok(self.mac(msg).finalize().into_bytes().to_vec())
    }
}

impl JwtSigner for Hs256Key {
    fn algorithm(&self) -> Algorithm {
        Algorithm::HS256
    }
}

impl Verifier<Vec<u8>> for Hs256Key {
    fn verify(&self, msg: &[u8], signature: &Vec<u8>) -> Result<(), signature::Error> {
        // Constant-time comparison, by the `hmac` crate.
        self.mac(msg).verify_slice(signature).map_err(|_| signature::Error::new())
    }
}

impl JwtVerifier for Hs256Key {
    fn algorithm(&self) -> Algorithm {
        Algorithm::HS256
    }
}

static HS256_ONLY: CryptoProvider = CryptoProvider {
    signer_factory: |alg, key: &EncodingKey| Ok(Box::new(Hs256Key::new(*alg, key.as_bytes())?)),
    verifier_factory: |alg, key: &DecodingKey| Ok(Box::new(Hs256Key::new(*alg, key.try_get_as_bytes()?)?)),
    key_utils: KeyUtils::new_unimplemented(),
};

/// Makes the HS256-only provider `jsonwebtoken`'s process default (idempotent).
pub fn install() {
    let _ = HS256_ONLY.install_default(); // Err only when it is already installed
}
