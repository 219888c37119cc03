//! The GitHub App: its JWT, installation tokens (cached), and the App-level webhook deliveries.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use http::Method;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::error::GitHubError;
use super::transport::{Transport, decode, enc, next_link_param};
use super::types::FailedDelivery;

/// A cached installation token is renewed this long before GitHub's `expires_at`.
pub const TOKEN_REFRESH_MARGIN: ChronoDuration = ChronoDuration::minutes(5);
/// JWT `iat` is set this far in the past (clock drift).
const JWT_BACKDATE_S: i64 = 60;
/// JWT `exp` is this far in the future (GitHub allows at most 10 minutes).
const JWT_LIFETIME_S: i64 = 540;
/// At most this many pages of deliveries are read in one listing (100 per page).
const MAX_DELIVERY_PAGES: usize = 50;

/// The App: mints its JWT, holds installation tokens, and makes clients of its installations (`client.rs`). Cheap to clone.
#[derive(Clone)]
pub struct GitHubApp {
    inner: Arc<AppInner>,
}

pub(crate) struct AppInner {
    pub(crate) transport: Transport,
    pub(crate) app_id: u64,
    key: EncodingKey,
    /// One slot per installation; its async lock makes concurrent callers share one mint.
    tokens: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<Option<CachedToken>>>>>,
}

struct CachedToken {
    token: SecretString,
    expires_at: DateTime<Utc>,
}

impl fmt::Debug for GitHubApp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitHubApp")
            .field("app_id", &self.inner.app_id)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct InstallationRepositories {
    total_count: u64,
    repositories: Vec<RepositoryName>,
}

#[derive(Deserialize)]
struct RepositoryName {
    full_name: String,
}

#[derive(Serialize)]
struct Claims {
    iat: i64,
    exp: i64,
    iss: String,
}

#[derive(Deserialize)]
struct TokenReply {
    token: String,
    expires_at: DateTime<Utc>,
}

#[derive(Deserialize)]
struct DeliveryItem {
    id: u64,
    guid: String,
    delivered_at: DateTime<Utc>,
    redelivery: bool,
    status: String,
    status_code: u16,
    event: String,
    action: Option<String>,
    installation_id: Option<u64>,
    repository_id: Option<u64>,
}

#[derive(Deserialize)]
struct RepoInstallation {
    id: u64,
}

impl GitHubApp {
    /// `api_url` is `https://api.github.com` (or a GHES `/api/v3` URL, or a test server);
    /// `private_key_pem` is the App's RSA key as GitHub issues it (PKCS#1 or PKCS#8 PEM).
    ///
    /// Call it inside the Tokio runtime that will use it: octocrab spawns its request worker
    /// there, and the client stops working when that runtime ends.
    pub fn new(api_url: &str, app_id: u64, private_key_pem: &SecretString) -> anyhow::Result<Self> {
        if tokio::runtime::Handle::try_current().is_err() {
            anyhow::bail!("GitHubApp::new must be called inside a Tokio runtime");
        }
        let key =
            EncodingKey::from_rsa_pem(private_key_pem.expose_secret().as_bytes()).map_err(|e| {
                anyhow::anyhow!("the GitHub App private key is not an RSA PEM key: {e}")
            })?;
        let app = GitHubApp {
            inner: Arc::new(AppInner {
                transport: Transport::new(api_url)?,
                app_id,
                key,
                tokens: Mutex::new(HashMap::new()),
            }),
        };
        // Fail at start-up, not at the first webhook, if the key cannot sign.
        app.jwt()
            .map_err(|e| anyhow::anyhow!("signing a GitHub App JWT: {e}"))?;
        Ok(app)
    }

    pub fn app_id(&self) -> u64 {
        self.inner.app_id
    }

    /// A fresh App JWT: RS256, `iat` = now − 60 s, `exp` = now + 540 s, `iss` = the App id.
    pub fn jwt(&self) -> Result<SecretString, GitHubError> {
        let now = Utc::now().timestamp();
        let claims = Claims {
            iat: now - JWT_BACKDATE_S,
            exp: now + JWT_LIFETIME_S,
            iss: self.inner.app_id.to_string(),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &self.inner.key)
            .map(SecretString::from)
            .map_err(|e| GitHubError::Auth(format!("signing the JWT: {e}")))
    }

    /// The installation's access token (for API calls and `git clone`). Minted through
    /// `POST /app/installations/{id}/access_tokens` and reused until 5 minutes before it
    /// expires. Never log it.
    pub async fn installation_token(
        &self,
        installation_id: u64,
    ) -> Result<SecretString, GitHubError> {
        let slot = self.slot(installation_id);
        let mut cached = slot.lock().await;
        if let Some(token) = cached.as_ref()
            && Utc::now() + TOKEN_REFRESH_MARGIN < token.expires_at
        {
            return Ok(token.token.clone());
        }
        let path = format!("/app/installations/{installation_id}/access_tokens");
        let reply = self
            .inner
            .transport
            .send_ok(Method::POST, &path, &self.jwt()?, None)
            .await?;
        let minted: TokenReply = decode(&Method::POST, &path, &reply)?;
        tracing::debug!(installation_id, expires_at = %minted.expires_at, "minted an installation token");
        let token = SecretString::from(minted.token);
        *cached = Some(CachedToken {
            token: token.clone(),
            expires_at: minted.expires_at,
        });
        Ok(token)
    }

    /// Forget the cached token of an installation (GitHub said 401 to it: revoked, or the
    /// installation changed); the next call mints a new one.
    pub async fn forget_token(&self, installation_id: u64) {
        *self.slot(installation_id).lock().await = None;
    }

    /// Forget the cached token only if it is still `stale` (a concurrent caller may have
    /// replaced it already).
    pub(crate) async fn forget_stale_token(&self, installation_id: u64, stale: &SecretString) {
        let slot = self.slot(installation_id);
        let mut cached = slot.lock().await;
        if cached
            .as_ref()
            .is_some_and(|c| c.token.expose_secret() == stale.expose_secret())
        {
            *cached = None;
        }
    }

    /// The App's webhook deliveries since `since` that failed and were not redelivered
    /// successfully since: for each GUID with no `OK` delivery in the window, its newest failed
    /// delivery. Oldest first. Reads `GET /app/hook/deliveries`, following the cursor.
    pub async fn list_failed_deliveries(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<FailedDelivery>, GitHubError> {
        let mut seen: Vec<DeliveryItem> = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_DELIVERY_PAGES {
            let mut path = "/app/hook/deliveries?per_page=100".to_string();
            if let Some(c) = &cursor {
                path.push_str("&cursor=");
                path.push_str(&enc(c));
            }
            let reply = self
                .inner
                .transport
                .send_ok(Method::GET, &path, &self.jwt()?, None)
                .await?;
            let page: Vec<DeliveryItem> = decode(&Method::GET, &path, &reply)?;
            let reached_start = page.iter().any(|d| d.delivered_at < since);
            seen.extend(page.into_iter().filter(|d| d.delivered_at >= since));
            cursor = next_link_param(&reply.headers, "cursor");
            if reached_start || cursor.is_none() {
                break;
            }
        }
        let succeeded: HashSet<&str> = seen
            .iter()
            .filter(|d| delivery_ok(d))
            .map(|d| d.guid.as_str())
            .collect();
        let mut newest: HashMap<&str, &DeliveryItem> = HashMap::new();
        for d in seen.iter().filter(|d| !delivery_ok(d)) {
            if succeeded.contains(d.guid.as_str()) {
                continue;
            }
            let entry = newest.entry(d.guid.as_str()).or_insert(d);
            if (d.delivered_at, d.id) > (entry.delivered_at, entry.id) {
                *entry = d;
            }
        }
        let mut failed: Vec<FailedDelivery> = newest
            .into_values()
            .map(|d| FailedDelivery {
                id: d.id,
                guid: d.guid.clone(),
                delivered_at: d.delivered_at,
                event: d.event.clone(),
                action: d.action.clone(),
                status: d.status.clone(),
                status_code: d.status_code,
                redelivery: d.redelivery,
                installation_id: d.installation_id,
                repository_id: d.repository_id,
            })
            .collect();
        failed.sort_by_key(|d| (d.delivered_at, d.id));
        Ok(failed)
    }

    /// Ask GitHub to deliver `delivery_id` again (`POST /app/hook/deliveries/{id}/attempts`).
    /// The redelivery keeps the GUID.
    pub async fn redeliver(&self, delivery_id: u64) -> Result<(), GitHubError> {
        let path = format!("/app/hook/deliveries/{delivery_id}/attempts");
        self.inner
            .transport
            .send_ok(Method::POST, &path, &self.jwt()?, None)
            .await?;
        Ok(())
    }

    /// The full names of the repositories installation `installation_id` can access
    /// (`GET /installation/repositories` with its token, every page).
    pub async fn installation_repositories(
        &self,
        installation_id: u64,
    ) -> Result<Vec<String>, GitHubError> {
        let mut names = Vec::new();
        for page in 1..=MAX_DELIVERY_PAGES {
            let path = format!("/installation/repositories?per_page=100&page={page}");
            let token = self.installation_token(installation_id).await?;
            let reply = self
                .inner
                .transport
                .send_ok(Method::GET, &path, &token, None)
                .await?;
            let list: InstallationRepositories = decode(&Method::GET, &path, &reply)?;
            let count = list.repositories.len();
            names.extend(list.repositories.into_iter().map(|r| r.full_name));
            if count == 0 || names.len() as u64 >= list.total_count {
                break;
            }
        }
        Ok(names)
    }

    /// The installation that covers `owner/repo` (`GET /repos/{o}/{r}/installation`), or `None`
    /// when the App is not installed there.
    pub async fn repo_installation_id(
        &self,
        owner: &str,
        repo: &str,
    ) -> Result<Option<u64>, GitHubError> {
        let path = format!("/repos/{}/{}/installation", enc(owner), enc(repo));
        let reply = self
            .inner
            .transport
            .send(Method::GET, &path, &self.jwt()?, None)
            .await?;
        if reply.status == http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !reply.status.is_success() {
            return Err(super::transport::api_error(&Method::GET, &path, &reply));
        }
        let installation: RepoInstallation = decode(&Method::GET, &path, &reply)?;
        Ok(Some(installation.id))
    }

    pub(crate) fn transport(&self) -> &Transport {
        &self.inner.transport
    }

    fn slot(&self, installation_id: u64) -> Arc<tokio::sync::Mutex<Option<CachedToken>>> {
        let mut tokens = self.inner.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.entry(installation_id).or_default().clone()
    }
}

fn delivery_ok(d: &DeliveryItem) -> bool {
    d.status.eq_ignore_ascii_case("OK") || (200..300).contains(&d.status_code)
}
