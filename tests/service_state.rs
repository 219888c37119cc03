//! `infradev serve` keeps each PR's true state, told as stories (same world as tests/service.rs:
//! real HTTP, HMAC, JWT, store on SQLite and PostgreSQL, git and Docker; only github.com is
//! faked, and the fake checks every request against GitHub's OpenAPI description).
//!
//! The webhook sequences are ones GitHub really sends: a PR turned back into a draft, a label
//! removed, a base branch edited, one check run re-run, a `synchronize` delivered late (or
//! redelivered hours later), a delivery we refuse, and PRs opened while nobody listened. As on
//! github.com, the fake's PR changes first and the webhook follows.

#[macro_use]
mod support;

use std::time::Duration;

use serde_json::json;
use support::fake_github::{FakePull, HeadRepo, NewDelivery};
use support::payloads::{self, Author, FORK_OWNER, OWNER, REPO};
use support::story::*;

stories!(
    draft_label_and_edit_changes_are_stored_and_obeyed,
    a_rerun_grades_only_the_job_of_its_check_run,
    a_late_synchronize_never_cancels_the_current_head,
    refused_deliveries_are_recorded_and_never_redelivered,
    open_prs_are_resynced_on_start_and_when_repositories_are_added,
);

/// A grade that ran to its end (resolved or not: the reference can miss its time budget on a
/// loaded machine), neither cancelled nor an error of ours.
fn assert_graded(run: &support::fake_github::FakeCheckRun) {
    assert!(
        matches!(run.conclusion.as_deref(), Some("success" | "failure")),
        "{:?}: {:?}",
        run.conclusion,
        run.title
    );
}

/// The Re-run of a job's check run, as GitHub sends it for a fork head (no pull requests).
fn rerun(head: &str, job: i64) -> serde_json::Value {
    payloads::check_run("rerequested.json", INSTALLATION, head, &job.to_string())
}

async fn draft_label_and_edit_changes_are_stored_and_obeyed(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    let head = w.heads.reference.clone();
    // A human's PR that the `agent` label makes an agent's.
    let mut pull = w.seed_human_pull(21, &head, &["agent"]);
    let human = Author::Human("alice");
    w.send_processed(
        "pull_request",
        w.pull_event("opened.json", 21, &head, human),
    )
    .await;
    let jobs = w.jobs(21).await;
    assert_eq!(jobs.len(), 1, "graded as an agent's PR");
    let job = jobs[0].id.0;

    // Converted to a draft: stored, and its check run's Re-run does not grade a draft.
    pull.draft = true;
    w.fake.add_pull(REPO_FULL, pull.clone());
    let mut draft = w.pull_event("converted_to_draft.json", 21, &head, human);
    draft["pull_request"]["draft"] = json!(true);
    w.send_processed("pull_request", draft).await;
    assert!(w.stored_pull(21).await.draft, "the draft state is stored");
    w.send_processed("check_run", rerun(&head, job)).await;
    assert_eq!(
        w.jobs(21).await.len(),
        1,
        "a draft is not graded on a re-run"
    );

    // Ready again: the head is graded already, nothing new.
    pull.draft = false;
    w.fake.add_pull(REPO_FULL, pull.clone());
    w.send_processed(
        "pull_request",
        w.pull_event("ready_for_review.json", 21, &head, human),
    )
    .await;
    assert!(!w.stored_pull(21).await.draft);
    assert_eq!(w.jobs(21).await.len(), 1);

    // The `agent` label removed (GitHub's `unlabeled` has the shape of its `labeled`): no
    // longer an agent's PR, and nobody approved it, so a re-run grades nothing.
    pull.labels.clear();
    w.fake.add_pull(REPO_FULL, pull.clone());
    let mut unlabeled = w.pull_event("labeled.json", 21, &head, human);
    unlabeled["action"] = json!("unlabeled");
    w.send_processed("pull_request", unlabeled).await;
    assert!(
        !w.stored_pull(21).await.is_agent,
        "the removed label is stored"
    );
    w.send_processed("check_run", rerun(&head, job)).await;
    assert_eq!(
        w.jobs(21).await.len(),
        1,
        "a human PR nobody approved is not graded on a re-run"
    );

    // The grade ends before the task changes (a grade of a task the PR no longer names is
    // cancelled, never posted: tests/service_verdicts.rs).
    let graded = w.completed_job_runs(&head, 1).await;
    assert_graded(&graded[0]);
    // Labelled again, then the base branch edited away from `infradev/<task>`: no task.
    pull.labels = vec!["agent".into()];
    w.fake.add_pull(REPO_FULL, pull.clone());
    w.send_processed(
        "pull_request",
        w.pull_event("labeled.json", 21, &head, human),
    )
    .await;
    assert!(w.stored_pull(21).await.is_agent);
    assert_eq!(w.jobs(21).await.len(), 1, "this head is graded already");
    pull.base_ref = "main".into();
    w.fake.add_pull(REPO_FULL, pull.clone());
    let mut edited = w.pull_event("opened.json", 21, &head, human);
    edited["action"] = json!("edited");
    edited["changes"] = json!({ "base": { "ref": { "from": format!("infradev/{TASK}") },
                                          "sha": { "from": w.heads.base } } });
    w.send_processed("pull_request", edited).await;
    let stored = w.stored_pull(21).await;
    assert_eq!(stored.task_id, None, "the edited base branch names no task");
    assert_eq!(stored.base_ref, "main");
    w.send_processed("check_run", rerun(&head, job)).await;
    assert_eq!(
        w.jobs(21).await.len(),
        1,
        "a re-run does not grade a task the PR no longer names"
    );

    let runs = w.completed_job_runs(&head, 1).await;
    assert_eq!(runs.len(), 1, "one grade: the first");
    assert_graded(&runs[0]);
    // While nobody approved it, the human's PR would wait for a maintainer; but its commit
    // has a grade, and a neutral "Waiting" run would hide it (GitHub shows, and branch
    // protection reads, the newest run of a name on a commit): none is posted.
    w.outbox_idle().await;
    assert!(
        w.runs_for(&head)
            .iter()
            .all(|r| r.external_id.as_deref() != Some("waiting:21")),
        "{:?}",
        w.runs_for(&head)
    );
    let shown = w
        .fake
        .latest_check_run(REPO_FULL, &head, "InfraDev")
        .unwrap();
    assert_eq!(shown.id, runs[0].id, "the grade is what the commit shows");
    w.assert_clean();
}

async fn a_rerun_grades_only_the_job_of_its_check_run(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    let head = w.heads.reference.clone();
    // An agent's PR and a human's PR from the same commit (the human opened one from the
    // agent's branch). Nobody asked for the human's to be graded.
    w.seed_agent_pull(31, &head);
    w.seed_human_pull(32, &head, &[]);
    w.send_processed(
        "pull_request",
        w.pull_event("opened.json", 31, &head, Author::Agent),
    )
    .await;
    w.send_processed(
        "pull_request",
        w.pull_event("opened.json", 32, &head, Author::Human("alice")),
    )
    .await;
    let first = w.completed_job_runs(&head, 1).await;
    assert_graded(&first[0]);
    for what in ["**Re-grade**", "/infradev regrade", "/infradev help"] {
        let summary = first[0].summary.as_deref().unwrap_or_default();
        assert!(summary.contains(what), "the check names {what}: {summary}");
    }
    let job: i64 = first[0].external_id.as_deref().unwrap().parse().unwrap();
    assert_eq!(w.jobs(31).await[0].id.0, job);

    w.send_processed("check_run", rerun(&head, job)).await;
    let runs = w.completed_job_runs(&head, 2).await;
    assert_eq!(runs.len(), 2, "one new check run: the re-run's");
    assert!(
        w.jobs(32).await.is_empty(),
        "the human's PR is never graded"
    );
    let jobs = w.jobs(31).await;
    assert_eq!(jobs.len(), 2, "the agent's PR is graded again");
    assert!(jobs.iter().all(|j| j.head_sha == head));

    // A check run that is not one of ours (another App's) grades nothing.
    w.send_processed(
        "check_run",
        payloads::check_run("rerequested.json", INSTALLATION, &head, "ci-42"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(w.jobs(31).await.len(), 2);
    assert_eq!(w.job_runs(&head).len(), 2);
    w.assert_clean();
}

async fn a_late_synchronize_never_cancels_the_current_head(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    let (old, new) = (w.heads.wrong.clone(), w.heads.reference.clone());
    w.seed_agent_pull(41, &old);
    w.send_processed(
        "pull_request",
        w.pull_event("opened.json", 41, &old, Author::Agent),
    )
    .await;
    // A push, then the delivery of the first head's `synchronize` arrives late (GitHub's
    // retry, or the App's own redelivery of a failed delivery hours later).
    w.seed_agent_pull(41, &new);
    w.send_processed(
        "pull_request",
        w.pull_event("synchronize.json", 41, &new, Author::Agent),
    )
    .await;
    w.send_processed(
        "pull_request",
        w.pull_event("synchronize.json", 41, &old, Author::Agent),
    )
    .await;
    assert_eq!(
        w.stored_pull(41).await.head_sha,
        new,
        "the stored head is the PR's head"
    );
    let current = w.completed_runs(&new, 1).await;
    assert_graded(&current[0]); // not cancelled by the late delivery
    let stale = w.runs_for(&old);
    assert_eq!(stale.len(), 1, "the old head is not graded again");
    assert_eq!(w.jobs(41).await.len(), 2);

    // A job whose head is no longer the PR's (queued just before a push nobody told us
    // about, then the server stopped) is superseded when a worker takes it, not graded.
    w.kill().await;
    let store = w.store().await;
    let mut tx = store.begin().await.unwrap();
    let stale_job = tx
        .enqueue_job(REPO_FULL, 41, &old, TASK, INSTALLATION)
        .await
        .unwrap()
        .job;
    let queued = infradev::service::app::outbox::Message::CheckQueued {
        job_id: stale_job.id.0,
    };
    tx.push_outbox(&queued.to_row()).await.unwrap();
    tx.commit().await.unwrap();
    store.close().await;
    w.start().await;
    let cancelled = w
        .wait("the stale job's check run cancelled", || {
            w.runs_for(&old)
                .into_iter()
                .find(|r| r.external_id.as_deref() == Some(&stale_job.id.0.to_string()))
                .filter(|r| r.conclusion.as_deref() == Some("cancelled"))
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
    assert!(
        !statuses(&cancelled).contains(&"in_progress".to_owned()),
        "never graded: {:?}",
        cancelled.history
    );
    assert_eq!(
        w.runs_for(&new).len(),
        1,
        "the current head is not graded again"
    );
    w.assert_clean();
}

async fn refused_deliveries_are_recorded_and_never_redelivered(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.redeliver = true;
    w.start().await;
    // GitHub delivers a payload we cannot read (signed, so GitHub's): we answer 400.
    let mut unreadable = w.pull_event("opened.json", 61, &w.heads.reference, Author::Agent);
    unreadable["pull_request"]
        .as_object_mut()
        .unwrap()
        .remove("head");
    let refused = w.fake.send_webhook("pull_request", unreadable).await;
    assert_eq!(refused.status_code, 400);
    // And GitHub's log shows a delivery we answered 401 (signed with a retired secret).
    let mut old_secret = NewDelivery::new("refused-401", "pull_request", 401);
    old_secret.action = Some("opened".into());
    old_secret.installation_id = Some(INSTALLATION);
    old_secret.payload = Some(w.pull_event("opened.json", 62, &w.heads.reference, Author::Agent));
    w.fake.add_delivery(old_secret);

    let store = w.store().await;
    let started = std::time::Instant::now();
    let logged = loop {
        if let Some(r) = store.get_refused_delivery("refused-401").await.unwrap() {
            break r;
        }
        assert!(
            started.elapsed() < GRADE_TIMEOUT,
            "reconcile never read the 401"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(logged.status, 401);
    assert_eq!(
        logged.source,
        infradev::service::store::RefusalSource::GitHubLog
    );
    let intake = store
        .get_refused_delivery(&refused.guid)
        .await
        .unwrap()
        .expect("the intake's refusal is recorded");
    assert_eq!(intake.status, 400);
    assert_eq!(
        intake.source,
        infradev::service::store::RefusalSource::Intake
    );
    assert!(
        intake.reason.contains("pull_request") && intake.reason.contains("head"),
        "the reason says what is wrong: {}",
        intake.reason
    );
    // Reconcile leaves a delivery alone for 20 s (it may still be in flight); several passes
    // (1 s apart) after that, neither was asked for again.
    let settled = refused.delivered_at + chrono::Duration::seconds(25);
    while chrono::Utc::now() < settled {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for guid in [refused.guid.as_str(), "refused-401"] {
        let asked: u32 = w
            .fake
            .deliveries()
            .iter()
            .filter(|d| d.guid == guid)
            .map(|d| d.redelivery_requests)
            .sum();
        assert_eq!(asked, 0, "{guid} was redelivered");
    }
    assert_eq!(store.count_refused_deliveries().await.unwrap(), 2);
    assert_eq!(store.refused_deliveries(10).await.unwrap().len(), 2);
    store.close().await;
    let metrics = w
        .http
        .get(w.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "infradev_deliveries_refused_total",
        "infradev_refused_deliveries",
    ] {
        assert!(metrics.contains(name), "/metrics has {name}:\n{metrics}");
    }
    assert!(w.runs_for(&w.heads.reference).is_empty());
    w.assert_clean();
}

/// An `installation` `created` delivery for the story's installation, covering `repos`.
fn installation_created(repos: &[&str]) -> serde_json::Value {
    let mut v = payloads::fixture("installation", "created.json");
    v["installation"]["id"] = json!(INSTALLATION);
    v["repositories"] = json!(repos
        .iter()
        .enumerate()
        .map(|(i, r)| json!({ "id": 900 + i, "node_id": "MDEwOlJlcG9zaXRvcnkx",
                               "name": r.split_once('/').unwrap().1, "full_name": r, "private": false }))
        .collect::<Vec<_>>());
    v
}

async fn open_prs_are_resynced_on_start_and_when_repositories_are_added(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    // PRs opened before the App was installed: an agent's and a human's.
    let head = w.heads.reference.clone();
    w.seed_agent_pull(51, &head);
    w.seed_human_pull(52, &w.heads.wrong, &[]);
    w.start().await;
    w.send_processed("installation", installation_created(&[REPO_FULL]))
        .await;
    let runs = w.completed_job_runs(&head, 1).await;
    assert_graded(&runs[0]);
    assert!(w.jobs(52).await.is_empty(), "a human's PR is not graded");
    let waiting = w
        .wait("the human PR's waiting check", || {
            w.runs_for(&w.heads.wrong).into_iter().next()
        })
        .await;
    assert_eq!(waiting.external_id.as_deref(), Some("waiting:52"));

    // An agent's PR opened while the server was down (past GitHub's redelivery window): found
    // on start. It names no task, so it gets the neutral check.
    w.kill().await;
    let mut no_task = FakePull::new(53, &w.heads.base);
    no_task.head_ref = "agent/misc".into();
    no_task.head_repo = HeadRepo::Fork(format!("{FORK_OWNER}/{REPO}"));
    no_task.author = format!("{FORK_OWNER}[bot]");
    no_task.author_is_bot = true;
    w.fake.add_pull(REPO_FULL, no_task.clone());
    w.start().await;
    let neutral = w.completed_runs(&w.heads.base, 1).await;
    assert_eq!(neutral[0].conclusion.as_deref(), Some("neutral"));

    // A repository added to the installation, with an open agent PR.
    let second = format!("{OWNER}/second");
    w.fake.add_installation(INSTALLATION, &[&second]);
    let mut elsewhere = no_task.clone();
    elsewhere.number = 1;
    elsewhere.head_sha = w.heads.broken.clone();
    w.fake.add_pull(&second, elsewhere);
    let mut added = payloads::fixture("installation_repositories", "added.json");
    added["installation"]["id"] = json!(INSTALLATION);
    added["repositories_added"] = json!([{ "id": 77, "node_id": "MDEwOlJlcG9zaXRvcnk3Nw==",
        "name": "second", "full_name": second, "private": false }]);
    w.send_processed("installation_repositories", added).await;
    let there = w
        .wait("the neutral check in the added repository", || {
            w.fake
                .check_runs(&second)
                .into_iter()
                .find(|r| r.status == "completed")
        })
        .await;
    assert_eq!(there.conclusion.as_deref(), Some("neutral"));

    // Idempotent: another start lists both repositories again and changes nothing.
    let listed = w.fake.requests_to("pulls/list").len();
    w.kill().await;
    w.start().await;
    w.wait("both repositories listed again", || {
        (w.fake.requests_to("pulls/list").len() >= listed + 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(w.runs_for(&head).len(), 1, "no second grade");
    assert_eq!(
        w.runs_for(&w.heads.base).len(),
        1,
        "no second neutral check"
    );
    assert_eq!(w.fake.check_runs(&second).len(), 1);
    assert_eq!(w.jobs(51).await.len(), 1);
    assert_eq!(
        w.runs_for(&w.heads.wrong).len(),
        1,
        "the human's PR, still waiting"
    );
    assert!(w.jobs(52).await.is_empty());
    w.assert_clean();
}
