//! `infradev.toml`: the server's configuration. Strict (unknown keys are errors) and every
//! field documented; `infradev.example.toml` shows them all. Secrets never live in this file:
//! it names the files or environment variables that hold them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use secrecy::SecretString;
use serde::Deserialize;

use crate::service::app::matching::AgentPolicy;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address the HTTP server listens on.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// The directory holding tasks/, probes/ and runners/.
    #[serde(default = "default_root")]
    pub root: PathBuf,
    /// Where mirrors of the graded repositories and private work dirs live.
    #[serde(default = "default_work_dir")]
    pub work_dir: PathBuf,
    pub github: GitHubConfig,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub agents: AgentPolicy,
    #[serde(default)]
    pub worker: WorkerConfig,
    #[serde(default)]
    pub reconcile: ReconcileConfig,
    #[serde(default)]
    pub outbox: OutboxConfig,
    /// Remote engines grades can be handed to, and which tasks go where.
    #[serde(default)]
    pub backends: BackendsConfig,
    /// Largest webhook body accepted, in bytes (GitHub sends at most 25 MB).
    #[serde(default = "default_body_limit")]
    pub body_limit_bytes: usize,
    /// Grade pages and the dashboard.
    #[serde(default)]
    pub web: WebConfig,
}

/// `[web]`: the grade pages (`/grades/{id}`) and the dashboard (`/dashboard`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// The server's public URL (`https://grader.example.org`): each check run links to
    /// `<public_url>/grades/<job id>` as its details. Unset: check runs link nowhere.
    #[serde(default)]
    pub public_url: Option<String>,
    /// File holding the operator token, the credential for everything a PR author must not
    /// see (the full report, the downloads, the dashboard); else the variable
    /// `operator_token_env` holds it. Neither set: only the public pages are served.
    #[serde(default)]
    pub operator_token_file: Option<PathBuf>,
    #[serde(default)]
    pub operator_token_env: Option<String>,
}

/// Where the operator token is read from when `operator_token_env` is not given.
pub const DEFAULT_OPERATOR_TOKEN_ENV: &str = "INFRADEV_OPERATOR_TOKEN";

/// Operator tokens shorter than this are refused: the token is the only thing between a
/// PR author and the hidden parts of a report.
const MIN_OPERATOR_TOKEN: usize = 16;

impl WebConfig {
    /// The public URL without a trailing `/`, checked to be an http(s) URL.
    pub fn public_url(&self) -> anyhow::Result<Option<String>> {
        let Some(url) = &self.public_url else {
            return Ok(None);
        };
        let url = url.trim_end_matches('/');
        if !(url.starts_with("https://") || url.starts_with("http://")) || url.contains(['?', '#'])
        {
            bail!("web.public_url: {url:?} is not an http(s) URL without query or fragment");
        }
        Ok(Some(url.to_owned()))
    }

    /// The operator token, if one is configured (a file that is named must be readable and
    /// hold a token of at least 16 characters).
    pub fn operator_token(&self) -> anyhow::Result<Option<SecretString>> {
        let token = match &self.operator_token_file {
            Some(file) => Some(std::fs::read_to_string(file).with_context(|| {
                format!("web.operator_token_file: cannot read {}", file.display())
            })?),
            None => {
                let var = self
                    .operator_token_env
                    .as_deref()
                    .unwrap_or(DEFAULT_OPERATOR_TOKEN_ENV);
                std::env::var(var).ok()
            }
        };
        let Some(token) = token.map(|t| t.trim().to_owned()) else {
            return Ok(None);
        };
        if token.chars().count() < MIN_OPERATOR_TOKEN {
            bail!("the operator token is shorter than {MIN_OPERATOR_TOKEN} characters");
        }
        Ok(Some(SecretString::from(token)))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitHubConfig {
    /// REST API base URL.
    #[serde(default = "default_api_url")]
    pub api_url: String,
    /// The App's id.
    pub app_id: u64,
    /// PEM file with the App's private key; else the variable `private_key_env` holds the PEM.
    #[serde(default)]
    pub private_key_file: Option<PathBuf>,
    #[serde(default = "default_private_key_env")]
    pub private_key_env: String,
    /// File with webhook secrets, one per line (several during a rotation); else the variable
    /// `webhook_secrets_env` holds them, comma-separated.
    #[serde(default)]
    pub webhook_secrets_file: Option<PathBuf>,
    #[serde(default = "default_webhook_secrets_env")]
    pub webhook_secrets_env: String,
    /// Web URL repositories are cloned from (`https://HOST/` on GitHub Enterprise Server).
    #[serde(default = "default_web_url")]
    pub web_url: String,
    /// Git URL rewrites applied before fetching a PR head, like git's `insteadOf`
    /// (`"https://github.com/" = "https://mirror.internal/"`).
    #[serde(default)]
    pub git_url_rewrite: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite://path` (the embedded default) or `postgres://…` for several hosts.
    #[serde(default = "default_store_url")]
    pub url: String,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: default_store_url(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorName {
    Docker,
    Local,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    /// Where grades run.
    #[serde(default = "default_executor")]
    pub executor: ExecutorName,
    /// Grades run at the same time by this server. 0: this server does not grade (webhook
    /// intake, processing and reports only; another server on the same store grades).
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// How long a claimed job stays ours without renewal; a lapsed lease is resumed elsewhere.
    #[serde(default = "default_lease_s")]
    pub lease_s: u64,
    /// Interpreter of the local executor.
    #[serde(default = "default_python")]
    pub python: PathBuf,
    /// Wheel cache for task environments (Docker executor).
    #[serde(default)]
    pub wheels: Option<PathBuf>,
    /// Reruns of a failing official test or probe (flake handling) unless the task's
    /// manifests set their own; a result that changes across attempts is `flaky`.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// When the server stops (SIGTERM, Ctrl-C): how long running grades may take to finish
    /// before their jobs are handed back to the queue.
    #[serde(default = "default_drain_grace_s")]
    pub drain_grace_s: u64,
    /// Grade tasks that are not what their validation.json validated (other probes, other
    /// an edited task.toml, quarantined, never validated). Off: such a job ends as our error
    /// (a neutral check run), never as the agent's failure.
    #[serde(default)]
    pub allow_unvalidated: bool,
}

fn default_drain_grace_s() -> u64 {
    60
}

fn default_retries() -> u32 {
    crate::grade::DEFAULT_RETRIES
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            executor: default_executor(),
            concurrency: default_concurrency(),
            lease_s: default_lease_s(),
            python: default_python(),
            wheels: None,
            retries: default_retries(),
            drain_grace_s: default_drain_grace_s(),
            allow_unvalidated: false,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileConfig {
    /// Seconds between reconcile passes (resume lapsed jobs, deliver the outbox, redeliver).
    #[serde(default = "default_reconcile_s")]
    pub interval_s: u64,
    /// Ask GitHub for failed webhook deliveries and redeliver them.
    #[serde(default = "default_true")]
    pub redeliver_failed: bool,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        ReconcileConfig {
            interval_s: default_reconcile_s(),
            redeliver_failed: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxConfig {
    /// Attempts before a GitHub write is given up (and logged); retries back off exponentially.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// First backoff, in milliseconds; doubles per attempt unless GitHub says how long to wait.
    #[serde(default = "default_backoff_ms")]
    pub min_backoff_ms: u64,
    /// Longest wait between attempts, in seconds.
    #[serde(default = "default_max_backoff_s")]
    pub max_backoff_s: u64,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            max_attempts: default_attempts(),
            min_backoff_ms: default_backoff_ms(),
            max_backoff_s: default_max_backoff_s(),
        }
    }
}

/// `[backends]`: scale-out. With no routes every grade runs on this server's workers.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendsConfig {
    /// The server's URL as remote runs reach it: results are posted to
    /// `<result_url>/jobs/<id>/result`. Required when a route names a remote backend.
    #[serde(default)]
    pub result_url: Option<String>,
    /// `[[backends.route]]`: the first rule the task matches picks its backend; no match: local.
    #[serde(default, rename = "route")]
    pub routes: Vec<crate::service::backend::Route>,
    /// Seconds a dispatch may wait in the engine's queue (on top of twice its time limit)
    /// before it counts as lost; also how long its result token stays valid.
    #[serde(default = "default_queue_timeout_s")]
    pub queue_timeout_s: u64,
    /// Dispatches in flight at once per backend (each prepares its bundle and submits; the
    /// engine's round trip, not our CPU, is what they wait on).
    #[serde(default = "default_dispatch_concurrency")]
    pub dispatch_concurrency: usize,
    /// Seconds a run's result may arrive after the engine says the run ended.
    #[serde(default = "default_result_grace_s")]
    pub result_grace_s: u64,
    /// Seconds between passes over the engine's view of open dispatches (webhooks wake it
    /// sooner for GitHub Actions).
    #[serde(default = "default_follow_s")]
    pub follow_interval_s: u64,
    #[serde(default)]
    pub slurm: Option<crate::service::backend::slurm::SlurmConfig>,
    #[serde(default)]
    pub github_actions: Option<crate::service::backend::github_actions::ActionsConfig>,
}

impl BackendsConfig {
    /// Every route must name a configured backend, and remote ones need `result_url`.
    pub fn check(&self) -> anyhow::Result<()> {
        use crate::service::backend::BackendName;
        for (i, route) in self.routes.iter().enumerate() {
            let configured = match route.backend {
                BackendName::Local => true,
                BackendName::Slurm => self.slurm.is_some(),
                BackendName::GitHubActions => self.github_actions.is_some(),
            };
            if !configured {
                bail!(
                    "backends.route[{i}] names `{}`, but [backends.{}] is not configured",
                    route.backend.as_str(),
                    route.backend.as_str().replace('-', "_")
                );
            }
            if route.backend != BackendName::Local && self.result_url.is_none() {
                bail!(
                    "backends.route[{i}] hands grades to `{}`: set backends.result_url, the URL its runs post results to",
                    route.backend.as_str()
                );
            }
        }
        if let Some(slurm) = &self.slurm {
            slurm
                .validate()
                .map_err(|e| anyhow::anyhow!("backends.slurm: {e}"))?;
        }
        Ok(())
    }
}

/// The secrets the server needs, loaded from files or the environment, never logged.
pub struct Secrets {
    pub private_key: SecretString,
    pub webhook_secrets: Vec<SecretString>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Secrets {{ private_key: [hidden], webhook_secrets: [{} hidden] }}",
            self.webhook_secrets.len()
        )
    }
}

impl ServerConfig {
    /// Reads and checks a config file; errors name the file, the line and the field.
    pub fn load(path: &Path) -> anyhow::Result<ServerConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        ServerConfig::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> anyhow::Result<ServerConfig> {
        let config: ServerConfig = toml::from_str(text)
            .map_err(|e| crate::task::ManifestError::from_toml(path, text, &e))?;
        config
            .backends
            .check()
            .with_context(|| format!("{}", path.display()))?;
        config
            .web
            .public_url()
            .with_context(|| format!("{}", path.display()))?;
        Ok(config)
    }

    /// Loads the secrets this config points at.
    pub fn secrets(&self) -> anyhow::Result<Secrets> {
        let gh = &self.github;
        let private_key = match &gh.private_key_file {
            Some(file) => std::fs::read_to_string(file)
                .with_context(|| format!("cannot read the App private key {}", file.display()))?,
            None => std::env::var(&gh.private_key_env).with_context(|| {
                format!(
                    "no App private key: set github.private_key_file or ${}",
                    gh.private_key_env
                )
            })?,
        };
        let raw = match &gh.webhook_secrets_file {
            Some(file) => std::fs::read_to_string(file)
                .with_context(|| format!("cannot read the webhook secrets {}", file.display()))?,
            None => std::env::var(&gh.webhook_secrets_env)
                .with_context(|| {
                    format!(
                        "no webhook secret: set github.webhook_secrets_file or ${}",
                        gh.webhook_secrets_env
                    )
                })?
                .replace(',', "\n"),
        };
        let webhook_secrets: Vec<SecretString> = raw
            .lines()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| SecretString::from(s.to_owned()))
            .collect();
        if webhook_secrets.is_empty() {
            bail!("the webhook secret list is empty");
        }
        Ok(Secrets {
            private_key: SecretString::from(private_key),
            webhook_secrets,
        })
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}
fn default_root() -> PathBuf {
    PathBuf::from(".")
}
fn default_work_dir() -> PathBuf {
    PathBuf::from("infradev-work")
}
fn default_body_limit() -> usize {
    25 * 1024 * 1024
}
fn default_api_url() -> String {
    "https://api.github.com".into()
}
fn default_web_url() -> String {
    "https://github.com/".into()
}
fn default_private_key_env() -> String {
    "INFRADEV_GITHUB_PRIVATE_KEY".into()
}
fn default_webhook_secrets_env() -> String {
    "INFRADEV_WEBHOOK_SECRETS".into()
}
fn default_store_url() -> String {
    "sqlite://infradev.db".into()
}
fn default_executor() -> ExecutorName {
    ExecutorName::Docker
}
fn default_concurrency() -> usize {
    1
}
fn default_lease_s() -> u64 {
    1800
}
fn default_python() -> PathBuf {
    PathBuf::from("/usr/bin/python3")
}
fn default_reconcile_s() -> u64 {
    300
}
fn default_true() -> bool {
    true
}
fn default_queue_timeout_s() -> u64 {
    24 * 3600
}
fn default_dispatch_concurrency() -> usize {
    4
}
fn default_result_grace_s() -> u64 {
    30
}
fn default_follow_s() -> u64 {
    15
}
fn default_attempts() -> u32 {
    12
}
fn default_backoff_ms() -> u64 {
    1000
}
fn default_max_backoff_s() -> u64 {
    900
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_config_parses() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/infradev.example.toml"
        ));
        let config = ServerConfig::load(path).expect("infradev.example.toml parses");
        assert_eq!(config.github.api_url, "https://api.github.com");
        assert!(config.store.url.starts_with("sqlite://"));
        assert_eq!(config.worker.drain_grace_s, 60);
    }

    #[test]
    fn a_route_to_an_unconfigured_backend_is_refused_by_name() {
        let base = "[github]\napp_id = 1\n";
        let err = ServerConfig::parse(
            Path::new("x.toml"),
            &format!("{base}[backends]\nresult_url = \"http://s\"\n[[backends.route]]\nbackend = \"slurm\"\n"),
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains(
                "backends.route[0] names `slurm`, but [backends.slurm] is not configured"
            ),
            "{err:#}"
        );
        let err = ServerConfig::parse(
            Path::new("x.toml"),
            &format!("{base}[[backends.route]]\nbackend = \"github-actions\"\n[backends.github_actions]\nrepository = \"o/g\"\n"),
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("set backends.result_url"),
            "{err:#}"
        );
        let err = ServerConfig::parse(
            Path::new("x.toml"),
            &format!("{base}[[backends.route]]\nbackend = \"kubernetes\"\n"),
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("kubernetes"), "{err:#}");
        let ok = ServerConfig::parse(
            Path::new("x.toml"),
            &format!("{base}[backends]\nresult_url = \"http://s\"\n[[backends.route]]\nbackend = \"github-actions\"\nmin_gpus = 1\n[backends.github_actions]\nrepository = \"o/g\"\n"),
        )
        .unwrap();
        assert_eq!(ok.backends.routes.len(), 1);
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = ServerConfig::parse(Path::new("x.toml"), "[github]\napp_id = 1\ncolour = 2\n")
            .unwrap_err();
        assert!(
            err.to_string().starts_with("x.toml:3:1: field `colour`"),
            "{err}"
        );
    }
}
