//! `infradev serve` end to end, told as stories: real HTTP, real HMAC, real JWT, a real store
//! (SQLite and PostgreSQL), real git and real Docker; only github.com is faked, and the fake
//! checks every request against GitHub's OpenAPI description.

#[macro_use]
mod support;

use std::time::Duration;

use support::fake_github::{Failure, FakePull, HeadRepo};
use support::payloads::{self, Author, FORK_OWNER, REPO};
use support::story::*;

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
    a_stopping_server_refuses_webhooks_and_finishes_running_grades,
    a_stopping_server_hands_grades_past_the_grace_back_to_the_queue,
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
    w.seed_agent_pull(3, &w.heads.broken);
    w.send_processed(
        "pull_request",
        w.pull_event("synchronize.json", 3, &w.heads.broken, Author::Agent),
    )
    .await;
    w.seed_agent_pull(3, &w.heads.base);
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
    // Its head says it waits for a maintainer, and nothing grades it on a reader's word.
    let waiting = w
        .wait("the waiting check", || w.runs_for(&head).into_iter().next())
        .await;
    assert_eq!(waiting.conclusion.as_deref(), Some("neutral"));
    let said = format!("{:?} {:?}", waiting.title, waiting.summary);
    assert!(said.contains("/infradev grade"), "{said}");
    assert!(
        w.job_runs(&head).is_empty() && w.jobs(5).await.is_empty(),
        "a human PR is not graded on its own, nor on a reader's word"
    );
    // Anyone may ask for help: a reaction and a reply listing the commands.
    let ask = w
        .fake
        .add_comment(REPO_FULL, 5, "mallory", "/infradev help");
    let mut help = payloads::comment(INSTALLATION, 5, "mallory", "/infradev help");
    help["comment"]["id"] = ask.into();
    w.send_processed("issue_comment", help).await;
    let listed = w
        .wait("the help reply", || {
            w.fake
                .comments(REPO_FULL, 5)
                .into_iter()
                .find(|c| c.by_app && c.body.contains("/infradev regrade"))
        })
        .await;
    assert!(listed.body.contains("Re-grade"), "{}", listed.body);
    w.wait("a reaction to the help request", || {
        w.fake
            .comments(REPO_FULL, 5)
            .into_iter()
            .find(|c| c.id == ask && !c.reactions.is_empty())
    })
    .await;
    // A command inside a code block is not a command.
    w.send(
        "issue_comment",
        payloads::comment(INSTALLATION, 5, "maintainer", "```\n/infradev grade\n```"),
    )
    .await;
    let asked = w.fake.add_comment(
        REPO_FULL,
        5,
        "maintainer",
        "Looks plausible.\n/infradev grade",
    );
    let mut approve = payloads::comment(
        INSTALLATION,
        5,
        "maintainer",
        "Looks plausible.\n/infradev grade",
    );
    approve["comment"]["id"] = asked.into();
    w.send("issue_comment", approve).await;
    // The accepted command gets a reaction and a reply saying what it does.
    let reply = w
        .wait("the reply to the accepted command", || {
            w.fake
                .comments(REPO_FULL, 5)
                .into_iter()
                .find(|c| c.by_app && c.body.contains("@maintainer grading"))
        })
        .await;
    assert!(reply.body.contains(TASK), "{}", reply.body);
    let approved = w
        .wait("the reaction to the accepted command", || {
            w.fake
                .comments(REPO_FULL, 5)
                .into_iter()
                .find(|c| c.id == asked && !c.reactions.is_empty())
        })
        .await;
    assert_eq!(approved.reactions.len(), 1, "{:?}", approved.reactions);
    let runs = w.completed_job_runs(&head, 1).await;
    assert_eq!(runs.len(), 1, "the fenced command did nothing");
    assert_eq!(
        runs[0].conclusion.as_deref(),
        Some("success"),
        "{:?}",
        runs[0].title
    );
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
    let store = infradev::service::store::Store::open(&w.store_url)
        .await
        .unwrap();
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
    let mut pull = FakePull::new(9, &head);
    pull.head_ref = "agent/prefix-caching".into();
    pull.head_repo = HeadRepo::Fork(format!("{FORK_OWNER}/{REPO}"));
    pull.author = format!("{FORK_OWNER}[bot]");
    pull.author_is_bot = true;
    w.fake.add_pull(REPO_FULL, pull);
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
    // The variant is not what was validated (its image differs): allowed here, so that the
    // missing image, our fault, is what the grade meets.
    w.allow_unvalidated = true;
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
    let store = infradev::service::store::Store::open(&w.store_url)
        .await
        .unwrap();
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

/// Starts grading `head` on PR `number` and returns once the grade runs.
async fn grade_running(w: &World, number: u64, head: &str) {
    w.seed_agent_pull(number, head);
    w.send(
        "pull_request",
        w.pull_event("opened.json", number, head, Author::Agent),
    )
    .await;
    w.wait("the grade to start", || {
        w.runs_for(head)
            .into_iter()
            .find(|r| r.status == "in_progress")
    })
    .await;
}

/// A delivery sent to a stopping service: refused with 503 (not acknowledged, so GitHub
/// delivers it again), and nothing of it is stored.
async fn refused_while_stopping(w: &World, number: u64) {
    let head = w.heads.reference.clone();
    w.seed_agent_pull(number, &head);
    let status = w
        .send(
            "pull_request",
            w.pull_event("opened.json", number, &head, Author::Agent),
        )
        .await;
    assert_eq!(status, 503, "a stopping server acknowledges nothing new");
    assert!(
        w.jobs(number).await.is_empty(),
        "the refused delivery made no job"
    );
}

async fn a_stopping_server_refuses_webhooks_and_finishes_running_grades(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    // A bound, not a budget: the grade must finish within it, however loaded the machine.
    w.drain_grace_s = 600;
    w.start().await;
    let head = w.heads.wrong.clone();
    grade_running(&w, 8, &head).await;
    let drained = tokio::spawn(w.service.take().unwrap().drain());
    refused_while_stopping(&w, 9).await;
    let summary = drained.await.unwrap();
    assert_eq!((summary.finished, summary.requeued), (1, 0), "{summary:?}");
    assert!(summary.outbox_delivered >= 1, "{summary:?}");
    // The final flush reported the grade before the service ended.
    let runs = w.job_runs(&head);
    assert_eq!(runs.len(), 1, "one check run for the job");
    assert_eq!(runs[0].status, "completed", "{runs:?}");
    assert_eq!(runs[0].conclusion.as_deref(), Some("failure"));
    let jobs = w.jobs(8).await;
    assert_eq!(jobs[0].state, infradev::service::store::JobState::Finished);
    w.assert_clean();
}

async fn a_stopping_server_hands_grades_past_the_grace_back_to_the_queue(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.drain_grace_s = 0;
    w.start().await;
    let head = w.heads.wrong.clone();
    grade_running(&w, 8, &head).await;
    let drained = w.service.take().unwrap().drain();
    refused_while_stopping(&w, 9).await;
    let summary = drained.await;
    assert_eq!((summary.finished, summary.requeued), (0, 1), "{summary:?}");
    let jobs = w.jobs(8).await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        jobs[0].state,
        infradev::service::store::JobState::Queued,
        "{jobs:?}"
    );
    assert_eq!(jobs[0].lease_owner, None, "the lease is released at once");
    assert_eq!(jobs[0].attempts, 0, "a hand-back is not an attempt");
    // Never lost: the next start grades it, on the same check run.
    w.start().await;
    let runs = w.completed_job_runs(&head, 1).await;
    assert_eq!(runs.len(), 1, "one check run for the job");
    assert_eq!(runs[0].conclusion.as_deref(), Some("failure"));
    w.assert_clean();
}

/// The real binary, stopped the way a service manager stops it: SIGTERM while a grade runs.
/// A delivery after the signal gets 503; the grade finishes and is reported by the final
/// flush; the process exits 0 with one line saying what the drain did.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_the_real_binary() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let Some(mut w) = World::new(Backend::Sqlite).await else {
        return;
    };
    w.drain_grace_s = 600;
    let dir = w.dir.path();
    std::fs::write(
        dir.join("app.pem"),
        &support::fake_github::app_key().private_pem,
    )
    .unwrap();
    std::fs::write(dir.join("secrets"), format!("{SECRET}\n")).unwrap();
    let config = dir.join("infradev.toml");
    let github = format!(
        "private_key_file = \"{d}/app.pem\"\nwebhook_secrets_file = \"{d}/secrets\"",
        d = dir.display()
    );
    std::fs::write(&config, w.config_text(&github)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .args(["--log-format", "json", "serve", "--config"])
        .arg(&config)
        .env_remove("INFRADEV_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel::<serde_json::Value>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let event =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if tx.send(event).is_err() {
                break;
            }
        }
    });
    let next_line = |what: &str, f: &dyn Fn(&serde_json::Value) -> bool| loop {
        match lines.recv_timeout(Duration::from_secs(600)) {
            Ok(event) if f(&event) => return event,
            Ok(_) => {}
            Err(e) => panic!("no line {what}: {e}"),
        }
    };
    let serving = next_line("serving", &|e| e["fields"]["message"] == "serving");
    let addr = serving["fields"]["addr"].as_str().unwrap().to_owned();
    w.fake
        .set_webhook_target(&format!("http://{addr}/webhook"), SECRET);
    let head = w.heads.wrong.clone();
    grade_running(&w, 8, &head).await;

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    next_line("saying it is draining", &|e| {
        e["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("stopping"))
    });
    let refused = w
        .http
        .post(format!("http://{addr}/webhook"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused.status().as_u16(),
        503,
        "intake refuses from the signal on"
    );
    assert!(refused.headers().contains_key("retry-after"));
    refused_while_stopping(&w, 9).await;

    let drained = next_line("saying what the drain did", &|e| {
        e["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("drained"))
    });
    assert_eq!(drained["fields"]["finished"], 1, "{drained}");
    assert_eq!(drained["fields"]["requeued"], 0, "{drained}");
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "a drained server exits 0");
    let runs = w.job_runs(&head);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        runs[0].status, "completed",
        "reported before the exit: {runs:?}"
    );
    w.assert_clean();
}
