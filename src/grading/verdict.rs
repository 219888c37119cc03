//! The verdict: resolved iff the change applies, every FAIL_TO_PASS passes, no PASS_TO_PASS
//! regresses and every probe passes. Infra faults give `Error`, never `Unresolved`.
//!
//! Precedence of the verdict, and why:
//!
//! 1. **Apply error** → `Unresolved`, every expected test `NotRun` and `Build`: nothing ran,
//!    and it is the submission's fault.
//! 2. **Tampering** (a canary of the official phase contradicted) → `Tampered`: the results
//!    were rewritten inside the sandbox, which only the submission's code can do there.
//! 3. **Any infra fault** (a phase with an infra error, or a test whose phase has no evidence
//!    at all) → `Error`. We cannot tell what the submission would have done, so we neither
//!    pass nor fail it; this holds even if other tests failed for the agent's reasons.
//! 4. **No expected tests** → `Error`: a task that checks nothing cannot resolve anything.
//! 5. **Inconsistent phase** (results disagree with the exit status) → `Unresolved`: only the
//!    submission's code runs in the sandbox besides our plugin, so tampering is its fault, and
//!    results we cannot trust must never make a submission `Resolved`.
//! 6. Otherwise `Resolved` iff every test passed (`Skipped`, `NotRun` and `Flaky` are not
//!    passes: a test that failed once and passed on a rerun does not resolve; the reason
//!    counts the flaky ones).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Category, Outcome, PhaseEvidence, TestEvidence, classify};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Resolved,
    Unresolved,
    /// A canary planted in the official phase came back contradicted: something in the
    /// sandbox rewrote the results. Never resolved; shown to the maintainer with the reason.
    Tampered,
    Error,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Resolved => "resolved",
            Verdict::Unresolved => "unresolved",
            Verdict::Tampered => "tampered",
            Verdict::Error => "error",
        }
    }
}

/// Why a test is expected to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expectation {
    FailToPass,
    PassToPass,
    Probe,
}

impl Expectation {
    /// Official tests are the task's FAIL_TO_PASS and PASS_TO_PASS; probes are hidden.
    pub fn is_official(self) -> bool {
        self != Expectation::Probe
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Expectation::FailToPass => "fail_to_pass",
            Expectation::PassToPass => "pass_to_pass",
            Expectation::Probe => "probe",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GradedTest {
    pub expectation: Expectation,
    pub evidence: TestEvidence,
    /// `None` when the test passed.
    pub category: Option<Category>,
}

impl GradedTest {
    pub fn passed(&self) -> bool {
        self.evidence.outcome == Outcome::Passed
    }
}

/// Failures per category; categories without failures are absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoryCounts(pub BTreeMap<Category, usize>);

impl CategoryCounts {
    pub fn get(&self, category: Category) -> usize {
        self.0.get(&category).copied().unwrap_or(0)
    }

    pub fn add(&mut self, category: Category) {
        *self.0.entry(category).or_default() += 1;
    }

    /// Failures in all categories together.
    pub fn total(&self) -> usize {
        self.0.values().sum()
    }
}

/// Failure counts, separately for official tests and probes, and together.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GradeCounts {
    pub official: CategoryCounts,
    pub probes: CategoryCounts,
    pub total: CategoryCounts,
    /// Tests and probes whose outcome is `flaky` (also counted in their category above).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flaky: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grade {
    pub verdict: Verdict,
    /// One short sentence saying why, for humans.
    pub reason: String,
    /// Every official test passed but some probe did not (and the verdict is `Unresolved`):
    /// the case hidden probes exist for.
    pub official_passed_but_probes_failed: bool,
    pub tests: Vec<GradedTest>,
    pub counts: GradeCounts,
}

/// Classifies every expected test against its phase's evidence and computes the verdict.
pub fn grade(
    apply_error: Option<&str>,
    phases: &[PhaseEvidence],
    tests: Vec<(Expectation, TestEvidence)>,
) -> Grade {
    let tests: Vec<GradedTest> = tests
        .into_iter()
        .map(|(expectation, evidence)| {
            grade_one(apply_error.is_some(), phases, expectation, evidence)
        })
        .collect();
    let counts = count(&tests);
    let (verdict, reason) = verdict(apply_error, phases, &tests, &counts);
    let official_passed_but_probes_failed = verdict == Verdict::Unresolved
        && official_all_passed(&tests)
        && tests
            .iter()
            .any(|t| !t.expectation.is_official() && !t.passed());
    Grade {
        verdict,
        reason,
        official_passed_but_probes_failed,
        tests,
        counts,
    }
}

fn grade_one(
    not_applied: bool,
    phases: &[PhaseEvidence],
    expectation: Expectation,
    mut evidence: TestEvidence,
) -> GradedTest {
    let phase = phases.iter().find(|p| p.phase == evidence.phase);
    let category = match phase {
        _ if not_applied => {
            evidence.outcome = Outcome::NotRun;
            Some(Category::Build)
        }
        None => {
            evidence.outcome = Outcome::NotRun;
            Some(Category::Infra)
        }
        Some(phase) => classify(&evidence, phase),
    };
    GradedTest {
        expectation,
        evidence,
        category,
    }
}

fn count(tests: &[GradedTest]) -> GradeCounts {
    let mut counts = GradeCounts::default();
    for test in tests {
        counts.flaky += usize::from(test.evidence.outcome == Outcome::Flaky);
        let Some(category) = test.category else {
            continue;
        };
        if test.expectation.is_official() {
            counts.official.add(category);
        } else {
            counts.probes.add(category);
        }
        counts.total.add(category);
    }
    counts
}

fn verdict(
    apply_error: Option<&str>,
    phases: &[PhaseEvidence],
    tests: &[GradedTest],
    counts: &GradeCounts,
) -> (Verdict, String) {
    use Verdict::{Error, Resolved, Tampered, Unresolved};
    let phase_text = |field: fn(&PhaseEvidence) -> &Option<String>| {
        let mut texts = phases
            .iter()
            .filter_map(|p| Some((p.phase.as_str(), field(p).as_deref()?)));
        texts.next().map(|(phase, text)| (phase, first_line(text)))
    };
    if let Some(error) = apply_error {
        return (
            Unresolved,
            format!("the change does not apply: {}", first_line(error)),
        );
    }
    if let Some((phase, why)) = phase_text(|p| &p.tampered) {
        return (
            Tampered,
            format!("the {phase} phase's results were tampered with: {why}"),
        );
    }
    if let Some((phase, error)) = phase_text(|p| &p.infra_error) {
        return (
            Error,
            format!("infrastructure error in the {phase} phase: {error}"),
        );
    }
    if let Some(t) = tests.iter().find(|t| t.category == Some(Category::Infra)) {
        return (
            Error,
            format!("no results for the {} phase", t.evidence.phase.as_str()),
        );
    }
    if tests.is_empty() {
        return (Error, "the task expects no tests; nothing to grade".into());
    }
    if let Some((phase, why)) = phase_text(|p| &p.inconsistent) {
        return (
            Unresolved,
            format!("the {phase} phase's results cannot be trusted: {why}"),
        );
    }
    if counts.total.total() == 0 {
        let official = tests.iter().filter(|t| t.expectation.is_official()).count();
        let probes = tests.len() - official;
        return (
            Resolved,
            format!("all {official} official tests and {probes} probes pass"),
        );
    }
    (Unresolved, failure_reason(tests))
}

/// "2 of 3 FAIL_TO_PASS fail, 1 of 4 probes fail (memory 1)".
fn failure_reason(tests: &[GradedTest]) -> String {
    let groups = [
        (Expectation::FailToPass, "FAIL_TO_PASS"),
        (Expectation::PassToPass, "PASS_TO_PASS"),
        (Expectation::Probe, "probes"),
    ];
    let mut parts = Vec::new();
    for (expectation, name) in groups {
        let group: Vec<&GradedTest> = tests
            .iter()
            .filter(|t| t.expectation == expectation)
            .collect();
        let mut failed = CategoryCounts::default();
        group
            .iter()
            .filter_map(|t| t.category)
            .for_each(|c| failed.add(c));
        if failed.total() == 0 {
            continue;
        }
        let by_category: Vec<String> = failed.0.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let flaky = group
            .iter()
            .filter(|t| t.evidence.outcome == Outcome::Flaky)
            .count();
        let flaky = match flaky {
            0 => String::new(),
            n => format!("; {n} flaky"),
        };
        parts.push(format!(
            "{} of {} {name} fail ({}{flaky})",
            failed.total(),
            group.len(),
            by_category.join(", ")
        ));
    }
    let prefix = if official_all_passed(tests) {
        "official tests pass but "
    } else {
        ""
    };
    format!("{prefix}{}", parts.join("; "))
}

fn official_all_passed(tests: &[GradedTest]) -> bool {
    tests
        .iter()
        .filter(|t| t.expectation.is_official())
        .all(GradedTest::passed)
}

fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grading::{BudgetBreach, BudgetKind, Phase};

    fn phase(phase: Phase) -> PhaseEvidence {
        PhaseEvidence::exited(phase, 0)
    }

    fn test(id: &str, phase: Phase, outcome: Outcome) -> TestEvidence {
        TestEvidence {
            id: id.into(),
            phase,
            outcome,
            exception: None,
            message: None,
            budget: None,
            kill: None,
            declared: None,
            during_collection: false,
            attempts: Vec::new(),
        }
    }

    /// FAIL_TO_PASS, PASS_TO_PASS and two probes with the given outcomes.
    fn tests(
        f2p: Outcome,
        p2p: Outcome,
        probe_a: Outcome,
        probe_b: Outcome,
    ) -> Vec<(Expectation, TestEvidence)> {
        let mut b = test("probes/test_mem.py::test_bounded", Phase::Probes, probe_b);
        b.budget = Some(BudgetBreach {
            kind: BudgetKind::Memory,
            measured: 40.0,
            limit: 32.0,
        });
        vec![
            (
                Expectation::FailToPass,
                test("tests/test_opt.py::test_new", Phase::Tests, f2p),
            ),
            (
                Expectation::PassToPass,
                test("tests/test_opt.py::test_old", Phase::Tests, p2p),
            ),
            (
                Expectation::Probe,
                test("probes/test_state.py::test_resume", Phase::Probes, probe_a),
            ),
            (Expectation::Probe, b),
        ]
    }

    fn both() -> Vec<PhaseEvidence> {
        vec![phase(Phase::Tests), phase(Phase::Probes)]
    }

    #[test]
    #[rustfmt::skip]
    fn verdict_table() {
        use Outcome::{Failed as F, Flaky as K, NotRun as N, Passed as P, Skipped as S};
        use Verdict::*;
        let infra_probes = || {
            let mut p = phase(Phase::Probes);
            p.infra_error = Some("docker: image not found\nmore".into());
            vec![phase(Phase::Tests), p]
        };
        let inconsistent = || {
            let mut p = phase(Phase::Tests);
            p.inconsistent = Some("all passed but pytest exited 1".into());
            vec![p, phase(Phase::Probes)]
        };
        /// name, apply error, phases, outcomes (F2P, P2P, probe, probe), verdict,
        /// official passed but probes failed, reason
        type Row = (&'static str, Option<&'static str>, Vec<PhaseEvidence>, [Outcome; 4], Verdict, bool, &'static str);
        let rows: Vec<Row> = vec![
            ("all pass", None, both(), [P, P, P, P], Resolved, false,
             "all 2 official tests and 2 probes pass"),
            ("probes reject", None, both(), [P, P, F, F], Unresolved, true,
             "official tests pass but 2 of 2 probes fail (state 1, memory 1)"),
            ("f2p fails", None, both(), [F, P, P, P], Unresolved, false,
             "1 of 1 FAIL_TO_PASS fail (state 1)"),
            ("regression and probe", None, both(), [P, F, P, F], Unresolved, false,
             "1 of 1 PASS_TO_PASS fail (state 1); 1 of 2 probes fail (memory 1)"),
            ("skipped is not passed", None, both(), [P, P, S, P], Unresolved, true,
             "official tests pass but 1 of 2 probes fail (state 1)"),
            ("not run is not passed", None, both(), [N, P, P, P], Unresolved, false,
             "1 of 1 FAIL_TO_PASS fail (state 1)"),
            ("a flaky probe does not resolve", None, both(), [P, P, K, P], Unresolved, true,
             "official tests pass but 1 of 2 probes fail (state 1; 1 flaky)"),
            ("a flaky official test does not resolve", None, both(), [K, P, P, K], Unresolved, false,
             "1 of 1 FAIL_TO_PASS fail (state 1; 1 flaky); 1 of 2 probes fail (memory 1; 1 flaky)"),
            ("apply error", Some("error: patch failed\nsecond line"), both(), [P, P, P, P], Unresolved, false,
             "the change does not apply: error: patch failed"),
            ("infra beats failures", None, infra_probes(), [F, P, F, P], Error, false,
             "infrastructure error in the probes phase: docker: image not found"),
            ("missing phase is infra", None, vec![phase(Phase::Tests)], [P, P, P, P], Error, false,
             "no results for the probes phase"),
            ("inconsistent never resolves", None, inconsistent(), [P, P, P, P], Unresolved, false,
             "the tests phase's results cannot be trusted: all passed but pytest exited 1"),
        ];
        for (name, apply, phases, [a, b, c, d], verdict, flag, reason) in rows {
            let g = grade(apply, &phases, tests(a, b, c, d));
            assert_eq!((g.verdict, g.official_passed_but_probes_failed, g.reason.as_str()), (verdict, flag, reason), "row {name:?}");
        }
    }

    #[test]
    fn apply_error_marks_every_test_build_not_run() {
        let g = grade(
            Some("base commit not in head"),
            &[],
            tests(
                Outcome::Passed,
                Outcome::Passed,
                Outcome::Failed,
                Outcome::Passed,
            ),
        );
        assert!(
            g.tests
                .iter()
                .all(|t| t.evidence.outcome == Outcome::NotRun
                    && t.category == Some(Category::Build))
        );
        assert_eq!(g.counts.official.get(Category::Build), 2);
        assert_eq!(g.counts.probes.get(Category::Build), 2);
        assert_eq!(g.counts.total.total(), 4);
    }

    #[test]
    fn missing_phase_tests_are_not_run_infra() {
        let g = grade(
            None,
            &[phase(Phase::Tests)],
            tests(
                Outcome::Passed,
                Outcome::Passed,
                Outcome::Passed,
                Outcome::Passed,
            ),
        );
        let probes: Vec<_> = g
            .tests
            .iter()
            .filter(|t| t.expectation == Expectation::Probe)
            .collect();
        assert!(
            probes
                .iter()
                .all(|t| t.evidence.outcome == Outcome::NotRun
                    && t.category == Some(Category::Infra))
        );
        assert_eq!(g.counts.probes.get(Category::Infra), 2);
        assert_eq!(g.counts.official.total(), 0);
    }

    #[test]
    fn no_tests_is_an_error() {
        let g = grade(None, &both(), vec![]);
        assert_eq!(g.verdict, Verdict::Error);
    }

    #[test]
    fn grade_round_trips_through_json() {
        let g = grade(
            None,
            &both(),
            tests(
                Outcome::Passed,
                Outcome::Failed,
                Outcome::Passed,
                Outcome::Failed,
            ),
        );
        let json = serde_json::to_value(&g).unwrap();
        insta::assert_json_snapshot!(json["counts"], @r#"
        {
          "official": {
            "state": 1
          },
          "probes": {
            "memory": 1
          },
          "total": {
            "memory": 1,
            "state": 1
          }
        }
        "#);
        assert_eq!(serde_json::from_value::<Grade>(json).unwrap(), g);
    }
}
