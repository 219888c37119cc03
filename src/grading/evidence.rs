//! What a sandbox run tells us about each test and each phase, before any judgement.

use serde::{Deserialize, Serialize};

/// The failure categories a grade reports. `Infra` is ours, never the agent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    /// The change does not apply, does not import, or has a syntax error.
    Build,
    /// A missing or renamed interface, or a wrong signature.
    Structural,
    /// Wrong state across calls, steps, aborts, failures or ranks.
    State,
    /// Numbers disagree with an independent reference beyond the justified tolerance.
    Numerical,
    /// Killed for memory, or over a declared peak-memory budget.
    Memory,
    /// Timed out, or over a declared wall-time budget.
    Time,
    /// Over a declared collective-communication budget (calls or bytes).
    Traffic,
    /// Our fault: Docker error, missing image, runner lost. Never blamed on the agent.
    Infra,
}

impl Category {
    pub const ALL: [Category; 8] = [
        Category::Build,
        Category::Structural,
        Category::State,
        Category::Numerical,
        Category::Memory,
        Category::Time,
        Category::Traffic,
        Category::Infra,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::Build => "build",
            Category::Structural => "structural",
            Category::State => "state",
            Category::Numerical => "numerical",
            Category::Memory => "memory",
            Category::Time => "time",
            Category::Traffic => "traffic",
            Category::Infra => "infra",
        }
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which sandbox run a test belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The task's official tests (FAIL_TO_PASS and PASS_TO_PASS).
    Tests,
    /// The task's hidden probes.
    Probes,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Tests => "tests",
            Phase::Probes => "probes",
        }
    }
}

/// How one test ended, as far as the structured results say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Passed,
    Failed,
    Skipped,
    /// Expected but never reported: not collected, or the sandbox died before it ran.
    NotRun,
    /// Did not pass on its first attempt and passed on a rerun (a fresh sandbox phase the host
    /// started): the result changed across attempts. Never a pass (docs/grade-json.md).
    Flaky,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::Skipped => "skipped",
            Outcome::NotRun => "not_run",
            Outcome::Flaky => "flaky",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetKind {
    Memory,
    Time,
    Traffic,
}

impl BudgetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetKind::Memory => "memory",
            BudgetKind::Time => "time",
            BudgetKind::Traffic => "traffic",
        }
    }
}

/// A declared budget that a test went over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetBreach {
    pub kind: BudgetKind,
    pub measured: f64,
    pub limit: f64,
}

/// Why the sandbox stopped a test from the outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kill {
    /// The kernel's OOM killer ended the sandbox (Docker's `OOMKilled`).
    OutOfMemory,
    /// The phase's wall-clock limit ran out.
    TimedOut,
    /// The sandbox ended with a signal or crash that neither of the above explains.
    Crashed,
}

/// Everything known about one expected test or probe after its phase ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestEvidence {
    /// pytest node id (relative to the repository for tests, to the probe dir for probes).
    pub id: String,
    pub phase: Phase,
    pub outcome: Outcome,
    /// Qualified exception type (`AssertionError`, `infradev_pytest.TestTimeout`).
    pub exception: Option<String>,
    /// The exception message, not yet redacted.
    pub message: Option<String>,
    /// A declared budget that was exceeded.
    pub budget: Option<BudgetBreach>,
    /// Set when the sandbox was killed while this test was in flight (or before it ran).
    pub kill: Option<Kill>,
    /// The category the probe manifest declares; `None` for official tests.
    pub declared: Option<Category>,
    /// The exception came from collecting (importing) the test file, not from running it.
    pub during_collection: bool,
    /// The outcome of every attempt, first to last, when the host reran the test (empty when
    /// it ran once). Never set from anything the sandbox sends: [`super::combine_attempts`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Outcome>,
}

/// What is known about a phase as a whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseEvidence {
    pub phase: Phase,
    /// The sandbox's exit code, when it exited (not when it was killed or never started).
    pub exit_code: Option<i64>,
    pub kill: Option<Kill>,
    /// A fault of ours (Docker error, missing image, unreadable results). When set, the
    /// phase's tests are never blamed on the agent.
    pub infra_error: Option<String>,
    /// The structured results disagree with the exit status (for example every test passed
    /// but pytest exited non-zero): something in the sandbox tampered with the reporting.
    pub inconsistent: Option<String>,
    /// A canary planted in the phase came back contradicted (why, in our words).
    #[serde(default)]
    pub tampered: Option<String>,
}

impl PhaseEvidence {
    /// A phase whose sandbox exited with `exit_code` and nothing else to say about it.
    pub fn exited(phase: Phase, exit_code: i64) -> Self {
        PhaseEvidence {
            phase,
            exit_code: Some(exit_code),
            kill: None,
            infra_error: None,
            inconsistent: None,
            tampered: None,
        }
    }
}
