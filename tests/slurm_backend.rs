//! The Slurm backend against a real Slurm 22.05 cluster in Docker (`runners/slurm/cluster.sh`):
//! placement on 1- and 4-GPU nodes, cancellation, a node lost mid-job and the requeue that
//! follows, and a request no node can satisfy.
//!
//! One cluster serves the whole file (starting one costs 5–10 s), so the stories run inside
//! one test, ordered so the ~30 s Slurm needs to notice a dead node overlaps the others. The
//! "infradev" the jobs run is a small shell script in the shared directory: it records where
//! and how it ran, posts a result to an HTTP server in this process (proving jobs reach the
//! host) and sleeps as long as its bundle says.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use infradev::service::backend::slurm::{Slurm, SlurmConfig};
use infradev::service::backend::{BackendError, Outcome, Placement, RemoteState, Submission};

/// Stands in for `infradev job run`: writes `ran-<restart>.txt` (host, GPUs, arguments) into
/// the bundle (its working directory), sleeps as the bundle's `sleep` file says on the first
/// run and 1 s on reruns, then posts that file to `--result-url`.
const FAKE_INFRADEV: &str = r#"#!/bin/sh
url=
prev=
for a in "$@"; do [ "$prev" = --result-url ] && url="$a"; prev="$a"; done
run="${SLURM_RESTART_COUNT:-0}"
out="ran-$run.txt"
{
  echo "host=$(hostname)"
  echo "cuda=${CUDA_VISIBLE_DEVICES:-}"
  echo "args=$*"
} >"$out"
if [ "$run" = 0 ] && [ -f sleep ]; then sleep "$(cat sleep)"; else sleep 1; fi
exec python3 - "$url" "$out" <<'EOF'
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], data=open(sys.argv[2], "rb").read(), timeout=10).read()
EOF
"#;

/// A cluster of our own, removed when the test ends, even by a panic.
struct Cluster {
    name: String,
    ctl: String,
    shared: tempfile::TempDir,
}

impl Cluster {
    fn up() -> Cluster {
        let name = format!("infradev-slurm-test-{}", std::process::id());
        let shared = tempfile::Builder::new()
            .prefix("infradev-slurm-shared-")
            .tempdir()
            .expect("temp dir");
        // The guard exists before `up` runs, so a failed start is cleaned up too.
        let mut cluster = Cluster {
            name,
            ctl: String::new(),
            shared,
        };
        let started = Instant::now();
        let out = cluster
            .script(&[
                "--shared-dir",
                &cluster.shared_dir().display().to_string(),
                "up",
            ])
            .output()
            .expect("run cluster.sh");
        assert!(
            out.status.success(),
            "cluster.sh up failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.ctl = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        eprintln!(
            "cluster {} up in {:.1} s",
            cluster.name,
            started.elapsed().as_secs_f64()
        );
        cluster
    }

    fn script(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(support::root().join("runners/slurm/cluster.sh"));
        cmd.arg("--name").arg(&self.name).args(args);
        cmd
    }

    fn shared_dir(&self) -> &Path {
        self.shared.path()
    }

    fn host_addr(&self) -> String {
        let out = self
            .script(&["host-addr"])
            .output()
            .expect("cluster.sh host-addr");
        assert!(out.status.success(), "host-addr: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn docker(&self, verb: &str, host: &str) {
        let container = format!("{}-{host}", self.name);
        let out = Command::new("docker")
            .args([verb, &container])
            .output()
            .expect("docker");
        assert!(out.status.success(), "docker {verb} {container}: {out:?}");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        match self.script(&["down"]).output() {
            Ok(out) if out.status.success() => {}
            other => eprintln!("cluster.sh --name {} down failed: {other:?}", self.name),
        }
    }
}

/// `(path, body)` of every request the result server answered.
type Requests = Arc<Mutex<Vec<(String, String)>>>;

/// The host side of the result endpoint: records every request.
fn result_server() -> (u16, Requests) {
    let listener = TcpListener::bind("0.0.0.0:0").expect("bind 0.0.0.0");
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut length = 0usize;
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                    break;
                }
                if let Some((k, v)) = header.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_owned();
            record
                .lock()
                .unwrap()
                .push((path, String::from_utf8_lossy(&body).into_owned()));
            let _ = reader
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    (port, seen)
}

struct World {
    cluster: Cluster,
    slurm: Slurm,
    result_base: String,
    results: Requests,
}

impl World {
    fn bundle(&self, sub: &Submission) -> PathBuf {
        self.slurm.config().bundle_dir.join(sub.name())
    }

    /// A submission with its bundle directory; the first run sleeps `sleep_s`.
    fn submission(&self, job_id: i64, gpus: u32, sleep_s: u32) -> Submission {
        let sub = Submission {
            job_id,
            dispatch: 1,
            task_id: "example-block-allocator".into(),
            repo: "agents/minicache".into(),
            number: 7,
            head_sha: "0123456789abcdef0123456789abcdef01234567".into(),
            placement: Placement {
                gpus,
                memory_mb: 200,
                cpus: 1,
                time_limit: Duration::from_secs(120),
                labels: vec!["gpu".into()],
            },
            result_url: format!("{}/jobs/{job_id}/result", self.result_base),
        };
        let bundle = self.bundle(&sub);
        std::fs::create_dir_all(&bundle).unwrap();
        std::fs::write(bundle.join("sleep"), sleep_s.to_string()).unwrap();
        sub
    }

    async fn submit(&self, sub: &Submission) -> String {
        let on_node = self.slurm.bundle_on_node(&self.bundle(sub));
        self.slurm
            .submit(sub, &on_node)
            .await
            .unwrap_or_else(|e| panic!("submit {}: {e}", sub.name()))
    }

    /// Polls until `done` holds; panics with every state seen when `limit` passes.
    async fn wait(
        &self,
        id: &str,
        limit: Duration,
        what: &str,
        done: impl Fn(&RemoteState) -> bool,
    ) -> RemoteState {
        let start = Instant::now();
        let mut seen: Vec<RemoteState> = Vec::new();
        loop {
            let state = self
                .slurm
                .state(id)
                .await
                .unwrap_or_else(|e| panic!("state of job {id}: {e}"));
            if seen.last() != Some(&state) {
                eprintln!(
                    "  job {id} at {:>5.1} s: {state:?}",
                    start.elapsed().as_secs_f64()
                );
                seen.push(state.clone());
            }
            if done(&state) {
                return state;
            }
            assert!(
                start.elapsed() < limit,
                "job {id}: not {what} within {limit:?}; states seen: {seen:#?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn ran(&self, sub: &Submission, run: u32) -> String {
        let path = self.bundle(sub).join(format!("ran-{run}.txt"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn result_posted(&self, job_id: i64) -> Option<String> {
        let path = format!("/jobs/{job_id}/result");
        self.results
            .lock()
            .unwrap()
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, body)| body.clone())
    }
}

fn completed(state: &RemoteState) -> bool {
    matches!(
        state,
        RemoteState::Ended {
            outcome: Outcome::Completed,
            ..
        }
    )
}

fn ended(state: &RemoteState) -> bool {
    matches!(state, RemoteState::Ended { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_backend_on_a_real_cluster() {
    if !support::docker_ready() {
        return;
    }
    let started = Instant::now();
    let cluster = Cluster::up();
    let shared = cluster.shared_dir().to_path_buf();
    let fake = shared.join("fake-infradev");
    std::fs::write(&fake, FAKE_INFRADEV).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (port, results) = result_server();
    let cfg: SlurmConfig = toml::from_str(&format!(
        r#"
        command_prefix = ["docker", "exec", "-i", "{ctl}"]
        bundle_dir = "{bundles}"
        node_infradev = "{fake}"
        node_executor = "local"
        call_timeout_s = 20
        time_slack_s = 60
        "#,
        ctl = cluster.ctl,
        bundles = shared.join("bundles").display(),
        fake = fake.display(),
    ))
    .expect("config");
    cfg.validate().expect("valid config");
    let world = World {
        result_base: format!("http://{}:{port}", cluster.host_addr()),
        slurm: Slurm::new(cfg),
        cluster,
        results,
    };

    // 1. Placement: gpu:1 fits node1, gpu:4 only node2; both finish and report to the host.
    let story = Instant::now();
    let one = world.submission(101, 1, 2);
    let four = world.submission(102, 4, 2);
    let one_id = world.submit(&one).await;
    let four_id = world.submit(&four).await;
    assert_eq!(
        world.slurm.find(&one.name()).await.unwrap(),
        Some(one_id.clone())
    );
    assert_eq!(world.slurm.find("infradev-999-1").await.unwrap(), None);
    let limit = Duration::from_secs(45);
    let state = world.wait(&one_id, limit, "completed", ended).await;
    assert!(completed(&state), "gpu:1 job: {state:?}");
    let state = world.wait(&four_id, limit, "completed", ended).await;
    assert!(completed(&state), "gpu:4 job: {state:?}");
    let ran = world.ran(&one, 0);
    assert!(
        ran.contains("host=node1\ncuda=0\n"),
        "gpu:1 job ran as: {ran}"
    );
    let ran = world.ran(&four, 0);
    assert!(
        ran.contains("host=node2\ncuda=0,1,2,3\n"),
        "gpu:4 job ran as: {ran}"
    );
    assert!(
        ran.contains("job run --root ")
            && ran.contains("--task example-block-allocator --head 0123456789abcdef")
            && ran.contains("--job-id 102 --dispatch 1")
            && ran.contains("--executor local"),
        "arguments: {ran}"
    );
    for (job, sub) in [(101, &one), (102, &four)] {
        let body = world.result_posted(job);
        assert_eq!(
            body.as_deref(),
            Some(world.ran(sub, 0).as_str()),
            "result of job {job}"
        );
    }
    let log = world.bundle(&four).join(format!("slurm-{four_id}.out"));
    assert!(log.exists(), "Slurm's output file {}", log.display());
    eprintln!("placement: {:.1} s", story.elapsed().as_secs_f64());

    // 2. A node lost mid-job: the requeueable gpu:4 job runs on node2, node2 dies.
    let lost_story = Instant::now();
    let lost = world.submission(103, 4, 300);
    let lost_id = world.submit(&lost).await;
    let state = world
        .wait(&lost_id, limit, "running", |s| {
            matches!(s, RemoteState::Running { .. })
        })
        .await;
    assert_eq!(
        state,
        RemoteState::Running {
            node: Some("node2".into())
        }
    );
    // Running in Slurm's eyes is not yet running in the shell's: wait for the script.
    let ran_file = world.bundle(&lost).join("ran-0.txt");
    for _ in 0..40 {
        if ran_file.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    world.cluster.docker("kill", "node2");
    let killed = Instant::now();

    // 3. While Slurm notices (~30 s): cancellation, refusals, unknown ids, on node1.
    let story = Instant::now();
    let doomed = world.submission(104, 1, 300);
    let doomed_id = world.submit(&doomed).await;
    let state = world
        .wait(&doomed_id, limit, "running", |s| {
            matches!(s, RemoteState::Running { .. })
        })
        .await;
    assert_eq!(
        state,
        RemoteState::Running {
            node: Some("node1".into())
        }
    );
    world.slurm.cancel(&doomed_id).await.expect("scancel");
    let state = world.wait(&doomed_id, limit, "ended", ended).await;
    assert!(
        matches!(&state, RemoteState::Ended { outcome: Outcome::Cancelled, detail } if detail.contains("CANCELLED")),
        "cancelled job: {state:?}"
    );
    world
        .slurm
        .cancel(&doomed_id)
        .await
        .expect("cancelling a finished job is fine");
    assert_eq!(
        world.result_posted(104),
        None,
        "a cancelled job posts nothing"
    );

    let too_big = world.submission(105, 5, 1);
    let on_node = world.slurm.bundle_on_node(&world.bundle(&too_big));
    match world.slurm.submit(&too_big, &on_node).await {
        Err(BackendError::Rejected(msg)) => assert!(
            msg.contains("Requested node configuration is not available") && msg.contains("sbatch"),
            "{msg}"
        ),
        other => panic!("gpu:5 should be rejected, got {other:?}"),
    }
    // Slurm keeps a FAILED record (Reason=BadConstraints) of the refused request, so a server
    // that lost track of the submission finds it, and learns it never started.
    if let Some(id) = world.slurm.find(&too_big.name()).await.unwrap() {
        let state = world.slurm.state(&id).await.unwrap();
        assert!(
            matches!(&state, RemoteState::Ended { outcome: Outcome::LaunchFailed, detail } if detail.contains("BadConstraints")),
            "refused job {id}: {state:?}"
        );
    }
    assert_eq!(
        world.slurm.state("999999").await.unwrap(),
        RemoteState::Unknown
    );
    eprintln!(
        "cancel and refusals: {:.1} s",
        story.elapsed().as_secs_f64()
    );

    // Back to the lost node: requeued with the cause from the job-completion log.
    let state = world
        .wait(&lost_id, Duration::from_secs(90), "requeued", |s| {
            matches!(s, RemoteState::Requeued { .. })
        })
        .await;
    match &state {
        RemoteState::Requeued { restarts, reason } => {
            assert_eq!(*restarts, 1, "{state:?}");
            assert!(reason.contains("NODE_FAIL"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    eprintln!(
        "node loss noticed {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    world.cluster.docker("start", "node2");
    let state = world
        .wait(&lost_id, Duration::from_secs(60), "completed again", ended)
        .await;
    assert!(completed(&state), "requeued job: {state:?}");
    let rerun = world.ran(&lost, 1);
    assert!(
        rerun.contains("host=node2\ncuda=0,1,2,3\n"),
        "rerun: {rerun}"
    );
    assert_eq!(world.result_posted(103).as_deref(), Some(rerun.as_str()));
    // Both runs appended to one output file (--open-mode=append).
    let log = world.bundle(&lost).join(format!("slurm-{lost_id}.out"));
    assert!(log.exists(), "{}", log.display());
    eprintln!(
        "node loss and requeue: {:.1} s; whole file: {:.1} s",
        lost_story.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
