//! Running one grading phase in a sandbox: the spec both executors share, and the executors.

pub mod broker;
mod collect;
mod command;
pub mod docker;
pub mod local;
mod output;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

pub use command::{Layout, Role, judge_argv, official_argv, sandbox_env, subject_argv};
pub use output::CappedOutput;

use crate::grade::results::{PhaseResults, SandboxEnd};
use crate::grading::Phase;
use crate::task::{Budget, Gpus};

/// Limits applied to one phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub memory_mb: u64,
    pub cpus: f64,
    pub pids: i64,
    /// Wall clock for the whole phase; the sandbox is killed when it runs out.
    pub wall: Duration,
    /// Bytes of stdout+stderr kept (the tail).
    pub output_bytes: usize,
    /// Size of the scratch tmpfs (`/tmp`).
    pub scratch_mb: u64,
}

/// Everything an executor needs to run one phase. Paths are on the host.
#[derive(Debug, Clone)]
pub struct PhaseSpec {
    pub phase: Phase,
    /// Shared by every sandbox of one grade; labels containers for the reaper.
    pub run_id: String,
    pub repo: PathBuf,
    /// Only for the probe phase.
    pub probes: Option<PathBuf>,
    /// runners/python: our plugins, the entry script and the subject's server.
    pub lib: PathBuf,
    /// The official phase's spec (the per-test timeout; nothing about which tests count).
    pub spec_file: PathBuf,
    /// This phase's private work dir on the host (socket directories live here).
    pub dir: PathBuf,
    /// Host scratch dir, used as /tmp by the local executor.
    pub scratch: PathBuf,
    /// Test files to run (relative to the repository, or to the probe directory).
    pub targets: Vec<String>,
    pub limits: Limits,
    pub gpus: Gpus,
    /// pytest plugins to load with `-p`.
    pub plugins: Vec<String>,
    /// The task's own environment variables.
    pub env: Vec<(String, String)>,
    pub test_timeout_s: u64,
    /// The probes' budgets by node id, enforced by the broker.
    pub budgets: Vec<(String, Budget)>,
}

/// How a phase's sandbox ended, with its captured output and the results the host collected.
#[derive(Debug)]
pub struct PhaseRun {
    pub end: SandboxEnd,
    pub results: PhaseResults,
    /// The tail of stdout and stderr; may contain anything the code printed, so it is
    /// redacted before any output.
    pub output: String,
    pub duration: Duration,
}

/// The two executors behind one interface.
pub enum Executor {
    Docker(docker::DockerExecutor),
    Local(local::LocalExecutor),
}

impl Executor {
    pub fn name(&self) -> &'static str {
        match self {
            Executor::Docker(_) => "docker",
            Executor::Local(_) => "local",
        }
    }

    /// The images phases run in, `(tag, id)`, base first (none for the local executor).
    pub fn images(&self) -> Vec<(String, String)> {
        match self {
            Executor::Docker(d) => d.image().layers.clone(),
            Executor::Local(_) => Vec::new(),
        }
    }

    /// For Docker, a guard that removes the sandboxes of run `run_id` at once if the grade is
    /// abandoned (dropped) before it disarms the guard. The local executor has none: its
    /// direct children are killed when dropped (`kill_on_drop`), but not the rest of their
    /// process groups.
    pub fn run_reaper(&self, run_id: &str) -> Option<docker::RunReaper> {
        match self {
            Executor::Docker(d) => Some(d.run_reaper(run_id)),
            Executor::Local(_) => None,
        }
    }

    /// The guarantees this executor cannot give, in plain words (empty for Docker).
    pub fn limitations(&self) -> Vec<String> {
        match self {
            Executor::Docker(_) => Vec::new(),
            Executor::Local(l) => l.limitations(),
        }
    }

    /// Runs one phase. Never fails: a fault of ours is reported in `end.infra_error`.
    /// `progress` counts the results received so far.
    pub async fn run(&self, spec: &PhaseSpec, progress: Arc<AtomicUsize>) -> PhaseRun {
        let started = std::time::Instant::now();
        let (end, output, results) = match (self, spec.phase) {
            (Executor::Docker(d), Phase::Tests) => d.run_official(spec, progress).await,
            (Executor::Docker(d), Phase::Probes) => d.run_probes(spec, progress).await,
            (Executor::Local(l), Phase::Tests) => l.run_official(spec, progress).await,
            (Executor::Local(l), Phase::Probes) => l.run_probes(spec, progress).await,
        };
        PhaseRun {
            end,
            results,
            output,
            duration: started.elapsed(),
        }
    }
}

/// What the broker enforces in a probe phase.
pub(crate) fn broker_config(spec: &PhaseSpec, progress: Arc<AtomicUsize>) -> broker::BrokerConfig {
    broker::BrokerConfig {
        budgets: spec.budgets.clone(),
        call_timeout: Duration::from_secs(spec.test_timeout_s.max(1)),
        startup_timeout: STARTUP_TIMEOUT,
        max_reply: broker::MAX_FRAME,
        max_callbacks: broker::MAX_CALLBACKS_PER_CALL,
        progress: Some(progress),
    }
}

/// The official phase around one sandbox run: the results socket in its own directory (given
/// to `run`, which mounts or passes it), the collector, and the run itself.
pub(crate) async fn collected<Fut>(
    spec: &PhaseSpec,
    progress: Arc<AtomicUsize>,
    run: impl FnOnce(PathBuf) -> Fut,
) -> (SandboxEnd, String, PhaseResults)
where
    Fut: std::future::Future<Output = (SandboxEnd, String)>,
{
    let dir = spec.dir.join("events-socket");
    if let Err(e) = private_dir(&dir) {
        return failed(format!("cannot create {}: {e}", dir.display()));
    }
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let ended = async {
        let _ = rx.await;
    };
    let collector = match collect::collect(&dir.join(command::EVENTS_SOCKET), ended, progress).await
    {
        Ok(c) => tokio::spawn(c.run()),
        Err(e) => return failed(format!("cannot listen for results: {e}")),
    };
    let (end, output) = run(dir).await;
    let _ = tx.send(());
    let results = collector.await.unwrap_or_default();
    (end, output, results)
}

/// The probe phase: the two socket directories, the broker, and the judge run beside it.
/// `setup` gets the judge's and the subject's socket directories and returns the subject
/// host and the judge's run.
pub(crate) async fn brokered<H, Fut>(
    spec: &PhaseSpec,
    progress: Arc<AtomicUsize>,
    setup: impl FnOnce(&std::path::Path, &std::path::Path) -> Result<(H, Fut), String>,
) -> (SandboxEnd, String, PhaseResults)
where
    H: broker::SubjectHost,
    Fut: std::future::Future<Output = (SandboxEnd, String)>,
{
    let (judge_dir, subject_dir) = match broker::socket_dirs(&spec.dir) {
        Ok(d) => d,
        Err(e) => return failed(format!("cannot create the socket directories: {e}")),
    };
    let broker = match broker::Broker::bind(&judge_dir, &subject_dir) {
        Ok(b) => b,
        Err(e) => return failed(format!("cannot listen on the broker's sockets: {e}")),
    };
    let (mut host, judge) = match setup(&judge_dir, &subject_dir) {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let judge_run = async {
        let r = judge.await;
        let _ = tx.send(());
        r
    };
    let judge_exited = async {
        let _ = rx.await;
    };
    let cfg = broker_config(spec, progress);
    let ((mut end, output), brokered) =
        tokio::join!(judge_run, broker.serve(&mut host, &cfg, judge_exited));
    host.stop().await;
    if end.infra_error.is_none() {
        end.infra_error = brokered.infra_error;
    }
    (end, output, brokered.results)
}

/// A phase that could not start: our fault.
pub(crate) fn failed(message: String) -> (SandboxEnd, String, PhaseResults) {
    let end = SandboxEnd {
        exit_code: None,
        kill: None,
        infra_error: Some(message),
    };
    (end, String::new(), PhaseResults::default())
}

/// A directory the sandbox user can traverse but not write.
pub(crate) fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
}

/// How long a sandbox may take from its start to its hello.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);
