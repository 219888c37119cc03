//! The service harness the stories share: a fake github.com, a real store (SQLite or
//! PostgreSQL), the real service, and the example repository served by SHA.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use infradev::service::app::service::{Service, Tuning};
use infradev::service::config::{Secrets, ServerConfig};
use infradev::service::github::RetryPolicy;
use secrecy::SecretString;
use serde_json::Value;

use super::fake_github::{FakeCheckRun, FakeGitHub, FakePull, HeadRepo};
use super::payloads::{self, Author, FORK_OWNER, OWNER, REPO};

pub const INSTALLATION: u64 = 7_777_777;
pub const SECRET: &str = "story-webhook-secret";
pub const TASK: &str = super::TASK;
pub const REPO_FULL: &str = "infradev-mirrors/minicache";
/// Long enough for a grade of the example task on a loaded 2-core machine.
pub const GRADE_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The example repository's commits the stories push.
pub struct Heads {
    pub base: String,
    pub wrong: String,
    pub broken: String,
    pub reference: String,
}

pub struct World {
    pub fake: FakeGitHub,
    pub service: Option<Service>,
    pub dir: tempfile::TempDir,
    pub store_url: String,
    pub heads: Heads,
    pub http: reqwest::Client,
    pub lease_s: u64,
    /// `[worker] drain_grace_s`: how long a stopping service lets running grades finish.
    pub drain_grace_s: u64,
    pub redeliver: bool,
    /// `[worker] allow_unvalidated`: grade tasks that are not what validation validated.
    pub allow_unvalidated: bool,
    /// tasks/, probes/ and runners/ the service reads.
    pub root: PathBuf,
    /// The address the service listens on.
    pub listen: String,
    /// TOML appended to the service's configuration (`[backends]` …).
    pub extra_config: String,
    /// How the service waits before retrying GitHub: GitHub's waits shrunk a hundredfold
    /// unless a story needs them as asked.
    pub retry: RetryPolicy,
}

pub fn rev(repo: &std::path::Path, name: &str) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", name])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A fresh PostgreSQL database for one story, or `None` (loudly; a failure under CI=true).
pub fn postgres_database() -> Option<String> {
    let Ok(url) = std::env::var("INFRADEV_TEST_PG_URL") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true and INFRADEV_TEST_PG_URL is unset (runners/ensure-postgres.sh)"
        );
        eprintln!(
            "NOT RUN on PostgreSQL: INFRADEV_TEST_PG_URL is unset (runners/ensure-postgres.sh starts one)"
        );
        return None;
    };
    let name = format!("story_{}", uuid::Uuid::new_v4().simple());
    let ok = Command::new("psql")
        .arg(&url)
        .args(["-q", "-c", &format!("CREATE DATABASE {name}")])
        .status()
        .unwrap();
    assert!(ok.success(), "cannot create a database on {url}");
    let (base, _) = url.rsplit_once('/').unwrap();
    Some(format!("{base}/{name}"))
}

impl World {
    pub async fn new(backend: Backend) -> Option<World> {
        if !super::docker_ready() {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let store_url = match backend {
            Backend::Sqlite => format!("sqlite://{}", dir.path().join("infradev.db").display()),
            Backend::Postgres => postgres_database()?,
        };
        // The PR heads and the task's commits are served from the example repository, which the
        // clone URLs are rewritten to (like git's insteadOf).
        let example = super::example_repo();
        static SERVE_BY_SHA: std::sync::Once = std::sync::Once::new();
        SERVE_BY_SHA.call_once(|| {
            // GitHub serves any reachable commit by SHA; a local repository must be told to.
            let ok = Command::new("git")
                .arg("-C")
                .arg(example)
                .args(["config", "uploadpack.allowAnySHA1InWant", "true"])
                .status()
                .unwrap();
            assert!(ok.success());
        });
        for owner in [OWNER, FORK_OWNER] {
            std::fs::create_dir_all(dir.path().join("gh").join(owner)).unwrap();
            std::os::unix::fs::symlink(
                example,
                dir.path()
                    .join("gh")
                    .join(owner)
                    .join(format!("{REPO}.git")),
            )
            .unwrap();
        }
        let heads = Heads {
            base: rev(example, "base"),
            wrong: rev(example, "submission/wrong"),
            broken: rev(example, "submission/broken"),
            reference: rev(example, "submission/reference"),
        };
        let fake = FakeGitHub::start().await;
        fake.add_installation(INSTALLATION, &[REPO_FULL]);
        Some(World {
            fake,
            service: None,
            dir,
            store_url,
            heads,
            http: reqwest::Client::new(),
            lease_s: 600,
            drain_grace_s: 60,
            redeliver: false,
            allow_unvalidated: false,
            root: super::root(),
            listen: "127.0.0.1:0".into(),
            extra_config: String::new(),
            retry: RetryPolicy {
                min: Duration::from_millis(20),
                max: Duration::from_millis(500),
                scale: 0.01,
            },
        })
    }

    pub fn config(&self) -> ServerConfig {
        ServerConfig::parse(&PathBuf::from("story.toml"), &self.config_text(""))
            .expect("story config")
    }

    /// The service's configuration file; `github_extra` goes into its `[github]` table.
    pub fn config_text(&self, github_extra: &str) -> String {
        format!(
            r#"
listen = "{listen}"
root = "{root}"
work_dir = "{work}"
body_limit_bytes = 1048576
[github]
api_url = "{api}"
app_id = {app_id}
{github_extra}
[github.git_url_rewrite]
"https://github.com/" = "file://{gh}/"
[store]
url = "{store}"
[worker]
lease_s = {lease}
drain_grace_s = {grace}
allow_unvalidated = {allow_unvalidated}
[reconcile]
interval_s = 1
redeliver_failed = {redeliver}
[outbox]
max_attempts = 30
min_backoff_ms = 50
max_backoff_s = 1
{extra}
"#,
            listen = self.listen,
            extra = self.extra_config,
            root = self.root.display(),
            work = self.dir.path().join("work").display(),
            api = self.fake.url(),
            app_id = self.fake.app_id(),
            gh = self.dir.path().join("gh").display(),
            store = self.store_url,
            lease = self.lease_s,
            grace = self.drain_grace_s,
            allow_unvalidated = self.allow_unvalidated,
            redeliver = self.redeliver,
        )
    }

    pub async fn start(&mut self) {
        let secrets = Secrets {
            private_key: self.fake.private_key_pem(),
            webhook_secrets: vec![SecretString::from(SECRET.to_owned())],
        };
        let tuning = Tuning {
            retry: self.retry,
            poll: Duration::from_millis(200),
            follow: Duration::from_millis(300),
        };
        let service = Service::start(self.config(), secrets, tuning)
            .await
            .expect("the service starts");
        self.fake
            .set_webhook_target(&format!("http://{}/webhook", service.addr()), SECRET);
        self.service = Some(service);
    }

    /// Stops the service at once, as a crash would.
    pub async fn kill(&mut self) {
        if let Some(service) = self.service.take() {
            service.abort().await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!(
            "http://{}{path}",
            self.service.as_ref().expect("started").addr()
        )
    }

    /// Delivers a signed event the way GitHub does (through the fake, which logs the delivery).
    pub async fn send(&self, event: &str, payload: Value) -> u16 {
        self.fake.send_webhook(event, payload).await.status_code
    }

    /// Posts raw bytes with explicit headers (for signature and duplicate stories).
    pub async fn post(
        &self,
        event: &str,
        delivery: &str,
        body: Vec<u8>,
        signature: Option<&str>,
    ) -> u16 {
        if body.len() > 1024 * 1024 {
            return self.post_oversized(event, delivery, &body, signature).await;
        }
        let client = self.http.clone();
        let mut req = client
            .post(self.url("/webhook"))
            .header("X-GitHub-Event", event)
            .header("X-GitHub-Delivery", delivery);
        if let Some(sig) = signature {
            req = req.header("X-Hub-Signature-256", sig);
        }
        req.body(body)
            .send()
            .await
            .expect("POST /webhook")
            .status()
            .as_u16()
    }

    /// The server answers an oversized body before reading it and then closes the
    /// connection, so an HTTP client that writes the whole body first can see a broken
    /// pipe instead of the answer. Here the answer is read while the body is written.
    async fn post_oversized(
        &self,
        event: &str,
        delivery: &str,
        body: &[u8],
        signature: Option<&str>,
    ) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.service.as_ref().expect("started").addr();
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (mut reader, mut writer) = stream.into_split();
        let mut head = format!(
            "POST /webhook HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             X-GitHub-Event: {event}\r\nX-GitHub-Delivery: {delivery}\r\n\
             Content-Length: {}\r\n",
            body.len()
        );
        if let Some(sig) = signature {
            head.push_str(&format!("X-Hub-Signature-256: {sig}\r\n"));
        }
        head.push_str("\r\n");
        let body = body.to_vec();
        let write = tokio::spawn(async move {
            // The server may close before all of it is written; that is the point.
            let _ = writer.write_all(head.as_bytes()).await;
            let _ = writer.write_all(&body).await;
        });
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        let status = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => break None,
                    Ok(n) => answer.extend_from_slice(&buf[..n]),
                }
                if let Some(line_end) = answer.windows(2).position(|w| w == b"\r\n") {
                    let line = String::from_utf8_lossy(&answer[..line_end]).to_string();
                    break line.split(' ').nth(1).and_then(|code| code.parse().ok());
                }
            }
        })
        .await
        .expect("an answer to the oversized POST within 30 s");
        write.abort();
        status.unwrap_or_else(|| {
            panic!(
                "POST /webhook: no status line before the server closed: {:?}",
                String::from_utf8_lossy(&answer)
            )
        })
    }

    pub fn seed_agent_pull(&self, number: u64, head: &str) {
        self.seed_agent_pull_for(number, head, TASK);
    }

    /// An agent's pull request that names `task` (its base branch is `infradev/<task>`).
    pub fn seed_agent_pull_for(&self, number: u64, head: &str, task: &str) {
        let mut pull = FakePull::new(number, head);
        pull.head_ref = "agent/prefix-caching".into();
        pull.base_ref = format!("infradev/{task}");
        pull.head_repo = HeadRepo::Fork(format!("{FORK_OWNER}/{REPO}"));
        pull.author = format!("{FORK_OWNER}[bot]");
        pull.author_is_bot = true;
        self.fake.add_pull(REPO_FULL, pull);
    }

    pub fn pull_event(
        &self,
        action_file: &str,
        number: u64,
        head: &str,
        author: Author<'_>,
    ) -> Value {
        payloads::pull_request(action_file, INSTALLATION, number, head, TASK, author)
    }

    pub fn runs_for(&self, head: &str) -> Vec<FakeCheckRun> {
        self.fake
            .check_runs(REPO_FULL)
            .into_iter()
            .filter(|r| r.head_sha == head)
            .collect()
    }

    /// Waits until `head` has `n` completed InfraDev check runs and returns them.
    pub async fn completed_runs(&self, head: &str, n: usize) -> Vec<FakeCheckRun> {
        self.wait(&format!("{n} completed check run(s) on {head}"), || {
            let done: Vec<_> = self
                .runs_for(head)
                .into_iter()
                .filter(|r| r.status == "completed")
                .collect();
            (done.len() >= n).then_some(done)
        })
        .await
    }

    /// Waits until `head` has `n` completed check runs of jobs (not the neutral "no task" or
    /// "waiting" checks) and returns them.
    pub async fn completed_job_runs(&self, head: &str, n: usize) -> Vec<FakeCheckRun> {
        self.wait(&format!("{n} completed grade(s) on {head}"), || {
            let done: Vec<_> = self
                .job_runs(head)
                .into_iter()
                .filter(|r| r.status == "completed")
                .collect();
            (done.len() >= n).then_some(done)
        })
        .await
    }

    /// The check runs of jobs on `head` (their `external_id` is the job id).
    pub fn job_runs(&self, head: &str) -> Vec<FakeCheckRun> {
        self.runs_for(head)
            .into_iter()
            .filter(|r| {
                r.external_id
                    .as_deref()
                    .is_some_and(|e| e.parse::<i64>().is_ok())
            })
            .collect()
    }

    pub async fn wait<T>(&self, what: &str, f: impl Fn() -> Option<T>) -> T {
        let started = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            if started.elapsed() > GRADE_TIMEOUT {
                let runs: Vec<_> = self
                    .fake
                    .check_runs(REPO_FULL)
                    .iter()
                    .map(|r| (r.head_sha.clone(), r.status.clone(), r.conclusion.clone()))
                    .collect();
                panic!(
                    "timed out waiting for {what}; check runs: {runs:?}; violations: {:?}",
                    self.fake.violations()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Nothing we sent broke the API description, and nothing from the probes left us.
    pub fn assert_clean(&self) {
        self.fake.assert_no_violations();
        let sources = infradev::task::Registry::resolve(&super::root(), TASK, None)
            .unwrap()
            .probes
            .sources()
            .unwrap();
        for request in self.fake.requests() {
            let body = request.body.map(|b| b.to_string()).unwrap_or_default();
            for canary in ["INFRADEV-PROBE-CANARY", "PROBE-SECRET-"] {
                assert!(
                    !body.contains(canary),
                    "{canary} sent to GitHub in {} {}",
                    request.method,
                    request.path
                );
            }
            for (path, text) in &sources {
                for line in text
                    .lines()
                    .map(str::trim)
                    .filter(|l| l.len() >= 40 && l.contains('('))
                {
                    assert!(
                        !body.contains(line),
                        "a line of {path} was sent to GitHub: {line}"
                    );
                }
            }
        }
    }

    pub fn sticky_comments(&self, number: u64) -> Vec<super::fake_github::FakeComment> {
        self.fake
            .comments(REPO_FULL, number)
            .into_iter()
            .filter(|c| c.by_app && c.body.contains("<!-- infradev:sticky -->"))
            .collect()
    }
}

pub fn statuses(run: &FakeCheckRun) -> Vec<String> {
    run.history
        .iter()
        .filter_map(|h| {
            h.get("status")
                .and_then(|s| s.as_str())
                .map(str::to_owned)
                .or_else(|| h.get("conclusion").map(|_| "completed".to_owned()))
        })
        .collect()
}

/// A TCP port free right now on 127.0.0.1, for a service whose URL must be known before it
/// starts (remote runs post results to it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl World {
    /// Opens the story's store, for looking at what the service recorded.
    pub async fn store(&self) -> infradev::service::store::Store {
        infradev::service::store::Store::open(&self.store_url)
            .await
            .expect("the store opens")
    }

    /// Every job of pull `number`, by id.
    pub async fn jobs(&self, number: u64) -> Vec<infradev::service::store::Job> {
        let store = self.store().await;
        let jobs = store.jobs_for_pull(REPO_FULL, number).await.unwrap();
        store.close().await;
        jobs
    }

    /// Every result posted for job `id`.
    pub async fn results(&self, id: i64) -> Vec<infradev::service::store::JobResult> {
        let store = self.store().await;
        let results = store
            .job_results(infradev::service::store::JobId(id))
            .await
            .unwrap();
        store.close().await;
        results
    }
}

impl World {
    /// Delivers an event the way GitHub does and waits until the service has processed it
    /// (its effects are committed); returns the fake's record of the delivery.
    pub async fn send_processed(
        &self,
        event: &str,
        payload: Value,
    ) -> super::fake_github::FakeDelivery {
        let delivery = self.fake.send_webhook(event, payload).await;
        assert_eq!(delivery.status_code, 202, "{event} was not accepted");
        let store = self.store().await;
        let started = Instant::now();
        loop {
            let stored = store.get_delivery(&delivery.guid).await.unwrap();
            if stored.is_some_and(|d| d.processed_at.is_some()) {
                break;
            }
            assert!(
                started.elapsed() < GRADE_TIMEOUT,
                "{event} delivery {} was never processed",
                delivery.guid
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        store.close().await;
        delivery
    }

    /// The store's record of pull `number` of the story's repository.
    pub async fn stored_pull(&self, number: u64) -> infradev::service::store::Pull {
        let store = self.store().await;
        let pull = store.get_pull(REPO_FULL, number).await.unwrap();
        store.close().await;
        pull.unwrap_or_else(|| panic!("PR #{number} is not in the store"))
    }

    /// A human's pull request (`alice`, from a fork) that names the task and carries `labels`.
    pub fn seed_human_pull(&self, number: u64, head: &str, labels: &[&str]) -> FakePull {
        let mut pull = FakePull::new(number, head);
        pull.head_ref = "feature/prefix-caching".into();
        pull.base_ref = format!("infradev/{TASK}");
        pull.head_repo = HeadRepo::Fork(format!("{FORK_OWNER}/{REPO}"));
        pull.author = "alice".into();
        pull.labels = labels.iter().map(|l| (*l).to_owned()).collect();
        self.fake.add_pull(REPO_FULL, pull.clone());
        pull
    }
}

impl World {
    /// Serves tasks/, probes/ and runners/ from a root of the story's own (links to the
    /// real ones), so that the sandboxes of its grades can be told from other stories'
    /// by the paths they mount ([`World::sandboxes`]).
    pub fn use_private_root(&mut self) {
        let root = self.dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        for dir in ["tasks", "probes", "runners"] {
            std::os::unix::fs::symlink(super::root().join(dir), root.join(dir)).unwrap();
        }
        self.root = root;
    }

    /// The Docker containers (any state) of this story's grades: those that mount something
    /// under its private root ([`World::use_private_root`]).
    pub fn sandboxes(&self) -> Vec<String> {
        let ids = Command::new("docker")
            .args(["ps", "-aq", "--filter", "label=org.infradev.managed"])
            .output()
            .unwrap();
        let root = self.root.display().to_string();
        String::from_utf8_lossy(&ids.stdout)
            .split_whitespace()
            .filter(|id| {
                let mounts = Command::new("docker")
                    .args([
                        "inspect",
                        "--format",
                        "{{range .HostConfig.Mounts}}{{.Source}}\n{{end}}",
                        id,
                    ])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&mounts.stdout)
                    .lines()
                    .any(|source| source.starts_with(&root))
            })
            .map(str::to_owned)
            .collect()
    }

    /// Waits until the outbox has nothing pending: every GitHub write decided so far was
    /// made (or given up on).
    pub async fn outbox_idle(&self) {
        let store = self.store().await;
        let started = Instant::now();
        while store.pending_outbox_count().await.unwrap() > 0 {
            assert!(
                started.elapsed() < GRADE_TIMEOUT,
                "the outbox never emptied"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        store.close().await;
    }
}
