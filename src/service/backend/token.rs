//! Result tokens: minted per dispatch, handed to the run, stored only as a SHA-256 hash.

use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

/// A fresh token: two v4 UUIDs from the OS random source (244 random bits), as 64 hex digits.
pub fn mint() -> SecretString {
    let a = uuid::Uuid::new_v4();
    let b = uuid::Uuid::new_v4();
    let mut bytes = Vec::with_capacity(32);
    bytes.extend_from_slice(a.as_bytes());
    bytes.extend_from_slice(b.as_bytes());
    SecretString::from(hex::encode(bytes))
}

/// The hex SHA-256 the store keeps instead of the token.
pub fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// [`hash`] of a secret token.
pub fn hash_secret(token: &SecretString) -> String {
    hash(token.expose_secret())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fresh_and_hashes_stable() {
        let (a, b) = (mint(), mint());
        assert_ne!(a.expose_secret(), b.expose_secret());
        assert_eq!(a.expose_secret().len(), 64);
        assert_eq!(hash_secret(&a), hash(a.expose_secret()));
        assert_ne!(hash_secret(&a), hash_secret(&b));
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
