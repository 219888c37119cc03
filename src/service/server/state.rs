//! What every request handler shares: the store, the intake, the wake-ups, and the operator
//! credential the pages check.

use std::path::PathBuf;
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use hmac::{Hmac, Mac};
use metrics_exporter_prometheus::PrometheusHandle;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use super::intake::Intake;
use crate::service::store::Store;

/// What every request handler shares.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    /// Group-committing writer for deliveries (see `intake.rs`).
    pub intake: Intake,
    pub webhook_secrets: Arc<Vec<SecretString>>,
    /// Woken after a delivery is stored, so the processor handles it at once.
    pub wake: Arc<Notify>,
    /// Woken when a remote result finished a job (its reports are queued).
    pub wake_outbox: Arc<Notify>,
    /// Woken when a remote result asks for a re-dispatch.
    pub wake_remote: Arc<Notify>,
    pub metrics: PrometheusHandle,
    /// Grade pages, the dashboard and the operator credential (`pages.rs`).
    pub pages: Arc<Pages>,
}

/// What the pages need besides the store.
#[derive(Clone)]
pub struct Pages {
    /// `None`: no operator is configured; only public pages are served.
    pub operator_token: Option<SecretString>,
    /// `https://github.com/`.
    pub web_url: String,
    /// tasks/ and probes/ (the reproduce command names the probe directory).
    pub root: PathBuf,
    /// Send the cookie with `Secure` (the public URL is https).
    pub secure_cookie: bool,
}

pub(super) const COOKIE: &str = "infradev_operator";
const SESSION_MESSAGE: &[u8] = b"infradev operator session";
impl Pages {
    fn session_mac(&self) -> Option<Hmac<Sha256>> {
        let token = self.operator_token.as_ref()?;
        let mut mac = Hmac::<Sha256>::new_from_slice(token.expose_secret().as_bytes()).ok()?;
        mac.update(SESSION_MESSAGE);
        Some(mac)
    }

    /// The cookie value of an operator session.
    pub(super) fn session_value(&self) -> Option<String> {
        Some(hex::encode(self.session_mac()?.finalize().into_bytes()))
    }

    pub(super) fn token_matches(&self, given: &str) -> bool {
        let Some(token) = &self.operator_token else {
            return false;
        };
        let (a, b) = (
            Sha256::digest(given.as_bytes()),
            Sha256::digest(token.expose_secret().as_bytes()),
        );
        a.iter()
            .zip(b.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }

    /// Whether the request carries the operator credential.
    pub fn is_operator(&self, headers: &HeaderMap) -> bool {
        if self.operator_token.is_none() {
            return false;
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if let Some(token) = bearer {
            return self.token_matches(token);
        }
        let cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
            .next();
        match (cookie.and_then(|c| hex::decode(c).ok()), self.session_mac()) {
            (Some(given), Some(mac)) => mac.verify_slice(&given).is_ok(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn pages(token: Option<&str>) -> Pages {
        Pages {
            operator_token: token.map(|t| SecretString::from(t.to_owned())),
            web_url: "https://github.com/".into(),
            root: PathBuf::from("/srv"),
            secure_cookie: true,
        }
    }

    fn headers(name: header::HeaderName, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn a_bearer_token_or_the_session_cookie_makes_an_operator() {
        let p = pages(Some("operator-token-0123456789"));
        let session = p.session_value().unwrap();
        assert_ne!(session, "operator-token-0123456789");
        let cases = [
            (
                header::AUTHORIZATION,
                "Bearer operator-token-0123456789".to_owned(),
                true,
            ),
            (
                header::AUTHORIZATION,
                "Bearer operator-token-012345678".to_owned(),
                false,
            ),
            (
                header::AUTHORIZATION,
                "Basic b3BlcmF0b3I=".to_owned(),
                false,
            ),
            (header::COOKIE, format!("a=b; {COOKIE}={session}"), true),
            (
                header::COOKIE,
                format!("{COOKIE}=operator-token-0123456789"),
                false,
            ),
            (header::COOKIE, format!("{COOKIE}={}", &session[2..]), false),
        ];
        for (name, value, want) in cases {
            assert_eq!(p.is_operator(&headers(name, &value)), want, "{value}");
        }
        assert!(!p.is_operator(&HeaderMap::new()));
        // No token configured: nobody is an operator, whatever they send.
        let none = pages(None);
        assert!(!none.is_operator(&headers(header::AUTHORIZATION, "Bearer ")));
        assert!(none.session_value().is_none());
    }
}
