//! `X-Hub-Signature-256` verification: HMAC-SHA256 over the raw request body, keyed with the
//! webhook secret, sent as `sha256=<64 lowercase hex digits>`.
//!
//! The body is hashed exactly as received: re-serialised JSON does not reproduce GitHub's bytes
//! (key order, escapes, the trailing newline), so nothing may parse, trim or re-encode it first.
//! Only `sha256=` is accepted; the legacy SHA-1 `X-Hub-Signature` (`sha1=`) is refused.

use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The only accepted scheme prefix of `X-Hub-Signature-256`.
const PREFIX: &str = "sha256=";

/// Whether `signature_header` (the value of `X-Hub-Signature-256`) is a valid signature of
/// `body` under any of `secrets`.
///
/// - Several secrets are allowed so that a secret can be rotated: list the new and the old one
///   while GitHub switches over. Every secret is tried (no early exit), so the time taken does
///   not reveal which one matched.
/// - The digest comparison is constant time ([`Mac::verify_slice`]).
/// - Empty secrets are skipped: an HMAC keyed with nothing authenticates nothing.
/// - A missing header, another scheme (`sha1=`), or anything but exactly 64 hex digits after
///   `sha256=` is refused. Upper-case hex digits are accepted (the digest is the same).
pub fn verify_signature(
    secrets: &[SecretString],
    signature_header: Option<&str>,
    body: &[u8],
) -> bool {
    let Some(expected) = signature_header.and_then(decode_header) else {
        return false;
    };
    let mut matched = false;
    for secret in secrets {
        let key = secret.expose_secret().as_bytes();
        if key.is_empty() {
            continue;
        }
        let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
        mac.update(body);
        matched |= mac.verify_slice(&expected).is_ok();
    }
    matched
}

/// The `X-Hub-Signature-256` value GitHub would send for `body` under `secret`:
/// `sha256=` and the lower-case hex HMAC-SHA256 digest. For tests and replay tools.
pub fn sign(secret: &SecretString, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret.expose_secret().as_bytes())
        .expect("HMAC accepts keys of any length");
    mac.update(body);
    format!("{PREFIX}{}", hex::encode(mac.finalize().into_bytes()))
}

/// The 32 digest bytes of a well-formed `sha256=<64 hex>` header, else `None`.
fn decode_header(header: &str) -> Option<[u8; 32]> {
    let digits = header.strip_prefix(PREFIX)?;
    let mut digest = [0u8; 32];
    // `decode_to_slice` insists on exactly 64 digits, all of them hex.
    hex::decode_to_slice(digits, &mut digest).ok()?;
    Some(digest)
}
