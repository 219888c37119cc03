//! Scale-out stories: grades handed to GitHub Actions runners (against the fake github.com,
//! which validates every request against GitHub's OpenAPI description) and to a real Slurm
//! cluster (Debian's packages, in containers). The server is the real service on SQLite or
//! PostgreSQL; the runner or node runs the real `infradev job run`.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::fake_github::FakeWorkflowRun;
use support::payloads::{self, Author};
use support::story::*;

const GRADER: &str = "infradev-org/grader";
const GRADER_INSTALLATION: u64 = 8_888_888;

macro_rules! stories {
    ($($name:ident),* $(,)?) => {
        mod sqlite { $(#[tokio::test(flavor = "multi_thread")] async fn $name() { super::$name(super::Backend::Sqlite).await } )* }
        mod postgres { $(#[tokio::test(flavor = "multi_thread")] async fn $name() { super::$name(super::Backend::Postgres).await } )* }
    };
}

stories!(
    a_dispatched_grade_is_run_by_the_runner_and_reported_once,
    a_run_without_a_result_is_dispatched_again_then_neutral,
    a_push_cancels_the_run_of_the_old_head,
);

/// The inputs runners/github-actions/grade.yml declares (`on.workflow_dispatch.inputs`), so
/// the fake refuses a dispatch that the real workflow would.
fn workflow_inputs() -> Vec<String> {
    let text = std::fs::read_to_string(support::root().join("runners/github-actions/grade.yml"))
        .expect("the example workflow");
    let mut names = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if line.trim() == "inputs:" && indent == 4 {
            inside = true;
        } else if inside && !line.trim().is_empty() && indent <= 4 {
            break;
        } else if inside && indent == 6 && line.trim_end().ends_with(':') {
            names.push(line.trim().trim_end_matches(':').to_owned());
        }
    }
    assert!(names.len() >= 5, "inputs of grade.yml: {names:?}");
    names
}

/// Routes the example task to GitHub Actions on the grader repository.
fn use_actions(w: &mut World) {
    let port = free_port();
    w.listen = format!("127.0.0.1:{port}");
    w.extra_config = format!(
        r#"
[backends]
result_url = "http://127.0.0.1:{port}"
result_grace_s = 1
follow_interval_s = 1
[[backends.route]]
backend = "github-actions"
tasks = ["{TASK}"]
[backends.github_actions]
repository = "{GRADER}"
workflow = "grade.yml"
"#
    );
    w.fake.add_installation(GRADER_INSTALLATION, &[GRADER]);
    let inputs = workflow_inputs();
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    w.fake
        .add_workflow_with_inputs(GRADER, "grade.yml", &inputs);
}

fn input<'a>(run: &'a FakeWorkflowRun, name: &str) -> &'a str {
    run.inputs
        .get(name)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("input {name} missing from {:?}", run.inputs))
}

async fn runs_dispatched(w: &World, n: usize) -> Vec<FakeWorkflowRun> {
    w.wait(&format!("{n} dispatched workflow run(s)"), || {
        let runs = w.fake.workflow_runs(GRADER);
        (runs.len() >= n).then_some(runs)
    })
    .await
}

/// The runner's side: the real binary with the dispatched inputs, as grade.yml runs it.
fn play_runner(run: &FakeWorkflowRun) {
    let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .args(["job", "run", "--root"])
        .arg(support::root())
        .args(["--task", input(run, "task"), "--repo"])
        .arg(support::example_repo())
        .args(["--head", input(run, "head_sha")])
        .args(["--job-id", input(run, "job_id")])
        .args(["--dispatch", input(run, "dispatch")])
        .args(["--result-url", input(run, "result_url")])
        .args(["--executor", "docker"])
        .env("INFRADEV_RESULT_TOKEN", input(run, "result_token"))
        .output()
        .expect("infradev job run starts");
    assert!(
        out.status.success(),
        "infradev job run: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("the server's answer");
    assert_eq!(answer["status"], "accepted", "{answer}");
}

/// The runner finished (or was lost): GitHub says so in a `workflow_run` webhook.
async fn finish_run(w: &World, run: &FakeWorkflowRun, conclusion: &str) {
    let run = w
        .fake
        .set_workflow_run(GRADER, run.id, "completed", Some(conclusion));
    let status = w
        .send(
            "workflow_run",
            payloads::workflow_run("completed", GRADER_INSTALLATION, GRADER, &run),
        )
        .await;
    assert_eq!(status, 202);
}

async fn post_result(w: &World, url: &str, token: &str, body: &Value) -> (u16, Value) {
    let reply = w
        .http
        .post(url)
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .expect("POST result");
    let status = reply.status().as_u16();
    (status, reply.json().await.unwrap_or(Value::Null))
}

async fn a_dispatched_grade_is_run_by_the_runner_and_reported_once(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    use_actions(&mut w);
    w.start().await;
    w.seed_agent_pull(2, &w.heads.reference);
    let opened = w.pull_event("opened.json", 2, &w.heads.reference, Author::Agent);
    assert_eq!(w.send("pull_request", opened).await, 202);

    let run = runs_dispatched(&w, 1).await.remove(0);
    let job = &w.jobs(2).await[0];
    assert_eq!(job.backend, "github-actions");
    assert_eq!(run.git_ref, "main");
    assert_eq!(input(&run, "name"), format!("infradev-{}-1", job.id.0));
    assert_eq!(run.display_title, format!("infradev-{}-1", job.id.0));
    assert_eq!(input(&run, "mirror_repo"), REPO_FULL);
    assert_eq!(input(&run, "pr"), "2");
    assert_eq!(input(&run, "head_sha"), w.heads.reference);
    assert_eq!(input(&run, "task"), TASK);
    assert_eq!(input(&run, "dispatch"), "1");
    assert_eq!(input(&run, "runs_on"), r#"["self-hosted","gpu"]"#);
    assert_eq!(
        input(&run, "result_url"),
        format!("http://{}/jobs/{}/result", w.listen, job.id.0)
    );
    // The token is stored hashed, never as sent.
    let token = input(&run, "result_token").to_owned();
    assert_eq!(token.len(), 64);

    w.fake.set_workflow_run(GRADER, run.id, "in_progress", None);
    play_runner(&run);
    finish_run(&w, &run, "success").await;

    let runs = w.completed_runs(&w.heads.reference, 1).await;
    assert_eq!(
        runs[0].conclusion.as_deref(),
        Some("success"),
        "{:?}",
        runs[0].title
    );
    w.wait("the sticky comment", || {
        Some(w.sticky_comments(2)).filter(|c| !c.is_empty())
    })
    .await;
    // Followers and webhooks keep coming; the grade is reported once and dispatched once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(w.runs_for(&w.heads.reference).len(), 1);
    assert_eq!(w.fake.workflow_runs(GRADER).len(), 1);
    let results = w.results(job.id.0).await;
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].disposition.as_str(), "accepted");

    // The same token again: idempotent, nothing changes. Another token: refused.
    let url = input(&run, "result_url");
    let body = json!({"job_id": job.id.0, "dispatch": 1, "error": "infrastructure error: again"});
    let (status, answer) = post_result(&w, url, &token, &body).await;
    assert_eq!(
        (status, answer["status"].as_str()),
        (200, Some("duplicate"))
    );
    let (status, _) = post_result(&w, url, &"0".repeat(64), &body).await;
    assert_eq!(status, 401);
    let (status, _) = post_result(&w, url, "", &body).await;
    assert_eq!(status, 401);
    assert_eq!(w.results(job.id.0).await.len(), 1);
    assert_eq!(w.jobs(2).await[0].verdict.as_deref(), Some("resolved"));
    w.assert_clean();
}

async fn a_run_without_a_result_is_dispatched_again_then_neutral(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    use_actions(&mut w);
    w.start().await;
    w.seed_agent_pull(3, &w.heads.wrong);
    let opened = w.pull_event("opened.json", 3, &w.heads.wrong, Author::Agent);
    assert_eq!(w.send("pull_request", opened).await, 202);

    // The runner is lost mid-job: the job fails, then the run, and no result ever comes.
    let first = runs_dispatched(&w, 1).await.remove(0);
    let job_id = input(&first, "job_id").to_owned();
    let lost = w
        .fake
        .set_workflow_run(GRADER, first.id, "in_progress", None);
    let job_event = payloads::workflow_job(
        "completed",
        GRADER_INSTALLATION,
        GRADER,
        &lost,
        first.id * 10,
        Some("gpu-runner-7"),
        Some("failure"),
    );
    assert_eq!(w.send("workflow_job", job_event).await, 202);
    finish_run(&w, &first, "failure").await;

    // One re-dispatch, with a fresh token.
    let second = runs_dispatched(&w, 2).await.remove(1);
    assert_eq!(input(&second, "name"), format!("infradev-{job_id}-2"));
    assert_eq!(input(&second, "dispatch"), "2");
    assert_ne!(
        input(&second, "result_token"),
        input(&first, "result_token")
    );
    finish_run(&w, &second, "cancelled").await;

    // Lost twice: a neutral check that blames our infrastructure, and no third dispatch.
    let runs = w.completed_runs(&w.heads.wrong, 1).await;
    assert_eq!(
        runs[0].conclusion.as_deref(),
        Some("neutral"),
        "{:?}",
        runs[0].title
    );
    let text = format!("{:?} {:?}", runs[0].title, runs[0].summary).to_lowercase();
    assert!(text.contains("infrastructure"), "{text}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(w.fake.workflow_runs(GRADER).len(), 2);
    assert_eq!(w.runs_for(&w.heads.wrong).len(), 1);
    let job = &w.jobs(3).await[0];
    assert_eq!((job.dispatches, job.lost_runs), (2, 2));
    assert!(!job.remote_open);

    // A late result from the first dispatch is recorded and ignored.
    let body = json!({"job_id": job.id.0, "dispatch": 1, "error": "infrastructure error: late"});
    let (status, answer) = post_result(
        &w,
        input(&first, "result_url"),
        input(&first, "result_token"),
        &body,
    )
    .await;
    assert_eq!(
        (status, answer["status"].as_str()),
        (200, Some("ignored")),
        "{answer}"
    );
    let results = w.results(job.id.0).await;
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].disposition.as_str(), "ignored");
    w.assert_clean();
}

async fn a_push_cancels_the_run_of_the_old_head(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    use_actions(&mut w);
    w.start().await;
    w.seed_agent_pull(4, &w.heads.wrong);
    let opened = w.pull_event("opened.json", 4, &w.heads.wrong, Author::Agent);
    assert_eq!(w.send("pull_request", opened).await, 202);
    let old = runs_dispatched(&w, 1).await.remove(0);
    w.fake.set_workflow_run(GRADER, old.id, "in_progress", None);

    w.seed_agent_pull(4, &w.heads.reference);
    let pushed = w.pull_event("synchronize.json", 4, &w.heads.reference, Author::Agent);
    assert_eq!(w.send("pull_request", pushed).await, 202);

    // The old run is cancelled on GitHub; the new head gets its own dispatch.
    let cancelled = w
        .wait("the old run cancelled", || {
            w.fake
                .workflow_runs(GRADER)
                .into_iter()
                .find(|r| r.id == old.id && r.cancel_requested)
        })
        .await;
    assert_eq!(cancelled.conclusion.as_deref(), Some("cancelled"));
    let new = runs_dispatched(&w, 2).await.remove(1);
    assert_eq!(input(&new, "head_sha"), w.heads.reference);
    let old_checks = w.completed_runs(&w.heads.wrong, 1).await;
    assert_eq!(old_checks[0].conclusion.as_deref(), Some("cancelled"));

    // The old run's result, had it raced the cancel, is recorded and ignored.
    let old_job: i64 = input(&old, "job_id").parse().unwrap();
    let body = json!({"job_id": old_job, "dispatch": 1, "error": "task error: x"});
    let (status, answer) = post_result(
        &w,
        input(&old, "result_url"),
        input(&old, "result_token"),
        &body,
    )
    .await;
    assert_eq!(
        (status, answer["status"].as_str()),
        (200, Some("ignored")),
        "{answer}"
    );
    assert_eq!(
        answer["reason"].as_str(),
        Some("the job was cancelled"),
        "{answer}"
    );
    let jobs = w.jobs(4).await;
    assert_eq!(jobs.len(), 2);
    assert!(!jobs[0].remote_open, "the old dispatch is closed");
    w.assert_clean();
}
