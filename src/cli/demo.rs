//! `infradev demo`: builds the example repository (examples/minicache) and grades its three
//! submissions side by side, so the difference between "passes the official tests" and
//! "resolved" is visible in one screen.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::cli::common::CliError;
use crate::cli::exit;
use crate::cli::grade::grade_with_progress;
use crate::grade::report::{Report, render_summary};
use crate::grade::{ExecutorChoice, GradeRequest};
use crate::grading::{Expectation, Verdict};
use crate::task::Registry;

/// The example task the demo grades.
pub const EXAMPLE_TASK: &str = "example-block-allocator";
/// The submissions it grades, with the verdict each must get.
pub const SUBMISSIONS: [(&str, Verdict); 3] = [
    ("reference", Verdict::Resolved),
    ("wrong", Verdict::Unresolved),
    ("broken", Verdict::Unresolved),
];

/// Builds the example repository in `dest` with its deterministic history (examples/minicache/make-repo.sh).
pub fn make_example_repo(root: &Path, dest: &Path) -> anyhow::Result<()> {
    let script = root.join("examples/minicache/make-repo.sh");
    let status = std::process::Command::new("bash")
        .arg(&script)
        .arg(dest)
        .status()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", script.display());
    }
    Ok(())
}

pub async fn run(root: &Path, executor: &ExecutorChoice) -> Result<u8, CliError> {
    let task = Registry::resolve(root, EXAMPLE_TASK, None).map_err(|e| CliError {
        code: exit::USAGE_OR_TASK,
        error: e.into(),
    })?;
    let dir = tempfile::tempdir().map_err(|e| CliError {
        code: exit::INFRA,
        error: e.into(),
    })?;
    let repo: PathBuf = dir.path().join("minicache");
    make_example_repo(root, &repo).map_err(|error| CliError {
        code: exit::INFRA,
        error,
    })?;

    let mut rows = Vec::new();
    let mut code = exit::RESOLVED;
    for (name, want) in SUBMISSIONS {
        crate::outln!("━━━ submission/{name} ━━━");
        let request = GradeRequest {
            task: task.clone(),
            repo: repo.clone(),
            head: format!("submission/{name}"),
            lib: root.join("runners/python"),
            executor: executor.clone(),
            keep_workdir: false,
            retries: crate::grade::DEFAULT_RETRIES,
            unvalidated: crate::grade::Unvalidated::Refuse,
        };
        let report = grade_with_progress(&request).await?;
        crate::out!("{}", render_summary(&report));
        if report.grade.verdict == Verdict::Error {
            code = exit::INFRA;
        } else if report.grade.verdict != want && code == exit::RESOLVED {
            code = exit::UNRESOLVED;
        }
        rows.push(row(name, &report));
    }
    crate::outln!("━━━ side by side ━━━");
    crate::outln!(
        "{:<11} {:<11} {:>9} {:>7}  failure categories",
        "submission",
        "verdict",
        "official",
        "probes"
    );
    for r in rows {
        crate::outln!("{r}");
    }
    Ok(code)
}

fn row(name: &str, report: &Report) -> String {
    let count = |probe: bool| {
        let tests: Vec<_> = report
            .grade
            .tests
            .iter()
            .filter(|t| (t.expectation == Expectation::Probe) == probe)
            .collect();
        let passed = tests.iter().filter(|t| t.category.is_none()).count();
        format!("{passed}/{}", tests.len())
    };
    let categories: Vec<String> = report
        .grade
        .counts
        .total
        .0
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect();
    let verdict = format!("{:?}", report.grade.verdict).to_lowercase();
    let note = if report.grade.official_passed_but_probes_failed {
        "  ← passes every official test, rejected by probes"
    } else {
        ""
    };
    format!(
        "{name:<11} {verdict:<11} {:>9} {:>7}  {}{note}",
        count(false),
        count(true),
        if categories.is_empty() {
            "-".to_owned()
        } else {
            categories.join(", ")
        }
    )
}
