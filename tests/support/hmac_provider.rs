//! A `jsonwebtoken` crypto provider for the tests that use it as an oracle: HMAC only, which is
//! all HS256 needs. `jsonwebtoken` without default features has none, and its provider is
//! process-wide; in `tests/jwt.rs` it stands for the embedding Worker's own provider.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::signature::{self, Signer, Verifier};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};

/// The embedding Worker's own provider (here: HMAC, which is all the oracle needs).
pub struct EmbedderHmac(Vec<u8>, Algorithm);

impl EmbedderHmac {
    fn mac(&self, msg: &[u8]) -> Vec<u8> {
        use hmac::{Hmac, KeyInit, Mac};
        let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&self.0).unwrap();
        mac.update(msg);
        mac.finalize().into_bytes().to_vec()
    }
}

impl Signer<Vec<u8>> for EmbedderHmac {
    fn try_sign(&self, msg: &[u8]) -> Result<Vec<u8>, signature::Error> {
        Ok(self.mac(msg))
    }
}

impl JwtSigner for EmbedderHmac {
    fn algorithm(&self) -> Algorithm {
        self.1
    }
}

impl Verifier<Vec<u8>> for EmbedderHmac {
    fn verify(&self, msg: &[u8], signature: &Vec<u8>) -> Result<(), signature::Error> {
        (self.mac(msg) == *signature).then_some(()).ok_or_else(signature::Error::new)
    }
}

impl JwtVerifier for EmbedderHmac {
    fn algorithm(&self) -> Algorithm {
        self.1
    }
}

pub static EMBEDDERS_PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: |alg, key: &EncodingKey| Ok(Box::new(EmbedderHmac(key.as_bytes().to_vec(), *alg))),
    verifier_factory: |alg, key: &DecodingKey| Ok(Box::new(EmbedderHmac(key.try_get_as_bytes()?.to_vec(), *alg))),
    key_utils: KeyUtils::new_unimplemented(),
};
