//! `infradev serve` end to end, told as stories: real HTTP, real HMAC, real JWT, a real store
//! (SQLite and PostgreSQL), real git and real Docker; only github.com is faked, and the fake
//! checks every request against GitHub's OpenAPI description.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use infradev::app::service::{Service, Tuning};
use infradev::config::{Secrets, ServerConfig};
use infradev::github::RetryPolicy;
use secrecy::SecretString;
use serde_json::Value;
use support::fake_github::{Failure, FakeCheckRun, FakeGitHub, FakePull, HeadRepo};
use support::payloads::{self, Author, FORK_OWNER, OWNER, REPO};

const INSTALLATION: u64 = 7_777_777;
const SECRET: &str = "story-webhook-secret";
const TASK: &str = support::TASK;
const REPO_FULL: &str = "infradev-mirrors/minicache";
/// Long enough for a grade of the example task on a loaded 2-core machine.
const GRADE_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

/// The example repository's commits the stories push.
struct Heads {
    base: String,
    wrong: String,
    broken: String,
    reference: String,
}

struct World {
    fake: FakeGitHub,
    service: Option<Service>,
    dir: tempfile::TempDir,
    store_url: String,
    heads: Heads,
    http: reqwest::Client,
    lease_s: u64,
    redeliver: bool,
    /// tasks/, probes/ and runners/ the service reads.
    root: PathBuf,
}

fn rev(repo: &std::path::Path, name: &str) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", name])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A fresh PostgreSQL database for one story, or `None` (loudly; a failure under CI=true).
fn postgres_database() -> Option<String> {
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
    async fn new(backend: Backend) -> Option<World> {
        if !support::docker_ready() {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let store_url = match backend {
            Backend::Sqlite => format!("sqlite://{}", dir.path().join("infradev.db").display()),
            Backend::Postgres => postgres_database()?,
        };
        // The PR heads and the task's commits are served from the example repository, which the
        // clone URLs are rewritten to (like git's insteadOf).
        let example = support::example_repo();
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
            redeliver: false,
            root: support::root(),
        })
    }

    fn config(&self) -> ServerConfig {
        let text = format!(
            r#"
listen = "127.0.0.1:0"
root = "{root}"
work_dir = "{work}"
body_limit_bytes = 1048576
[github]
api_url = "{api}"
app_id = {app_id}
[github.git_url_rewrite]
"https://github.com/" = "file://{gh}/"
[store]
url = "{store}"
[worker]
lease_s = {lease}
[reconcile]
interval_s = 1
redeliver_failed = {redeliver}
[outbox]
max_attempts = 30
min_backoff_ms = 50
max_backoff_s = 1
"#,
            root = self.root.display(),
            work = self.dir.path().join("work").display(),
            api = self.fake.url(),
            app_id = self.fake.app_id(),
            gh = self.dir.path().join("gh").display(),
            store = self.store_url,
            lease = self.lease_s,
            redeliver = self.redeliver,
        );
        ServerConfig::parse(&PathBuf::from("story.toml"), &text).expect("story config")
    }

    async fn start(&mut self) {
        let secrets = Secrets {
            private_key: self.fake.private_key_pem(),
            webhook_secrets: vec![SecretString::from(SECRET.to_owned())],
        };
        let tuning = Tuning {
            retry: RetryPolicy {
                min: Duration::from_millis(20),
                max: Duration::from_millis(500),
                scale: 0.01,
            },
            poll: Duration::from_millis(200),
        };
        let service = Service::start(self.config(), secrets, tuning)
            .await
            .expect("the service starts");
        self.fake
            .set_webhook_target(&format!("http://{}/webhook", service.addr()), SECRET);
        self.service = Some(service);
    }

    /// Stops the service at once, as a crash would.
    async fn kill(&mut self) {
        if let Some(service) = self.service.take() {
            service.abort().await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!(
            "http://{}{path}",
            self.service.as_ref().expect("started").addr()
        )
    }

    /// Delivers a signed event the way GitHub does (through the fake, which logs the delivery).
    async fn send(&self, event: &str, payload: Value) -> u16 {
        self.fake.send_webhook(event, payload).await.status_code
    }

    /// Posts raw bytes with explicit headers (for signature and duplicate stories).
    async fn post(
        &self,
        event: &str,
        delivery: &str,
        body: Vec<u8>,
        signature: Option<&str>,
    ) -> u16 {
        // The server answers an oversized body before reading it and then closes the
        // connection; a connection of its own keeps that close away from later requests.
        let client = if body.len() > 1024 * 1024 {
            reqwest::Client::new()
        } else {
            self.http.clone()
        };
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

    fn seed_agent_pull(&self, number: u64, head: &str) {
        let mut pull = FakePull::new(number, head);
        pull.head_ref = "agent/prefix-caching".into();
        pull.base_ref = format!("infradev/{TASK}");
        pull.head_repo = HeadRepo::Fork(format!("{FORK_OWNER}/{REPO}"));
        pull.author = format!("{FORK_OWNER}[bot]");
        pull.author_is_bot = true;
        self.fake.add_pull(REPO_FULL, pull);
    }

    fn pull_event(&self, action_file: &str, number: u64, head: &str, author: Author<'_>) -> Value {
        payloads::pull_request(action_file, INSTALLATION, number, head, TASK, author)
    }

    fn runs_for(&self, head: &str) -> Vec<FakeCheckRun> {
        self.fake
            .check_runs(REPO_FULL)
            .into_iter()
            .filter(|r| r.head_sha == head)
            .collect()
    }

    /// Waits until `head` has `n` completed InfraDev check runs and returns them.
    async fn completed_runs(&self, head: &str, n: usize) -> Vec<FakeCheckRun> {
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

    async fn wait<T>(&self, what: &str, f: impl Fn() -> Option<T>) -> T {
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
    fn assert_clean(&self) {
        self.fake.assert_no_violations();
        let sources = infradev::task::Registry::resolve(&support::root(), TASK, None)
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

    fn sticky_comments(&self, number: u64) -> Vec<support::fake_github::FakeComment> {
        self.fake
            .comments(REPO_FULL, number)
            .into_iter()
            .filter(|c| c.by_app && c.body.contains("<!-- infradev:sticky -->"))
            .collect()
    }
}

fn statuses(run: &FakeCheckRun) -> Vec<String> {
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

macro_rules! stories {
    ($($name:ident),* $(,)?) => {
        mod sqlite { $(#[tokio::test(flavor = "multi_thread")] async fn $name() { super::$name(super::Backend::Sqlite).await } )* }
        mod postgres { $(#[tokio::test(flavor = "multi_thread")] async fn $name() { super::$name(super::Backend::Postgres).await } )* }
    };
}

stories!(
    an_agent_pr_is_graded_and_reported,
    a_push_cancels_the_old_head_and_edits_the_same_comment,
    reruns_and_the_regrade_button_grade_again,
    a_human_pr_waits_for_a_maintainer,
    bad_signatures_and_duplicates_change_nothing,
    github_failures_are_retried_until_delivered_once,
    a_killed_server_resumes_the_job_and_reports_once,
    an_agent_pr_without_a_task_gets_a_neutral_check,
    failed_deliveries_are_redelivered_by_reconcile,
    an_infrastructure_fault_is_retried_then_reported_neutral,
);

async fn an_agent_pr_is_graded_and_reported(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    w.seed_agent_pull(2, &w.heads.wrong);
    assert_eq!(
        w.send(
            "pull_request",
            w.pull_event("opened.json", 2, &w.heads.wrong, Author::Agent)
        )
        .await,
        202
    );
    let runs = w.completed_runs(&w.heads.wrong, 1).await;
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    assert_eq!(
        statuses(run),
        ["queued", "in_progress", "completed"],
        "{:#?}",
        run.history
    );
    assert!(
        run.title
            .as_deref()
            .unwrap_or_default()
            .to_lowercase()
            .contains("probe"),
        "{:?}",
        run.title
    );
    assert_eq!(run.actions.len(), 1, "a Re-grade button");
    let comments = w
        .wait("the sticky comment", || {
            Some(w.sticky_comments(2)).filter(|c| !c.is_empty())
        })
        .await;
    assert_eq!(comments.len(), 1);
    for category in ["memory", "time", "state"] {
        assert!(
            comments[0].body.contains(category),
            "the comment lists {category}:\n{}",
            comments[0].body
        );
    }
    w.assert_clean();
}

async fn a_push_cancels_the_old_head_and_edits_the_same_comment(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    w.seed_agent_pull(3, &w.heads.wrong);
    w.send(
        "pull_request",
        w.pull_event("opened.json", 3, &w.heads.wrong, Author::Agent),
    )
    .await;
    let first = w.completed_runs(&w.heads.wrong, 1).await;
    let comment = w
        .wait("the first comment", || {
            w.sticky_comments(3).first().cloned()
        })
        .await;
    // Push the reference, then push again before it can finish: the middle head is cancelled.
    w.seed_agent_pull(3, &w.heads.reference);
    w.send(
        "pull_request",
        w.pull_event("synchronize.json", 3, &w.heads.reference, Author::Agent),
    )
    .await;
    let second = w.completed_runs(&w.heads.reference, 1).await;
    assert_eq!(
        second[0].conclusion.as_deref(),
        Some("success"),
        "{:?}",
        second[0].title
    );
    assert_eq!(first[0].conclusion.as_deref(), Some("failure"));
    let comments = w
        .wait("the edited comment", || {
            let c = w.sticky_comments(3);
            (c.len() == 1 && c[0].body.contains(&w.heads.reference[..12])).then_some(c)
        })
        .await;
    assert_eq!(
        comments[0].id, comment.id,
        "the same comment, edited in place"
    );
    assert!(!comments[0].edits.is_empty());

    // Two pushes in a row: the first head's grade is cancelled, superseded by the second.
    w.seed_agent_pull(3, &w.heads.base);
    w.send(
        "pull_request",
        w.pull_event("synchronize.json", 3, &w.heads.broken, Author::Agent),
    )
    .await;
    w.send(
        "pull_request",
        w.pull_event("synchronize.json", 3, &w.heads.base, Author::Agent),
    )
    .await;
    let cancelled = w
        .wait("the superseded head's check run cancelled", || {
            w.runs_for(&w.heads.broken)
                .into_iter()
                .find(|r| r.conclusion.as_deref() == Some("cancelled"))
        })
        .await;
    assert!(
        cancelled
            .title
            .as_deref()
            .unwrap_or_default()
            .contains("superseded"),
        "{:?}",
        cancelled.title
    );
    let last = w.completed_runs(&w.heads.base, 1).await;
    assert_eq!(
        last[0].conclusion.as_deref(),
        Some("failure"),
        "the base fails its FAIL_TO_PASS tests"
    );
    let comments = w
        .wait("the comment edited for the last head", || {
            let c = w.sticky_comments(3);
            (c.len() == 1 && c[0].body.contains(&w.heads.base[..12])).then_some(c)
        })
        .await;
    assert_eq!(comments[0].id, comment.id);
    assert!(cancelled.external_id.is_some());
    w.assert_clean();
}

async fn reruns_and_the_regrade_button_grade_again(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    let head = w.heads.reference.clone();
    w.seed_agent_pull(4, &head);
    w.send(
        "pull_request",
        w.pull_event("opened.json", 4, &head, Author::Agent),
    )
    .await;
    let first = w.completed_runs(&head, 1).await;
    let external = first[0].external_id.clone().unwrap();
    // Fork heads: GitHub sends check events with an empty pull_requests list; the head index
    // finds the PR.
    w.send(
        "check_run",
        payloads::check_run("rerequested.json", INSTALLATION, &head, &external),
    )
    .await;
    w.completed_runs(&head, 2).await;
    let mut button = payloads::check_run("requested_action.json", INSTALLATION, &head, &external);
    button["requested_action"]["identifier"] = "regrade".into();
    w.send("check_run", button).await;
    w.completed_runs(&head, 3).await;
    w.send(
        "check_suite",
        payloads::check_suite("rerequested.json", INSTALLATION, &head),
    )
    .await;
    let runs = w.completed_runs(&head, 4).await;
    assert!(
        runs.iter()
            .all(|r| r.conclusion.as_deref() == Some("success"))
    );
    let ids: std::collections::BTreeSet<_> = runs.iter().map(|r| r.external_id.clone()).collect();
    assert_eq!(
        ids.len(),
        4,
        "each re-run is a new job with its own check run"
    );
    assert_eq!(w.sticky_comments(4).len(), 1);
    w.assert_clean();
}

async fn a_human_pr_waits_for_a_maintainer(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    let head = w.heads.reference.clone();
    let mut pull = FakePull::new(5, &head);
    pull.base_ref = format!("infradev/{TASK}");
    pull.head_repo = HeadRepo::Fork(format!("{FORK_OWNER}/{REPO}"));
    pull.author = "alice".into();
    w.fake.add_pull(REPO_FULL, pull);
    w.fake.set_permission(REPO_FULL, "mallory", "read");
    w.fake.set_permission(REPO_FULL, "maintainer", "write");
    w.send(
        "pull_request",
        w.pull_event("opened.json", 5, &head, Author::Human("alice")),
    )
    .await;
    w.send(
        "issue_comment",
        payloads::comment(INSTALLATION, 5, "mallory", "/infradev grade"),
    )
    .await;
    let reply = w
        .wait("a refusal", || {
            w.fake
                .comments(REPO_FULL, 5)
                .into_iter()
                .find(|c| c.by_app && c.body.contains("@mallory"))
        })
        .await;
    assert!(reply.body.contains("write"), "{}", reply.body);
    assert!(
        w.runs_for(&head).is_empty(),
        "a human PR is not graded on its own, nor on a reader's word"
    );
    // A command inside a code block is not a command.
    w.send(
        "issue_comment",
        payloads::comment(INSTALLATION, 5, "maintainer", "```\n/infradev grade\n```"),
    )
    .await;
    w.send(
        "issue_comment",
        payloads::comment(
            INSTALLATION,
            5,
            "maintainer",
            "Looks plausible.\n/infradev grade",
        ),
    )
    .await;
    let runs = w.completed_runs(&head, 1).await;
    assert_eq!(runs.len(), 1, "the fenced command did nothing");
    assert_eq!(runs[0].conclusion.as_deref(), Some("success"));
    w.assert_clean();
}

async fn bad_signatures_and_duplicates_change_nothing(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    let head = w.heads.reference.clone();
    w.seed_agent_pull(6, &head);
    let payload = w.pull_event("opened.json", 6, &head, Author::Agent);
    let (body, signature) = payloads::signed(&payload, SECRET);
    let (_, wrong) = payloads::signed(&payload, "not-the-secret");
    assert_eq!(
        w.post("pull_request", "dup-1", body.clone(), Some(&wrong))
            .await,
        401
    );
    assert_eq!(
        w.post("pull_request", "dup-1", body.clone(), None).await,
        401
    );
    assert_eq!(
        w.post(
            "pull_request",
            "dup-1",
            b"{not json".to_vec(),
            Some(&payloads::signed_bytes(b"{not json", SECRET))
        )
        .await,
        400
    );
    let store = infradev::store::Store::open(&w.store_url).await.unwrap();
    assert!(
        store.get_delivery("dup-1").await.unwrap().is_none(),
        "nothing stored for a bad request"
    );
    assert_eq!(
        w.post("pull_request", "dup-1", body.clone(), Some(&signature))
            .await,
        202
    );
    assert_eq!(
        w.post("pull_request", "dup-1", body.clone(), Some(&signature))
            .await,
        202
    );
    w.completed_runs(&head, 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        w.runs_for(&head).len(),
        1,
        "a duplicate delivery is processed once"
    );
    let big = vec![b' '; 2 * 1024 * 1024];
    let big_signature = payloads::signed_bytes(&big, SECRET);
    assert_eq!(
        w.post("pull_request", "too-big-1", big, Some(&big_signature))
            .await,
        413,
        "over the body limit"
    );
    for (path, want) in [
        ("/healthz", "ok"),
        ("/readyz", "ready"),
        ("/metrics", "infradev_webhooks_total"),
    ] {
        let text = w
            .http
            .get(w.url(path))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(text.contains(want), "{path}: {text}");
    }
    assert_eq!(
        w.post(
            "marketplace_purchase",
            "other-1",
            b"{\"action\":\"purchased\"}".to_vec(),
            Some(&payloads::signed_bytes(
                b"{\"action\":\"purchased\"}",
                SECRET
            ))
        )
        .await,
        202,
        "unknown events are accepted and ignored"
    );
    w.assert_clean();
}

async fn github_failures_are_retried_until_delivered_once(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    let head = w.heads.reference.clone();
    w.seed_agent_pull(7, &head);
    w.fake
        .fail_next("POST /repos/*/*/check-runs", 2, Failure::ServerError);
    w.fake.fail_next(
        "PATCH /repos/*/*/check-runs/*",
        2,
        Failure::RateLimited { retry_after_s: 1 },
    );
    w.fake.fail_next(
        "POST /repos/*/*/issues/*/comments",
        2,
        Failure::SecondaryRateLimit,
    );
    w.fake.fail_next(
        "GET /repos/*/*/issues/*/comments",
        1,
        Failure::PrimaryExhausted { reset_in_s: 1 },
    );
    w.send(
        "pull_request",
        w.pull_event("opened.json", 7, &head, Author::Agent),
    )
    .await;
    let runs = w.completed_runs(&head, 1).await;
    assert_eq!(
        runs.len(),
        1,
        "exactly one check run despite the failed creates"
    );
    assert_eq!(runs[0].conclusion.as_deref(), Some("success"));
    let comments = w
        .wait("the comment", || {
            Some(w.sticky_comments(7)).filter(|c| !c.is_empty())
        })
        .await;
    assert_eq!(
        comments.len(),
        1,
        "exactly one comment despite the failed posts"
    );
    let completions = runs[0]
        .history
        .iter()
        .filter(|h| h.get("conclusion").is_some())
        .count();
    assert_eq!(
        completions, 1,
        "one final conclusion: {:#?}",
        runs[0].history
    );
    w.assert_clean();
}

async fn a_killed_server_resumes_the_job_and_reports_once(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.lease_s = 4;
    w.start().await;
    let head = w.heads.wrong.clone();
    w.seed_agent_pull(8, &head);
    w.send(
        "pull_request",
        w.pull_event("opened.json", 8, &head, Author::Agent),
    )
    .await;
    w.wait("the grade to start", || {
        w.runs_for(&head)
            .into_iter()
            .find(|r| r.status == "in_progress")
    })
    .await;
    w.kill().await;
    w.start().await;
    let runs = w.completed_runs(&head, 1).await;
    assert_eq!(runs.len(), 1, "one check run for the job");
    assert_eq!(runs[0].conclusion.as_deref(), Some("failure"));
    let completions = runs[0]
        .history
        .iter()
        .filter(|h| h.get("conclusion").is_some())
        .count();
    assert_eq!(
        completions, 1,
        "exactly one final report: {:#?}",
        runs[0].history
    );
    let comments = w
        .wait("the comment", || {
            Some(w.sticky_comments(8)).filter(|c| !c.is_empty())
        })
        .await;
    assert_eq!(comments.len(), 1);
    w.assert_clean();
}

async fn an_agent_pr_without_a_task_gets_a_neutral_check(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    let head = w.heads.reference.clone();
    w.seed_agent_pull(9, &head);
    let mut payload = w.pull_event("opened.json", 9, &head, Author::Agent);
    payload["pull_request"]["base"]["ref"] = "main".into();
    w.send("pull_request", payload).await;
    let run = w.completed_runs(&head, 1).await.remove(0);
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    let text = format!("{:?} {:?} {:?}", run.title, run.summary, run.text);
    for way in ["infradev/", "InfraDev-Task:", "task:"] {
        assert!(
            text.contains(way),
            "the check says how to name a task ({way}): {text}"
        );
    }
    assert!(text.contains(TASK), "and lists the known tasks: {text}");
    w.assert_clean();
}

async fn failed_deliveries_are_redelivered_by_reconcile(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.redeliver = true;
    w.start().await;
    let head = w.heads.reference.clone();
    w.seed_agent_pull(10, &head);
    // GitHub tried to deliver this while we were down: it failed and is not retried by GitHub.
    let mut lost = support::fake_github::NewDelivery::new("lost-delivery-1", "pull_request", 502);
    lost.action = Some("opened".into());
    lost.installation_id = Some(INSTALLATION);
    lost.payload = Some(w.pull_event("opened.json", 10, &head, Author::Agent));
    w.fake.add_delivery(lost);
    let runs = w.completed_runs(&head, 1).await;
    assert_eq!(runs[0].conclusion.as_deref(), Some("success"));
    let redelivered = w
        .fake
        .deliveries()
        .into_iter()
        .filter(|d| d.guid == "lost-delivery-1" && d.redelivery)
        .count();
    assert!(redelivered >= 1, "reconcile asked GitHub to redeliver it");
    w.assert_clean();
}

async fn an_infrastructure_fault_is_retried_then_reported_neutral(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    // A root whose task names a base image that does not exist: every grade is our fault.
    let root = w.dir.path().join("root");
    let variant = support::task_variant(&[("base_image", "\"infradev-base:does-not-exist\"")]);
    std::fs::create_dir_all(root.join("tasks/example")).unwrap();
    std::os::unix::fs::symlink(
        variant.path().join(TASK),
        root.join("tasks/example").join(TASK),
    )
    .unwrap();
    std::os::unix::fs::symlink(support::root().join("probes"), root.join("probes")).unwrap();
    std::os::unix::fs::symlink(support::root().join("runners"), root.join("runners")).unwrap();
    w.root = root;
    w.start().await;
    let head = w.heads.reference.clone();
    w.seed_agent_pull(11, &head);
    w.send(
        "pull_request",
        w.pull_event("opened.json", 11, &head, Author::Agent),
    )
    .await;
    let run = w.completed_runs(&head, 1).await.remove(0);
    assert_eq!(
        run.conclusion.as_deref(),
        Some("neutral"),
        "never failure: {:?}",
        run.title
    );
    let store = infradev::store::Store::open(&w.store_url).await.unwrap();
    let jobs = store.jobs_for_pull(REPO_FULL, 11).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].attempts, 2, "retried once before reporting");
    let comment = w
        .wait("the comment", || w.sticky_comments(11).into_iter().next())
        .await;
    assert!(
        comment.body.to_lowercase().contains("infra"),
        "{}",
        comment.body
    );
    drop(variant);
    w.assert_clean();
}
