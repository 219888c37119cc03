//! Running one grading phase in a sandbox: the spec both executors share, and the executors.

mod command;
pub mod docker;
pub mod local;
mod output;

use std::path::PathBuf;
use std::time::Duration;

pub use command::{Layout, pytest_argv, sandbox_env};
pub use output::CappedOutput;

use crate::grading::Phase;
use crate::results::SandboxEnd;
use crate::task::Gpus;

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
    /// runners/python: our pytest plugin and config.
    pub lib: PathBuf,
    pub spec_file: PathBuf,
    /// Where the plugin writes events.jsonl; private to this phase.
    pub out: PathBuf,
    /// Host scratch dir, used as /tmp by the local executor.
    pub scratch: PathBuf,
    /// pytest node ids to run.
    pub targets: Vec<String>,
    pub limits: Limits,
    pub gpus: Gpus,
    /// pytest plugins to load with `-p`.
    pub plugins: Vec<String>,
    /// The task's own environment variables.
    pub env: Vec<(String, String)>,
}

/// How a phase's sandbox ended, with its captured output.
#[derive(Debug, Clone)]
pub struct PhaseRun {
    pub end: SandboxEnd,
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

    /// The guarantees this executor cannot give, in plain words (empty for Docker).
    pub fn limitations(&self) -> Vec<String> {
        match self {
            Executor::Docker(_) => Vec::new(),
            Executor::Local(l) => l.limitations(),
        }
    }

    /// Runs one phase. Never fails: a fault of ours is reported in `end.infra_error`.
    pub async fn run(&self, spec: &PhaseSpec) -> PhaseRun {
        let started = std::time::Instant::now();
        let (end, output) = match self {
            Executor::Docker(d) => d.run(spec).await,
            Executor::Local(l) => l.run(spec).await,
        };
        PhaseRun {
            end,
            output,
            duration: started.elapsed(),
        }
    }
}
