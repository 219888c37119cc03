//! Flake handling, the pure part: which tests get another attempt, and how the attempts of one
//! test combine into its outcome.
//!
//! The host decides everything here from evidence of its own (how each sandbox ended, the
//! results it received); the sandbox never learns that a phase is a rerun, and nothing it sends
//! can mark a test flaky or passed across attempts. The rules:
//!
//! * Only a test that **failed or did not run** in a phase that ran cleanly (no infra error,
//!   no tampering, no inconsistency) and **ended on its own** is rerun; a `build` failure (a
//!   syntax or import error) is not: it cannot change. `skipped` is a decision of the test
//!   itself and is not rerun either. A phase the sandbox's limits ended (killed for memory or
//!   at its wall clock, or crashed as a whole) is not rerun, nor is anything after a rerun that
//!   ended so: a submission that hangs or blows up its sandbox costs the grader at most one
//!   extra phase, never `retries` more.
//! * A phase where more than [`MAX_RERUN`] tests did not pass is not rerun at all: a flake is
//!   the exception, and a change that fails many tests fails them for its own reasons. Since a
//!   flaky result never resolves, reruns never change a verdict, only what a failure is called;
//!   this keeps what a submission can make the grader spend on them small (at most
//!   `MAX_RERUN` tests, `retries` times).
//! * A test is rerun until it passes or its retries are spent, each time in a fresh sandbox
//!   phase that runs the still-failing ids only.
//! * A test that failed and then passed is **`flaky`**: its evidence is the first failure's (so
//!   its category says what failed: typically `time` under load), its `attempts` list every
//!   outcome. A flaky test is never a pass: the verdict treats it as a failure, so a flaky
//!   test (official or probe) never lets a submission resolve.
//! * A test that failed on every attempt keeps its first failure, with the attempts recorded.

use super::{Category, Outcome, Phase, PhaseEvidence, TestEvidence, classify};

/// How many times a failing test (official phase) or probe (probe phase) is rerun.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retries {
    pub tests: u32,
    pub probes: u32,
}

impl Retries {
    pub fn for_phase(self, phase: Phase) -> u32 {
        match phase {
            Phase::Tests => self.tests,
            Phase::Probes => self.probes,
        }
    }
}

/// The most failing tests of one phase that are rerun; with more, none is.
pub const MAX_RERUN: usize = 3;

/// The tests of a phase's first attempt that get another one (indices into `tests`).
pub fn rerun_candidates(phase: &PhaseEvidence, tests: &[TestEvidence]) -> Vec<usize> {
    let failing = tests
        .iter()
        .filter(|t| !matches!(t.outcome, Outcome::Passed | Outcome::Skipped))
        .count();
    if failing > MAX_RERUN {
        return Vec::new();
    }
    (0..tests.len())
        .filter(|&i| needs_rerun(phase, &tests[i]))
        .collect()
}

/// Whether `test`, as its latest attempt in `phase` left it, gets another attempt.
pub fn needs_rerun(phase: &PhaseEvidence, test: &TestEvidence) -> bool {
    let clean = phase.infra_error.is_none()
        && phase.tampered.is_none()
        && phase.inconsistent.is_none()
        && phase.kill.is_none();
    clean
        && matches!(test.outcome, Outcome::Failed | Outcome::NotRun)
        && classify(test, phase) != Some(Category::Build)
}

/// One test's outcome over all its attempts: `first`, then each rerun in order.
pub fn combine_attempts(first: TestEvidence, reruns: &[TestEvidence]) -> TestEvidence {
    if reruns.is_empty() {
        return first;
    }
    let mut combined = first;
    let mut attempts = vec![combined.outcome];
    attempts.extend(reruns.iter().map(|r| r.outcome));
    if reruns.iter().any(|r| r.outcome == Outcome::Passed) {
        combined.outcome = Outcome::Flaky;
    }
    combined.attempts = attempts;
    combined
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grading::{BudgetBreach, BudgetKind, Kill};

    fn phase() -> PhaseEvidence {
        PhaseEvidence::exited(Phase::Probes, 1)
    }

    fn attempt(outcome: Outcome) -> TestEvidence {
        TestEvidence {
            id: "test_time.py::test_fast".into(),
            phase: Phase::Probes,
            outcome,
            exception: (outcome == Outcome::Failed)
                .then(|| "infradev.TimeBudgetExceeded".to_owned()),
            message: None,
            budget: (outcome == Outcome::Failed).then_some(BudgetBreach {
                kind: BudgetKind::Time,
                measured: 2.0,
                limit: 1.0,
            }),
            kill: None,
            declared: Some(Category::Time),
            during_collection: false,
            attempts: Vec::new(),
        }
    }

    #[test]
    #[rustfmt::skip]
    fn attempts_combine_into_one_outcome() {
        use Outcome::{Failed as F, NotRun as N, Passed as P};
        // first, reruns, combined outcome, attempts recorded
        let rows: Vec<(Outcome, Vec<Outcome>, Outcome, Vec<Outcome>)> = vec![
            (P, vec![], P, vec![]),
            (F, vec![], F, vec![]),
            (F, vec![P], Outcome::Flaky, vec![F, P]),
            (F, vec![F, P], Outcome::Flaky, vec![F, F, P]),
            (F, vec![F, F], F, vec![F, F, F]),
            (N, vec![P], Outcome::Flaky, vec![N, P]),
            (N, vec![F], N, vec![N, F]),
        ];
        for (first, reruns, want, attempts) in rows {
            let reruns: Vec<TestEvidence> = reruns.into_iter().map(attempt).collect();
            let got = combine_attempts(attempt(first), &reruns);
            assert_eq!((got.outcome, &got.attempts), (want, &attempts), "{first:?} then {reruns:?}");
            // The evidence is the first attempt's: what failed, for the category.
            assert_eq!(got.budget, attempt(first).budget);
        }
    }

    #[test]
    fn a_flaky_test_keeps_its_first_failure_category() {
        let got = combine_attempts(attempt(Outcome::Failed), &[attempt(Outcome::Passed)]);
        assert_eq!(classify(&got, &phase()), Some(Category::Time));
    }

    #[test]
    #[rustfmt::skip]
    fn which_tests_are_rerun() {
        let mut build = attempt(Outcome::Failed);
        (build.exception, build.budget, build.during_collection) = (Some("ImportError".into()), None, true);
        let mut syntax = attempt(Outcome::Failed);
        (syntax.exception, syntax.budget) = (Some("SyntaxError".into()), None);
        let mut killed = attempt(Outcome::Failed);
        (killed.budget, killed.kill) = (None, Some(Kill::TimedOut));
        let with = |f: fn(&mut PhaseEvidence)| { let mut p = phase(); f(&mut p); p };
        let rows: Vec<(&str, PhaseEvidence, TestEvidence, bool)> = vec![
            ("a failure", phase(), attempt(Outcome::Failed), true),
            ("not run", phase(), attempt(Outcome::NotRun), true),
            ("killed by the clock", phase(), killed, true),
            ("passed", phase(), attempt(Outcome::Passed), false),
            ("skipped", phase(), attempt(Outcome::Skipped), false),
            ("an import error", phase(), build, false),
            ("a syntax error", phase(), syntax, false),
            ("infra", with(|p| p.infra_error = Some("docker".into())), attempt(Outcome::Failed), false),
            ("tampered", with(|p| p.tampered = Some("canary".into())), attempt(Outcome::Failed), false),
            ("inconsistent", with(|p| p.inconsistent = Some("exit 1".into())), attempt(Outcome::Failed), false),
            ("a phase killed at its wall clock", with(|p| p.kill = Some(Kill::TimedOut)), attempt(Outcome::NotRun), false),
            ("a phase killed for memory", with(|p| p.kill = Some(Kill::OutOfMemory)), attempt(Outcome::Failed), false),
        ];
        for (name, phase, test, want) in rows {
            assert_eq!(needs_rerun(&phase, &test), want, "{name}");
        }
    }

    #[test]
    fn a_phase_with_many_failures_is_not_rerun() {
        use Outcome::{Failed as F, Passed as P, Skipped as S};
        let tests = |outcomes: &[Outcome]| -> Vec<TestEvidence> {
            outcomes.iter().map(|o| attempt(*o)).collect()
        };
        // outcomes of the first attempt, the indices rerun
        let rows: Vec<(Vec<Outcome>, Vec<usize>)> = vec![
            (vec![P, P, P], vec![]),
            (vec![P, F, S, P], vec![1]),
            (vec![F, F, P, F], vec![0, 1, 3]),
            (vec![F, F, F, F], vec![]),
            (vec![F, Outcome::NotRun, F, F, P], vec![]),
        ];
        for (outcomes, want) in rows {
            assert_eq!(
                rerun_candidates(&phase(), &tests(&outcomes)),
                want,
                "{outcomes:?}"
            );
        }
    }
}
