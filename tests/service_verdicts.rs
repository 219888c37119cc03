//! What a pull request's `InfraDev` check and sticky comment show is the grade of what the
//! pull request is, told as stories (same world as tests/service.rs: real HTTP, HMAC, JWT,
//! store on SQLite and PostgreSQL, git and Docker; only github.com is faked, and the fake
//! checks every request against GitHub's OpenAPI description).
//!
//! GitHub keeps check runs per commit, not per pull request, and a branch protection rule
//! reads the newest run of a name on the commit: a neutral run posted for one pull request
//! can hide another's `failure`. A grade whose pull request moved on (another head, another
//! task) must never be posted; neither may anything be posted once the App lost access; and
//! what is posted says nothing about the grader's internals. And GitHub's rate limits are
//! waited out as GitHub asks, without holding other pull requests back.

#[macro_use]
mod support;

use std::time::{Duration, Instant};

use infradev::service::github::RetryPolicy;
use infradev::service::store::JobState;
use serde_json::json;
use support::fake_github::{Failure, FakePull};
use support::payloads::{self, Author, OWNER, REPO};
use support::story::*;

stories!(
    a_human_pr_never_hides_the_grade_of_its_commit,
    a_task_changed_mid_grade_is_cancelled_not_posted,
    a_force_push_back_supersedes_the_newer_heads_grade,
    removing_the_app_stops_its_grades_and_posts_nothing,
    an_unfetchable_head_is_reported_in_fixed_words,
    rate_limits_are_waited_out_without_holding_others_back,
);

/// How long an abandoned grade's sandboxes may outlive the moment its check run says it was
/// cancelled: a lease renewal (5 s) and the removal, on a loaded machine.
const REMOVED_WITHIN: Duration = Duration::from_secs(30);

/// Waits until the story's sandboxes are gone, at most [`REMOVED_WITHIN`].
async fn sandboxes_removed(w: &World) {
    let started = Instant::now();
    loop {
        let left = w.sandboxes();
        if left.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < REMOVED_WITHIN,
            "the abandoned grade's sandboxes are still there: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until a grade of `head` is running, with its sandboxes up; returns its check run.
async fn grading_in_sandbox(w: &World, head: &str) -> support::fake_github::FakeCheckRun {
    w.wait("a grade running in its sandboxes", || {
        let run = w
            .job_runs(head)
            .into_iter()
            .find(|r| r.status == "in_progress")?;
        (!w.sandboxes().is_empty()).then_some(run)
    })
    .await
}

/// The check run `id` as the fake holds it now.
fn run_now(w: &World, head: &str, id: u64) -> support::fake_github::FakeCheckRun {
    w.runs_for(head)
        .into_iter()
        .find(|r| r.id == id)
        .expect("the check run exists")
}

fn conclusions(run: &support::fake_github::FakeCheckRun) -> Vec<String> {
    run.history
        .iter()
        .filter_map(|h| h.get("conclusion").and_then(|c| c.as_str()))
        .map(str::to_owned)
        .collect()
}

async fn a_human_pr_never_hides_the_grade_of_its_commit(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    let head = w.heads.wrong.clone();
    w.seed_agent_pull(71, &head);
    w.send(
        "pull_request",
        w.pull_event("opened.json", 71, &head, Author::Agent),
    )
    .await;
    let graded = w.completed_job_runs(&head, 1).await.remove(0);
    assert_eq!(
        graded.conclusion.as_deref(),
        Some("failure"),
        "{:?}",
        graded.title
    );
    // A human opens a pull request from the same commit (the agent's branch); nobody asked
    // for it to be graded. A neutral "Waiting" run on the commit would be the newest
    // `InfraDev` run there, and a required check would read the failure as passing.
    w.seed_human_pull(72, &head, &[]);
    w.send_processed(
        "pull_request",
        w.pull_event("opened.json", 72, &head, Author::Human("alice")),
    )
    .await;
    w.outbox_idle().await;
    let shown = w
        .fake
        .latest_check_run(REPO_FULL, &head, "InfraDev")
        .expect("a check run");
    assert_eq!(
        (shown.id, shown.conclusion.as_deref()),
        (graded.id, Some("failure")),
        "what GitHub and branch protection read is still the grade: {:?}",
        shown.title
    );
    assert!(
        w.runs_for(&head)
            .iter()
            .all(|r| r.external_id.as_deref() != Some("waiting:72")),
        "no neutral run on a graded commit"
    );
    // Where the commit has no grade, the human's pull request still says it waits.
    let base = w.heads.base.clone();
    w.seed_human_pull(72, &base, &[]);
    w.send_processed(
        "pull_request",
        w.pull_event("synchronize.json", 72, &base, Author::Human("alice")),
    )
    .await;
    let waiting = w
        .wait("the waiting check on the ungraded commit", || {
            w.runs_for(&base)
                .into_iter()
                .find(|r| r.external_id.as_deref() == Some("waiting:72"))
        })
        .await;
    assert_eq!(waiting.conclusion.as_deref(), Some("neutral"));
    w.assert_clean();
}

async fn a_task_changed_mid_grade_is_cancelled_not_posted(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.use_private_root();
    w.start().await;
    let head = w.heads.wrong.clone();
    w.seed_agent_pull(81, &head);
    w.send(
        "pull_request",
        w.pull_event("opened.json", 81, &head, Author::Agent),
    )
    .await;
    let running = grading_in_sandbox(&w, &head).await;
    // The base branch is edited to another task's branch while the grade runs.
    let other = "vllm-kv-offload-lru";
    w.seed_agent_pull_for(81, &head, other);
    let mut edited = w.pull_event("opened.json", 81, &head, Author::Agent);
    edited["action"] = json!("edited");
    edited["pull_request"]["base"]["ref"] = json!(format!("infradev/{other}"));
    edited["changes"] = json!({ "base": { "ref": { "from": format!("infradev/{TASK}") },
                                          "sha": { "from": w.heads.base } } });
    w.send_processed("pull_request", edited).await;
    let cancelled = w
        .wait("the old task's grade cancelled", || {
            Some(run_now(&w, &head, running.id)).filter(|r| r.status == "completed")
        })
        .await;
    assert_eq!(
        cancelled.conclusion.as_deref(),
        Some("cancelled"),
        "{:?}",
        cancelled.title
    );
    let title = cancelled.title.as_deref().unwrap_or_default();
    assert!(title.contains(other), "the reason names the task: {title}");
    // Dropped, not left to finish: its sandboxes go at once.
    sandboxes_removed(&w).await;
    let jobs = w.jobs(81).await;
    let old = jobs
        .iter()
        .find(|j| j.task_id == TASK)
        .expect("the old job");
    assert_eq!(old.state, JobState::Cancelled, "{old:?}");
    assert_eq!(old.result_json, None, "no result recorded");
    assert!(
        jobs.iter().any(|j| j.task_id == other),
        "the task the pull request names now is graded: {jobs:?}"
    );
    // Past another lease renewal and outbox pass, the old grade still said nothing.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        conclusions(&run_now(&w, &head, running.id)),
        ["cancelled"],
        "one conclusion, never the grade"
    );
    w.assert_clean();
}

async fn a_force_push_back_supersedes_the_newer_heads_grade(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.use_private_root();
    w.start().await;
    let (old, new) = (w.heads.wrong.clone(), w.heads.reference.clone());
    w.seed_agent_pull(83, &old);
    w.send(
        "pull_request",
        w.pull_event("opened.json", 83, &old, Author::Agent),
    )
    .await;
    let first = w.completed_job_runs(&old, 1).await.remove(0);
    assert_eq!(first.conclusion.as_deref(), Some("failure"));
    w.wait("the comment on the first head", || {
        w.sticky_comments(83)
            .into_iter()
            .find(|c| c.body.contains(&old[..12]))
    })
    .await;
    // A push, then a force-push back to the graded commit while the new head grades.
    w.seed_agent_pull(83, &new);
    w.send(
        "pull_request",
        w.pull_event("synchronize.json", 83, &new, Author::Agent),
    )
    .await;
    let running = grading_in_sandbox(&w, &new).await;
    w.seed_agent_pull(83, &old);
    w.send_processed(
        "pull_request",
        w.pull_event("synchronize.json", 83, &old, Author::Agent),
    )
    .await;
    let cancelled = w
        .wait("the abandoned head's grade cancelled", || {
            Some(run_now(&w, &new, running.id)).filter(|r| r.status == "completed")
        })
        .await;
    assert_eq!(
        cancelled.conclusion.as_deref(),
        Some("cancelled"),
        "{:?}",
        cancelled.title
    );
    assert!(
        cancelled
            .title
            .as_deref()
            .unwrap_or_default()
            .contains("superseded"),
        "{:?}",
        cancelled.title
    );
    sandboxes_removed(&w).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(conclusions(&run_now(&w, &new, running.id)), ["cancelled"]);
    let jobs = w.jobs(83).await;
    assert_eq!(
        jobs.len(),
        2,
        "the graded commit is not graded again: {jobs:?}"
    );
    assert_eq!(jobs[1].state, JobState::Cancelled, "{jobs:?}");
    let shown = w
        .fake
        .latest_check_run(REPO_FULL, &old, "InfraDev")
        .unwrap();
    assert_eq!(
        (shown.id, shown.conclusion.as_deref()),
        (first.id, Some("failure"))
    );
    // The sticky comment describes the pull request's head, and only it.
    w.outbox_idle().await;
    let comments = w.sticky_comments(83);
    assert_eq!(comments.len(), 1);
    assert!(
        comments[0].body.contains(&old[..12]) && !comments[0].body.contains(&new[..12]),
        "{}",
        comments[0].body
    );
    w.assert_clean();
}

async fn removing_the_app_stops_its_grades_and_posts_nothing(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.use_private_root();
    let second = format!("{OWNER}/second");
    w.fake.add_installation(INSTALLATION, &[&second]);
    std::os::unix::fs::symlink(
        support::example_repo(),
        w.dir.path().join("gh").join(OWNER).join("second.git"),
    )
    .unwrap();
    w.start().await;
    // One grade running, one queued behind it (one worker).
    let (a, b) = (w.heads.wrong.clone(), w.heads.reference.clone());
    w.seed_agent_pull(91, &a);
    w.send(
        "pull_request",
        w.pull_event("opened.json", 91, &a, Author::Agent),
    )
    .await;
    grading_in_sandbox(&w, &a).await;
    w.seed_agent_pull(92, &b);
    w.send_processed(
        "pull_request",
        w.pull_event("opened.json", 92, &b, Author::Agent),
    )
    .await;
    w.outbox_idle().await;

    // The repository is taken out of the installation.
    w.fake.remove_repos(INSTALLATION, &[REPO_FULL]);
    let removed_at = Instant::now();
    let mut removed = payloads::fixture("installation_repositories", "removed.json");
    removed["installation"]["id"] = json!(INSTALLATION);
    removed["repositories_removed"] = json!([{ "id": 76, "node_id": "MDEwOlJlcG9zaXRvcnk3Ng==",
        "name": REPO, "full_name": REPO_FULL, "private": false }]);
    w.send_processed("installation_repositories", removed).await;
    for number in [91, 92] {
        let jobs = w.jobs(number).await;
        assert!(
            jobs.iter().all(|j| j.state == JobState::Cancelled),
            "#{number}: {jobs:?}"
        );
    }
    sandboxes_removed(&w).await;

    // The worker moves on to a pull request of the repository the App still has.
    let c = w.heads.broken.clone();
    let mut pull = FakePull::new(5, &c);
    pull.head_ref = "agent/prefix-caching".into();
    pull.base_ref = format!("infradev/{TASK}");
    pull.head_repo =
        support::fake_github::HeadRepo::Fork(format!("{}/{REPO}", support::payloads::FORK_OWNER));
    pull.author = "coding-agent[bot]".into();
    pull.author_is_bot = true;
    w.fake.add_pull(&second, pull);
    let mut opened = w.pull_event("opened.json", 5, &c, Author::Agent);
    opened["repository"]["name"] = json!("second");
    opened["repository"]["full_name"] = json!(second);
    w.send_processed("pull_request", opened).await;
    w.wait("the other repository's grade in its sandboxes", || {
        let running = w
            .fake
            .check_runs(&second)
            .into_iter()
            .any(|r| r.status == "in_progress");
        (running && !w.sandboxes().is_empty()).then_some(())
    })
    .await;

    // The App is uninstalled.
    w.fake.delete_installation(INSTALLATION);
    let deleted_at = Instant::now();
    let mut deleted = payloads::fixture("installation", "deleted.json");
    deleted["installation"]["id"] = json!(INSTALLATION);
    w.send_processed("installation", deleted).await;
    let store = w.store().await;
    let jobs = store.jobs_for_pull(&second, 5).await.unwrap();
    store.close().await;
    assert!(
        jobs.iter().all(|j| j.state == JobState::Cancelled),
        "{jobs:?}"
    );
    sandboxes_removed(&w).await;
    // Past a lease renewal and several outbox passes: nothing was sent with a dead token.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let requests = w.fake.requests();
    let to_removed: Vec<String> = requests
        .iter()
        .filter(|r| r.received_at > removed_at)
        .filter(|r| {
            r.path
                .to_ascii_lowercase()
                .contains("/repos/infradev-mirrors/minicache")
        })
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect();
    assert!(to_removed.is_empty(), "{to_removed:#?}");
    let after_deletion: Vec<String> = requests
        .iter()
        .filter(|r| r.received_at > deleted_at)
        .filter(|r| {
            r.caller.starts_with("installation")
                || r.operation == "apps/create-installation-access-token"
                || r.path.starts_with("/repos/")
        })
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect();
    assert!(after_deletion.is_empty(), "{after_deletion:#?}");
    for number in [91, 92] {
        assert!(
            w.jobs(number)
                .await
                .iter()
                .all(|j| j.state == JobState::Cancelled && j.result_json.is_none())
        );
    }
    w.assert_clean();
}

async fn an_unfetchable_head_is_reported_in_fixed_words(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    // A head the fork does not have (deleted by a force-push before we fetched it).
    let head = "0123456789abcdef0123456789abcdef01234567";
    w.seed_agent_pull(95, head);
    w.send(
        "pull_request",
        w.pull_event("opened.json", 95, head, Author::Agent),
    )
    .await;
    let run = w.completed_job_runs(head, 1).await.remove(0);
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    let check = format!("{:?}\n{:?}\n{:?}", run.title, run.summary, run.text);
    assert!(check.contains("could not be fetched"), "{check}");
    let comment = w
        .wait("the comment", || w.sticky_comments(95).into_iter().next())
        .await;
    let job = w.jobs(95).await.remove(0);
    let page = w
        .http
        .get(w.url(&format!("/grades/{}", job.id.0)))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // Operators have git's words (the store, the operator's grade page) ...
    let error = job.error.clone().unwrap_or_default();
    let work = w.dir.path().display().to_string();
    assert!(error.contains(&work), "{error}");
    // ... the public has fixed phrases: no path of the grader, no internal URL, no git.
    for (what, text) in [
        ("check run", &check),
        ("comment", &comment.body),
        ("public grade page", &page),
    ] {
        for internal in [work.as_str(), "file://", "fatal", "upload-pack"] {
            assert!(
                !text.contains(internal),
                "the {what} shows {internal:?}:\n{text}"
            );
        }
    }
    w.assert_clean();
}

async fn rate_limits_are_waited_out_without_holding_others_back(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    // GitHub's waits as asked (seconds, not a hundredth of them).
    w.retry = RetryPolicy {
        min: Duration::from_millis(50),
        max: Duration::from_secs(60),
        scale: 1.0,
    };
    w.start().await;
    // Human pull requests: each gets a neutral "Waiting" check, and nothing is graded.
    let (first, second, third) = (
        w.heads.base.clone(),
        w.heads.broken.clone(),
        w.heads.reference.clone(),
    );
    w.seed_human_pull(61, &first, &[]);
    w.seed_human_pull(62, &second, &[]);
    w.seed_human_pull(63, &third, &[]);
    // Reading #61 hits a secondary rate limit: GitHub asks for 3 s.
    w.fake.fail_next(
        "GET /repos/*/*/pulls/61",
        1,
        Failure::RateLimited { retry_after_s: 3 },
    );
    for (number, head) in [(61, &first), (62, &second)] {
        assert_eq!(
            w.send(
                "pull_request",
                w.pull_event("opened.json", number, head, Author::Human("alice"))
            )
            .await,
            202
        );
    }
    let waiting = |number: u64, head: &str| {
        let external = format!("waiting:{number}");
        w.runs_for(head)
            .into_iter()
            .find(|r| r.external_id.as_deref() == Some(external.as_str()))
    };
    w.wait("#62's check", || waiting(62, &second)).await;
    w.wait("#61's check", || waiting(61, &first)).await;
    let reads = |number: u64| -> Vec<Instant> {
        w.fake
            .requests_to("pulls/get")
            .into_iter()
            .filter(|r| r.path.ends_with(&format!("/pulls/{number}")))
            .map(|r| r.received_at)
            .collect()
    };
    let (r61, r62) = (reads(61), reads(62));
    assert_eq!(r61.len(), 2, "refused once, then read");
    let waited = r61[1] - r61[0];
    assert!(
        waited >= Duration::from_secs(3),
        "#61 was read again after {waited:?}; GitHub asked for 3 s"
    );
    assert!(r62[0] < r61[1], "#62 was not held back behind #61's wait");

    // The outbox's write of #63's check is rate-limited: GitHub asks for 2 s.
    w.fake.fail_next(
        "POST /repos/*/*/check-runs",
        1,
        Failure::RateLimited { retry_after_s: 2 },
    );
    w.send(
        "pull_request",
        w.pull_event("opened.json", 63, &third, Author::Human("alice")),
    )
    .await;
    w.wait("#63's check", || waiting(63, &third)).await;
    let creates: Vec<Instant> = w
        .fake
        .requests_to("checks/create")
        .into_iter()
        .filter(|r| {
            r.body
                .as_ref()
                .is_some_and(|b| b["head_sha"] == third.as_str())
        })
        .map(|r| r.received_at)
        .collect();
    assert_eq!(creates.len(), 2, "refused once, then created");
    let waited = creates[1] - creates[0];
    assert!(
        waited >= Duration::from_secs(2),
        "the check was created again after {waited:?}; GitHub asked for 2 s"
    );
    w.assert_clean();
}
