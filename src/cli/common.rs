//! What the commands share: the error that carries an exit code, and the argument groups
//! several commands flatten (sandbox, host, task selection). The dispatcher (`mod.rs`) and
//! every command import these; nothing here imports a command.

use std::path::{Path, PathBuf};

/// `println!` for a command's output: a reader that stops early (`infradev grade … | head`)
/// ends the output, never the process with a panic. Other write errors end it too: the
/// output is the command's, its exit code is still the verdict's.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `print!` for a command's output, like [`outln!`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        let _ = write!(stdout, $($arg)*);
        let _ = stdout.flush();
    }};
}

use anyhow::Context;
use clap::ValueEnum;

use crate::cli::exit;
use crate::grade::{ExecutorChoice, GradeError, Unvalidated};
use crate::task::Registry;

/// An error with the exit code it maps to.
pub struct CliError {
    pub code: u8,
    pub error: anyhow::Error,
}

impl CliError {
    /// A wrong argument or a task that cannot be used as written (exit 2).
    pub fn task(error: impl Into<anyhow::Error>) -> Self {
        CliError {
            code: exit::USAGE_OR_TASK,
            error: error.into(),
        }
    }

    /// Our side failed: Docker, the file system, a download (exit 3).
    pub fn infra(error: impl Into<anyhow::Error>) -> Self {
        CliError {
            code: exit::INFRA,
            error: error.into(),
        }
    }
}

impl From<GradeError> for CliError {
    fn from(e: GradeError) -> Self {
        let code = match e {
            GradeError::Usage(_) | GradeError::Task(_) => exit::USAGE_OR_TASK,
            GradeError::Infra(_) => exit::INFRA,
        };
        CliError {
            code,
            error: e.into(),
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// Where each phase runs.
    #[arg(long, value_enum, default_value_t = ExecutorKind::Docker)]
    pub executor: ExecutorKind,
    /// Wheel cache for tasks that install packages (Docker executor). Default: the cache
    /// `infradev tasks fetch` fills, `<INFRADEV_CACHE or ~/.cache/infradev>/wheels`.
    #[arg(long, env = "INFRADEV_WHEELS")]
    pub wheels: Option<PathBuf>,
    /// The interpreter of the local executor; it needs pytest.
    #[arg(long, env = "INFRADEV_PYTHON", default_value = "/usr/bin/python3")]
    pub python: PathBuf,
    /// Reruns of a failing official test or probe, each in a fresh sandbox phase, unless the
    /// task sets its own; a result that changes across attempts is `flaky` (never a pass).
    #[arg(long, env = "INFRADEV_RETRIES", default_value_t = crate::grade::DEFAULT_RETRIES,
          value_parser = clap::value_parser!(u32).range(0..=crate::task::MAX_RETRIES as i64))]
    pub retries: u32,
    /// Grade a task even when it is not what its validation.json validated (other probes,
    /// an edited task.toml, quarantined, never validated); the report says so.
    #[arg(long, env = "INFRADEV_ALLOW_UNVALIDATED")]
    pub allow_unvalidated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExecutorKind {
    /// A locked-down container per phase (bollard).
    Docker,
    /// A process group with rlimits; see the report for what it cannot guarantee.
    Local,
}

impl SandboxArgs {
    /// What a grade does with a task that is not what was validated.
    pub fn unvalidated(&self) -> Unvalidated {
        match self.allow_unvalidated {
            true => Unvalidated::Allow,
            false => Unvalidated::Refuse,
        }
    }

    /// The executor, with the wheel cache `--wheels` names, else the one `infradev tasks
    /// fetch` fills (`<cache>/wheels`: `--cache`, `INFRADEV_CACHE`, `~/.cache/infradev`).
    pub fn choice(&self) -> ExecutorChoice {
        match self.executor {
            ExecutorKind::Docker => ExecutorChoice::Docker {
                wheels: Some(
                    self.wheels
                        .clone()
                        .unwrap_or_else(|| crate::suite::fetch::Cache::locate(None).wheels()),
                ),
            },
            ExecutorKind::Local => ExecutorChoice::Local {
                python: self.python.clone(),
            },
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct TaskSelection {
    /// Task ids (or task directories).
    pub ids: Vec<String>,
    /// Every task.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct HostArgs {
    /// Download cache (wheels, sdists, upstream clones).
    #[arg(long, env = "INFRADEV_CACHE")]
    pub cache: Option<PathBuf>,
    /// The host Python whose pip downloads wheels; it must have the task's Python version.
    #[arg(long, default_value = "python3")]
    pub python: PathBuf,
}

impl TaskSelection {
    pub fn resolve(&self, root: &Path) -> Result<Vec<crate::task::Task>, CliError> {
        if self.all {
            let registry = Registry::load(root)
                .context("cannot read the tasks directory")
                .map_err(CliError::task)?;
            return registry
                .tasks
                .into_iter()
                .map(|t| t.map_err(CliError::task))
                .collect();
        }
        if self.ids.is_empty() {
            return Err(CliError::task(anyhow::anyhow!(
                "name one or more tasks, or pass --all"
            )));
        }
        self.ids
            .iter()
            .map(|id| Registry::resolve(root, id, None).map_err(CliError::task))
            .collect()
    }
}
