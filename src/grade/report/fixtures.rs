//! Four realistic reports for the renderer tests, built through `grade` and the redactor the
//! way the pipeline builds them.

use std::collections::BTreeMap;

use super::{GuardFlag, PhaseReport, Report, SubmissionRef, TaskRef};
use crate::grade::redact::Redactor;
use crate::grading::{
    BudgetBreach, BudgetKind, Category, Expectation, Outcome, Phase, PhaseEvidence, TestEvidence,
    grade,
};

/// A hidden probe, with a canary the renderings must never show.
pub(crate) const PROBE_SOURCE: &str = r#"import torch
from opt import ShardedAdam

SECRET_LR = 0.0123  # PROBE-SECRET-lr-7f3a

def test_resume_restores_step_count():
    opt = ShardedAdam(lr=SECRET_LR)
    state = opt.state_dict()
    assert state["step"] == 3, "resumed optimizer lost its step count"
"#;

const F2P: &str = "tests/test_opt.py::test_shard_state";
const P2P: &str = "tests/test_opt.py::test_step";
const STATE: &str = "test_state.py::test_resume_restores_step_count";
const MEMORY: &str = "test_mem.py::test_history_is_bounded";

fn phase(phase: Phase, exit_code: i64) -> PhaseEvidence {
    PhaseEvidence::exited(phase, exit_code)
}

fn test(id: &str, outcome: Outcome) -> TestEvidence {
    let phase = if id.starts_with("tests/") {
        Phase::Tests
    } else {
        Phase::Probes
    };
    let declared = match id {
        STATE => Some(Category::State),
        MEMORY => Some(Category::Memory),
        _ => Some(Category::State),
    };
    TestEvidence {
        id: id.into(),
        phase,
        outcome,
        exception: None,
        message: None,
        budget: None,
        kill: None,
        declared,
        during_collection: false,
        attempts: Vec::new(),
    }
}

fn failing(id: &str, exception: &str, message: &str) -> TestEvidence {
    TestEvidence {
        exception: Some(exception.into()),
        message: Some(message.into()),
        ..test(id, Outcome::Failed)
    }
}

fn report(
    apply_error: Option<&str>,
    phases: Vec<PhaseEvidence>,
    tests: [TestEvidence; 4],
) -> Report {
    let expectations = [
        Expectation::FailToPass,
        Expectation::PassToPass,
        Expectation::Probe,
        Expectation::Probe,
    ];
    let grade = grade(
        apply_error,
        &phases,
        expectations.into_iter().zip(tests).collect(),
    );
    let mut report = Report {
        schema_version: super::SCHEMA_VERSION,
        task: TaskRef {
            id: "shard-adam-state".into(),
            repository: "example/opt".into(),
            pr: 123,
            base_commit: "1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d".into(),
            reference_commit: "5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e".into(),
        },
        submission: SubmissionRef {
            repo: "/work/submissions/opt".into(),
            head: "abcdef0123456789abcdef0123456789abcdef01".into(),
            changed_files: vec!["opt.py".into(), "tests/test_opt.py".into()],
        },
        executor: "docker".into(),
        executor_limits: vec![],
        flags: vec![],
        apply_error: apply_error.map(str::to_owned),
        phases: phases
            .into_iter()
            .map(|evidence| PhaseReport {
                evidence,
                duration_s: 4.25,
                attempt: 1,
            })
            .collect(),
        grade,
        probe_requirements: BTreeMap::from([
            (
                STATE.to_owned(),
                "A resumed optimizer continues from the saved step count.".to_owned(),
            ),
            (
                MEMORY.to_owned(),
                "Optimizer history stays under 32 MB.".to_owned(),
            ),
        ]),
        images: Vec::new(),
        run_id: apply_error.is_none().then(|| "3f2a9c1b7d4e".into()),
        provenance: apply_error.is_none().then(|| super::Provenance {
            probes_digest: "sha256:5d8e0c2a7b41".into(),
            unvalidated: Vec::new(),
        }),
    };
    Redactor::from_sources(&[("test_state.py".into(), PROBE_SOURCE.into())])
        .redact_report(&mut report);
    report
}

pub(crate) fn resolved() -> Report {
    let passed = |id| test(id, Outcome::Passed);
    let phases = vec![phase(Phase::Tests, 0), phase(Phase::Probes, 0)];
    report(
        None,
        phases,
        [passed(F2P), passed(P2P), passed(STATE), passed(MEMORY)],
    )
}

/// Every official test passes; the probes reject it, and the submission tried to print the
/// probe file through an assertion message.
pub(crate) fn probes_reject() -> Report {
    let leaked = format!("unexpected state; probe was {PROBE_SOURCE:?}");
    let state = failing(STATE, "AssertionError", &leaked);
    let mut memory = failing(
        MEMORY,
        "infradev_pytest.MemoryBudgetExceeded",
        "peak 40.5 MB over budget 32.0 MB",
    );
    memory.budget = Some(BudgetBreach {
        kind: BudgetKind::Memory,
        measured: 40.5,
        limit: 32.0,
    });
    let phases = vec![phase(Phase::Tests, 0), phase(Phase::Probes, 1)];
    let mut r = report(
        None,
        phases,
        [
            test(F2P, Outcome::Passed),
            test(P2P, Outcome::Passed),
            state,
            memory,
        ],
    );
    r.executor = "local".into();
    r.executor_limits = vec![
        "no network isolation".into(),
        "no memory limit (OOM kills not detected)".into(),
    ];
    r
}

/// Everything passes on the first attempt but the memory probe, which goes over its budget
/// and passes when the host reruns it: flaky, so not resolved.
pub(crate) fn flaky() -> Report {
    let mut first = failing(
        MEMORY,
        "infradev_pytest.MemoryBudgetExceeded",
        "peak 40.5 MB over budget 32.0 MB",
    );
    first.budget = Some(BudgetBreach {
        kind: BudgetKind::Memory,
        measured: 40.5,
        limit: 32.0,
    });
    let memory = crate::grading::combine_attempts(first, &[test(MEMORY, Outcome::Passed)]);
    let phases = vec![phase(Phase::Tests, 0), phase(Phase::Probes, 1)];
    let mut r = report(
        None,
        phases,
        [
            test(F2P, Outcome::Passed),
            test(P2P, Outcome::Passed),
            test(STATE, Outcome::Passed),
            memory,
        ],
    );
    r.phases.push(PhaseReport {
        evidence: phase(Phase::Probes, 0),
        duration_s: 1.5,
        attempt: 2,
    });
    r
}

/// The change has a syntax error, and it touched conftest.py, which the guard restored.
pub(crate) fn build_failure() -> Report {
    let syntax = |id| TestEvidence {
        during_collection: true,
        attempts: Vec::new(),
        ..failing(id, "SyntaxError", "invalid syntax (opt.py, line 12)")
    };
    let phases = vec![phase(Phase::Tests, 2), phase(Phase::Probes, 2)];
    let mut r = report(
        None,
        phases,
        [syntax(F2P), syntax(P2P), syntax(STATE), syntax(MEMORY)],
    );
    r.flags = vec![GuardFlag {
        path: "conftest.py".into(),
        reason: "pytest configuration; restored to base".into(),
    }];
    r
}

/// Docker lost the probe image; the official tests ran fine.
pub(crate) fn infra_error() -> Report {
    let mut probes = phase(Phase::Probes, 0);
    probes.exit_code = None;
    probes.infra_error = Some("docker: image infradev/shard-adam-state:probes not found".into());
    let phases = vec![phase(Phase::Tests, 0), probes];
    let not_run = |id| test(id, Outcome::NotRun);
    report(
        None,
        phases,
        [
            test(F2P, Outcome::Passed),
            test(P2P, Outcome::Passed),
            not_run(STATE),
            not_run(MEMORY),
        ],
    )
}

/// The head does not contain the base commit: nothing runs.
pub(crate) fn not_applied() -> Report {
    let not_run = |id| test(id, Outcome::NotRun);
    let error = "head abcdef012345 does not contain base commit 1a2b3c4d5e6f";
    report(
        Some(error),
        vec![],
        [not_run(F2P), not_run(P2P), not_run(STATE), not_run(MEMORY)],
    )
}
