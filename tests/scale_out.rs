//! Scale-out stories: grades handed to GitHub Actions runners (against the fake github.com,
//! which validates every request against GitHub's OpenAPI description) and to a real Slurm
//! cluster (Debian's packages, in containers). The server is the real service on SQLite or
//! PostgreSQL; the runner or node runs the real `infradev job run`.

#[macro_use]
mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::fake_github::FakeWorkflowRun;
use support::payloads::{self, Author};
use support::scale_out::{GRADER, GRADER_INSTALLATION, route_to_actions};
use support::story::*;

stories!(
    a_dispatched_grade_is_run_by_the_runner_and_reported_once,
    a_run_without_a_result_is_dispatched_again_then_neutral,
    a_push_cancels_the_run_of_the_old_head,
    a_server_restarted_mid_slurm_job_loses_nothing,
);

/// A started service whose example task goes to GitHub Actions.
async fn actions_story(backend: Backend) -> Option<World> {
    let mut w = World::new(backend).await?;
    route_to_actions(&mut w, 1, 1);
    w.start().await;
    Some(w)
}

/// An agent opens pull `number` at `head`, naming the example task.
async fn open_pull(w: &World, number: u64, head: &str) {
    w.seed_agent_pull(number, head);
    let opened = w.pull_event("opened.json", number, head, Author::Agent);
    assert_eq!(w.send("pull_request", opened).await, 202);
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
    let Some(w) = actions_story(backend).await else {
        return;
    };
    open_pull(&w, 2, &w.heads.reference).await;

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
    let Some(w) = actions_story(backend).await else {
        return;
    };
    open_pull(&w, 3, &w.heads.wrong).await;

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
    let Some(w) = actions_story(backend).await else {
        return;
    };
    open_pull(&w, 4, &w.heads.wrong).await;
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

// ---------------------------------------------------------------------------------------------
// Slurm: a real cluster (runners/slurm/cluster.sh: slurmctld + node1 with 1 GPU + node2 with 4,
// Debian's packages, fake GPU devices declared in gres.conf) per story. Jobs run the real
// `infradev job run --executor local` on the nodes and post to the real service.

/// A started service whose tasks `(id, gpus)` go to a cluster of its own.
struct SlurmStory {
    w: World,
    cluster: slurm::Cluster,
    _root: tempfile::TempDir,
}

async fn slurm_story(
    backend: Backend,
    tag: &str,
    tasks: &[(&str, u32)],
    first_run_delay: u32,
) -> Option<SlurmStory> {
    let mut w = World::new(backend).await?;
    let cluster = slurm::Cluster::up(tag);
    let root = slurm::gpu_tasks(tasks);
    w.root = root.path().to_path_buf();
    let ids: Vec<&str> = tasks.iter().map(|(id, _)| *id).collect();
    cluster.configure(&mut w, &ids);
    cluster.set_first_run_delay(first_run_delay);
    w.start().await;
    Some(SlurmStory {
        w,
        cluster,
        _root: root,
    })
}

mod slurm {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    use super::support;
    use super::support::payloads::{self, Author};
    use super::support::story::*;

    /// A throwaway cluster; removed on drop.
    pub struct Cluster {
        pub name: String,
        /// Bind-mounted at the same path in every container: bundles and our binary.
        pub shared: tempfile::TempDir,
        /// The host's address on the cluster network (where the service listens).
        pub host: String,
    }

    fn script() -> PathBuf {
        support::root().join("runners/slurm/cluster.sh")
    }

    /// Builds the cluster image once per test binary, before clusters start side by side.
    fn image() {
        static BUILT: OnceLock<()> = OnceLock::new();
        BUILT.get_or_init(|| {
            let out = Command::new(support::root().join("runners/slurm/build-image.sh"))
                .output()
                .expect("build-image.sh runs");
            assert!(
                out.status.success(),
                "the Slurm image did not build: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        });
    }

    impl Cluster {
        pub fn up(tag: &str) -> Cluster {
            image();
            let name = format!("infradev-t{}-{tag}", std::process::id());
            let shared = tempfile::Builder::new()
                .prefix("infradev-slurm-")
                .tempdir_in("/tmp")
                .unwrap();
            let bin = shared.path().join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            std::fs::copy(env!("CARGO_BIN_EXE_infradev"), bin.join("infradev")).unwrap();
            // The node's infradev: the real one, after a delay on a job's first run only (so a
            // story can act while the grade is running; a requeued run starts at once).
            let wrapper = bin.join("infradev-node");
            std::fs::write(
                &wrapper,
                format!(
                    "#!/bin/sh\nif [ -z \"$SLURM_RESTART_COUNT\" ]; then sleep \"$(cat {dir}/first-run-delay 2>/dev/null || echo 0)\"; fi\nexec {dir}/bin/infradev \"$@\"\n",
                    dir = shared.path().display()
                ),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
            let out = Command::new(script())
                .args(["--name", &name, "--shared-dir"])
                .arg(shared.path())
                .arg("up")
                .output()
                .expect("cluster.sh runs");
            let mut cluster = Cluster {
                name,
                shared,
                host: String::new(),
            };
            assert!(
                out.status.success(),
                "cluster.sh up: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let host = Command::new(script())
                .args(["--name", &cluster.name, "host-addr"])
                .output()
                .unwrap();
            assert!(host.status.success());
            cluster.host = String::from_utf8_lossy(&host.stdout).trim().to_owned();
            cluster
        }

        pub fn set_first_run_delay(&self, seconds: u32) {
            std::fs::write(
                self.shared.path().join("first-run-delay"),
                seconds.to_string(),
            )
            .unwrap();
        }

        pub fn bundles(&self) -> PathBuf {
            self.shared.path().join("bundles")
        }

        /// Routes `tasks` to this cluster and has the service listen where the nodes reach it.
        pub fn configure(&self, w: &mut World, tasks: &[&str]) {
            let port = free_port();
            w.listen = format!("{}:{port}", self.host);
            w.extra_config = format!(
                r#"
[backends]
result_url = "http://{host}:{port}"
result_grace_s = 2
follow_interval_s = 1
[[backends.route]]
backend = "slurm"
tasks = {tasks:?}
[backends.slurm]
command_prefix = ["docker", "exec", "-i", "{name}-ctl"]
bundle_dir = "{bundles}"
node_infradev = "{shared}/bin/infradev-node"
node_executor = "local"
# The stories' GPU variants of the example are not what was validated.
allow_unvalidated = true
call_timeout_s = 20
time_slack_s = 60
"#,
                host = self.host,
                name = self.name,
                bundles = self.bundles().display(),
                shared = self.shared.path().display(),
            );
        }

        /// `scontrol show job -o <id>` as key → value.
        pub fn job(&self, id: &str) -> HashMap<String, String> {
            let out = Command::new("docker")
                .args(["exec", &format!("{}-ctl", self.name)])
                .args(["scontrol", "show", "job", "-o", id])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        }

        /// Waits (a minute at most) until Slurm says job `id` is in `state`.
        pub async fn until_state(&self, id: &str, state: &str) -> HashMap<String, String> {
            until(
                &format!("Slurm job {id} to be {state}"),
                Duration::from_secs(60),
                || {
                    let j = self.job(id);
                    (j.get("JobState").map(String::as_str) == Some(state)).then_some(j)
                },
            )
            .await
        }

        pub fn docker(&self, verb: &str, node: &str) {
            let ok = Command::new("docker")
                .args([verb, &format!("{}-{node}", self.name)])
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "docker {verb} {node}");
        }
    }

    impl Drop for Cluster {
        fn drop(&mut self) {
            let _ = Command::new(script())
                .args(["--name", &self.name, "down"])
                .output();
        }
    }

    /// A scratch root (tasks/, probes/, runners/python) with copies of the example task that
    /// ask for GPUs: `(id, gpus)`.
    pub fn gpu_tasks(variants: &[(&str, u32)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let src = support::root();
        support::copy_dir(
            &src.join("runners/python"),
            &root.path().join("runners/python"),
        );
        let text = std::fs::read_to_string(support::task_dir().join("task.toml")).unwrap();
        for (id, gpus) in variants {
            let dir = root.path().join("tasks/example").join(id);
            support::copy_dir(&support::task_dir(), &dir);
            let text = text
                .replace(
                    &format!("id = \"{}\"", support::TASK),
                    &format!("id = \"{id}\""),
                )
                .replace("\ngpus = 0\n", &format!("\ngpus = {gpus}\n"));
            assert!(text.contains(&format!("gpus = {gpus}")));
            std::fs::write(dir.join("task.toml"), text).unwrap();
            let probes = root.path().join("probes").join(id);
            support::copy_dir(&support::probes_dir(), &probes);
            let manifest = std::fs::read_to_string(probes.join("probes.toml")).unwrap();
            std::fs::write(
                probes.join("probes.toml"),
                manifest.replace(
                    &format!("task = \"{}\"", support::TASK),
                    &format!("task = \"{id}\""),
                ),
            )
            .unwrap();
        }
        root
    }

    pub async fn open(w: &World, number: u64, head: &str, task: &str) {
        w.seed_agent_pull_for(number, head, task);
        let event = payloads::pull_request(
            "opened.json",
            INSTALLATION,
            number,
            head,
            task,
            Author::Agent,
        );
        assert_eq!(w.send("pull_request", event).await, 202);
    }

    /// The Slurm job id of the current dispatch of pull `number`'s newest job.
    pub async fn slurm_id(w: &World, number: u64) -> String {
        let started = Instant::now();
        loop {
            if let Some(id) = w
                .jobs(number)
                .await
                .last()
                .and_then(|j| j.external_id.clone())
            {
                return id;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "pull {number} was never submitted to Slurm: {:?}",
                w.jobs(number).await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub async fn until<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
        let started = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(started.elapsed() < limit, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    pub fn no_bundles_left(dir: &Path) -> bool {
        std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none())
    }
}

async fn slurm_places_1_and_4_gpu_grades_and_reports_each_once(backend: Backend) {
    let Some(SlurmStory { w, cluster, _root }) = slurm_story(
        backend,
        "place",
        &[
            ("example-gpu1", 1),
            ("example-gpu4", 4),
            ("example-gpu5", 5),
        ],
        2,
    )
    .await
    else {
        return;
    };
    slurm::open(&w, 11, &w.heads.reference, "example-gpu1").await;
    slurm::open(&w, 12, &w.heads.wrong, "example-gpu4").await;
    // No node has 5 GPUs: Slurm refuses the job, and the check says it is our side's problem.
    slurm::open(&w, 13, &w.heads.broken, "example-gpu5").await;
    let refused = w.completed_runs(&w.heads.broken, 1).await;
    assert_eq!(refused[0].conclusion.as_deref(), Some("neutral"));
    let text = format!("{:?} {:?}", refused[0].title, refused[0].summary);
    assert!(text.contains("infrastructure"), "{text}");
    // Slurm's own words are for operators (the grade page), never in the public check.
    assert!(!text.contains("Requested node configuration"), "{text}");
    let error = w.jobs(13).await[0].error.clone().unwrap_or_default();
    assert!(
        error.contains("refused")
            && error.contains("Requested node configuration is not available"),
        "{error}"
    );

    let one = slurm::slurm_id(&w, 11).await;
    let four = slurm::slurm_id(&w, 12).await;
    let (job1, job4) = (cluster.job(&one), cluster.job(&four));
    assert_eq!(
        job1["JobName"],
        format!("infradev-{}-1", w.jobs(11).await[0].id.0)
    );
    assert_eq!(job1["TresPerNode"], "gres:gpu:1", "{job1:?}");
    assert_eq!(job4["TresPerNode"], "gres:gpu:4", "{job4:?}");
    assert_eq!(job1["Requeue"], "1", "{job1:?}");

    let a = w.completed_runs(&w.heads.reference, 1).await;
    let b = w.completed_runs(&w.heads.wrong, 1).await;
    assert_eq!(
        a[0].conclusion.as_deref(),
        Some("success"),
        "{:?}",
        a[0].title
    );
    assert_eq!(
        b[0].conclusion.as_deref(),
        Some("failure"),
        "{:?}",
        b[0].title
    );
    // Placed by Slurm: the 4-GPU grade on node2 (the only node with 4 GPUs); both COMPLETED.
    for id in [&one, &four] {
        let job = cluster.until_state(id, "COMPLETED").await;
        assert_eq!(job["Restarts"], "0");
        assert!(
            ["node1", "node2"].contains(&job["NodeList"].as_str()),
            "{job:?}"
        );
    }
    assert_eq!(cluster.job(&four)["NodeList"], "node2");
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (number, head) in [(11, &w.heads.reference), (12, &w.heads.wrong)] {
        assert_eq!(w.runs_for(head).len(), 1, "one check run for {number}");
        let job = &w.jobs(number).await[0];
        assert_eq!((job.dispatches, job.lost_runs), (1, 0));
        let results = w.results(job.id.0).await;
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].disposition.as_str(), "accepted");
    }
    assert!(
        slurm::no_bundles_left(&cluster.bundles()),
        "bundles are removed after the runs"
    );
    w.assert_clean();
}

async fn a_lost_node_requeues_the_slurm_job_and_it_is_reported_once(backend: Backend) {
    let Some(SlurmStory { w, cluster, _root }) =
        slurm_story(backend, "lost", &[("example-gpu1", 1)], 300).await
    else {
        return;
    };
    slurm::open(&w, 21, &w.heads.reference, "example-gpu1").await;
    let id = slurm::slurm_id(&w, 21).await;
    let node = cluster.until_state(&id, "RUNNING").await["NodeList"].clone();

    // The node dies mid-grade. Slurm requeues the job; the server notes it as infra.
    cluster.docker("kill", &node);
    let started = std::time::Instant::now();
    loop {
        if w.jobs(21).await[0].remote_restarts >= 1 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the requeue was never noticed: {:?}",
            cluster.job(&id)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cluster.docker("start", &node);

    // The rerun (no delay: SLURM_RESTART_COUNT is set) grades and reports, once.
    let runs = w.completed_runs(&w.heads.reference, 1).await;
    assert_eq!(
        runs[0].conclusion.as_deref(),
        Some("success"),
        "{:?}",
        runs[0].title
    );
    let job = cluster.job(&id);
    assert_eq!(job["Restarts"], "1", "{job:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(w.runs_for(&w.heads.reference).len(), 1);
    let job = &w.jobs(21).await[0];
    assert_eq!(
        (job.dispatches, job.lost_runs, job.remote_restarts),
        (1, 0, 1),
        "requeued by Slurm, never re-dispatched, never blamed"
    );
    assert_eq!(job.verdict.as_deref(), Some("resolved"));
    w.assert_clean();
}

async fn a_push_cancels_the_slurm_job(backend: Backend) {
    let Some(SlurmStory { w, cluster, _root }) =
        slurm_story(backend, "push", &[("example-gpu1", 1)], 300).await
    else {
        return;
    };
    slurm::open(&w, 31, &w.heads.wrong, "example-gpu1").await;
    let old = slurm::slurm_id(&w, 31).await;
    cluster.until_state(&old, "RUNNING").await;

    cluster.set_first_run_delay(0);
    w.seed_agent_pull_for(31, &w.heads.reference, "example-gpu1");
    let pushed = payloads::pull_request(
        "synchronize.json",
        INSTALLATION,
        31,
        &w.heads.reference,
        "example-gpu1",
        Author::Agent,
    );
    assert_eq!(w.send("pull_request", pushed).await, 202);

    // COMPLETING is transient: scancel'd, its processes not yet reaped.
    let state = slurm::until("scancel of the old job", Duration::from_secs(60), || {
        let state = cluster.job(&old).get("JobState").cloned()?;
        (!matches!(state.as_str(), "RUNNING" | "COMPLETING")).then_some(state)
    })
    .await;
    assert_eq!(state, "CANCELLED");
    let new = w.completed_runs(&w.heads.reference, 1).await;
    assert_eq!(new[0].conclusion.as_deref(), Some("success"));
    let old_check = w.completed_runs(&w.heads.wrong, 1).await;
    assert_eq!(old_check[0].conclusion.as_deref(), Some("cancelled"));
    let jobs = w.jobs(31).await;
    assert_eq!(jobs.len(), 2);
    assert!(!jobs[0].remote_open);
    assert!(
        w.results(jobs[0].id.0).await.is_empty(),
        "the old run never reported"
    );
    w.assert_clean();
}

async fn a_server_restarted_mid_slurm_job_loses_nothing(backend: Backend) {
    let Some(SlurmStory {
        mut w,
        cluster,
        _root,
    }) = slurm_story(
        backend,
        &format!("restart-{backend:?}").to_lowercase(),
        &[("example-gpu1", 1)],
        5,
    )
    .await
    else {
        return;
    };
    slurm::open(&w, 41, &w.heads.reference, "example-gpu1").await;
    let id = slurm::slurm_id(&w, 41).await;
    cluster.until_state(&id, "RUNNING").await;

    // The server goes down while the node grades; the job's post fails and is retried.
    w.kill().await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        cluster.job(&id).get("JobState").map(String::as_str),
        Some("RUNNING"),
        "the job waits for the server to take its result"
    );
    w.start().await;

    let runs = w.completed_runs(&w.heads.reference, 1).await;
    assert_eq!(
        runs[0].conclusion.as_deref(),
        Some("success"),
        "{:?}",
        runs[0].title
    );
    cluster.until_state(&id, "COMPLETED").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(w.runs_for(&w.heads.reference).len(), 1);
    let job = &w.jobs(41).await[0];
    assert_eq!((job.dispatches, job.lost_runs), (1, 0));
    assert_eq!(w.results(job.id.0).await.len(), 1);
    w.assert_clean();
}

async fn an_unreachable_controller_delays_the_grade_without_blame(backend: Backend) {
    let Some(SlurmStory { w, cluster, _root }) =
        slurm_story(backend, "outage", &[("example-gpu1", 1)], 0).await
    else {
        return;
    };

    // The controller is down when the grade is dispatched: the submission fails, the job waits
    // (backing off) instead of being reported, and goes through once the controller is back.
    cluster.docker("kill", "ctl");
    slurm::open(&w, 51, &w.heads.reference, "example-gpu1").await;
    let started = std::time::Instant::now();
    loop {
        let jobs = w.jobs(51).await;
        if jobs
            .first()
            .is_some_and(|j| j.attempts >= 1 && j.error.is_some())
        {
            assert_eq!(
                jobs[0].state,
                infradev::service::store::JobState::Queued,
                "{jobs:?}"
            );
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{jobs:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        w.runs_for(&w.heads.reference)
            .iter()
            .all(|r| r.status != "completed")
    );
    cluster.docker("start", "ctl");

    let runs = w.completed_runs(&w.heads.reference, 1).await;
    assert_eq!(
        runs[0].conclusion.as_deref(),
        Some("success"),
        "{:?}",
        runs[0].title
    );
    let job = &w.jobs(51).await[0];
    assert_eq!(
        (job.dispatches, job.lost_runs),
        (job.attempts, 0),
        "{job:?}"
    );
    assert!(job.attempts >= 2, "{job:?}");
    w.assert_clean();
}

mod slurm_stories {
    #[tokio::test(flavor = "multi_thread")]
    async fn an_unreachable_controller_delays_the_grade_without_blame() {
        super::an_unreachable_controller_delays_the_grade_without_blame(super::Backend::Sqlite)
            .await
    }
    #[tokio::test(flavor = "multi_thread")]
    async fn slurm_places_1_and_4_gpu_grades_and_reports_each_once() {
        super::slurm_places_1_and_4_gpu_grades_and_reports_each_once(super::Backend::Sqlite).await
    }
    #[tokio::test(flavor = "multi_thread")]
    async fn a_lost_node_requeues_the_slurm_job_and_it_is_reported_once() {
        super::a_lost_node_requeues_the_slurm_job_and_it_is_reported_once(super::Backend::Sqlite)
            .await
    }
    #[tokio::test(flavor = "multi_thread")]
    async fn a_push_cancels_the_slurm_job() {
        super::a_push_cancels_the_slurm_job(super::Backend::Sqlite).await
    }
}
