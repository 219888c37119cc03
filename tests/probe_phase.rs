//! The probe phase's machinery through the real binary, on both executors: a subject that
//! dies mid-call, hangs past a time budget or holds memory is judged from outside, the next
//! test gets a fresh subject, and neither sandbox sees what the other holds.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use infradev::grade::report::Report;
use infradev::grading::{BudgetKind, Category, Kill, Outcome, Verdict};
use support::{docker_ready, example_repo, local_python_ready, root, task_dir};

fn grade(executor: &str) -> (Report, Duration, String) {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("r.json");
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("--root")
        .arg(root())
        .args(["grade", "--task"])
        .arg(task_dir())
        .arg("--repo")
        .arg(example_repo())
        .args([
            "--head",
            "submission/reference",
            "--executor",
            executor,
            "--probes",
        ])
        .arg(root().join("tests/fixtures/probe_phase"))
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run infradev");
    let text = std::fs::read_to_string(&json).unwrap_or_default();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    let report: Report = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (report, started.elapsed(), stdout)
}

fn check(executor: &str) {
    let (report, elapsed, out) = grade(executor);
    let probe = |name: &str| {
        report
            .grade
            .tests
            .iter()
            .find(|t| t.evidence.id.ends_with(name))
            .unwrap_or_else(|| panic!("no {name}: {out}"))
    };
    assert_eq!(report.grade.verdict, Verdict::Unresolved, "{out}");
    let died = probe("::test_subject_dies");
    assert_eq!(died.evidence.outcome, Outcome::Failed, "{out}");
    assert_eq!(died.evidence.kill, Some(Kill::Crashed), "{out}");
    assert_ne!(died.category, Some(Category::Infra));
    assert!(probe("::test_next_subject_serves").passed(), "{out}");
    let slow = probe("::test_slow");
    let budget = slow
        .evidence
        .budget
        .as_ref()
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        (budget.kind, slow.category),
        (BudgetKind::Time, Some(Category::Time))
    );
    assert!(
        budget.measured >= 1.2 && budget.measured < 5.0,
        "cut at 2 x 0.3 + 1 s: {budget:?}"
    );
    let hold = probe("::test_hold");
    let budget = hold
        .evidence
        .budget
        .as_ref()
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        (budget.kind, hold.category),
        (BudgetKind::Memory, Some(Category::Memory))
    );
    assert!(budget.measured >= 32.0, "64 MiB held over 16: {budget:?}");
    assert!(probe("::test_isolation").passed(), "{out}");
    assert!(probe("::test_callbacks_nest").passed(), "{out}");
    // A 30 s sleep did not hold the phase up.
    assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");
    for phase in &report.phases {
        assert_eq!(phase.evidence.infra_error, None, "{out}");
    }
}

#[test]
fn docker_probe_phase_judges_the_subject_from_outside() {
    if docker_ready() {
        check("docker");
    }
}

#[test]
fn local_probe_phase_judges_the_subject_from_outside() {
    if local_python_ready() {
        check("local");
    }
}
