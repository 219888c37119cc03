//! The test App's RSA key pair, generated once per test process (never committed).

use std::sync::OnceLock;

use rsa::pkcs1::EncodeRsaPrivateKey;
use rsa::pkcs8::{EncodePublicKey, LineEnding};
use rsa::{RsaPrivateKey, RsaPublicKey};

/// An RSA key pair in the forms GitHub uses: the App's private key as PKCS#1 PEM
/// (`BEGIN RSA PRIVATE KEY`, what github.com hands out) and the public key as SPKI PEM.
pub struct TestKey {
    pub private_pem: String,
    pub public_pem: String,
}

/// The App key (2048 bits, like GitHub's), made on first use.
pub fn app_key() -> &'static TestKey {
    static KEY: OnceLock<TestKey> = OnceLock::new();
    KEY.get_or_init(|| generate(2048))
}

pub fn generate(bits: usize) -> TestKey {
    let private = RsaPrivateKey::new(&mut rand::rngs::OsRng, bits).expect("RSA key generation");
    let public = RsaPublicKey::from(&private);
    TestKey {
        private_pem: private
            .to_pkcs1_pem(LineEnding::LF)
            .expect("PKCS#1 PEM")
            .to_string(),
        public_pem: public.to_public_key_pem(LineEnding::LF).expect("SPKI PEM"),
    }
}
