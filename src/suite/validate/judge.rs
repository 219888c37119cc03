//! The checks of a validation (pure): what the base, the reference runs, the null patch and
//! the wrong patches must show, and when a flaky reference quarantines the task.

use std::collections::BTreeMap;

use crate::grade::report::Report;
use crate::grading::{Expectation, Outcome, Verdict};

use super::CheckRecord;

pub fn quarantine(runs: &[RunSummary]) -> Option<String> {
    let references: Vec<&RunSummary> = runs
        .iter()
        .filter(|r| r.name.starts_with("reference"))
        .collect();
    let mut why = Vec::new();
    for r in &references {
        for (_, id, _) in r.tests.iter().filter(|t| t.2 == Outcome::Flaky) {
            why.push(format!("`{id}` passed only on a rerun in {}", r.name));
        }
    }
    let mut seen: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
    for r in &references {
        for (_, id, outcome) in &r.tests {
            let (passed, failed) = seen.entry(id).or_default();
            match outcome {
                Outcome::Passed => *passed = true,
                Outcome::Flaky => {}
                _ => *failed = true,
            }
        }
    }
    for (id, _) in seen.iter().filter(|(_, (p, f))| *p && *f) {
        why.push(format!(
            "`{id}` passed in some reference runs and not in others"
        ));
    }
    (!why.is_empty()).then(|| format!("the reference is flaky: {}", why.join("; ")))
}

/// One graded run, as the checks see it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// `base`, `reference-<n>` or `null-patch`.
    pub name: String,
    pub verdict: Verdict,
    pub reason: String,
    /// Every expected test and probe with its outcome.
    pub tests: Vec<(Expectation, String, Outcome)>,
}

impl RunSummary {
    pub fn from_report(name: &str, report: &Report) -> RunSummary {
        RunSummary {
            name: name.to_owned(),
            verdict: report.grade.verdict,
            reason: report.grade.reason.clone(),
            tests: report
                .grade
                .tests
                .iter()
                .map(|t| (t.expectation, t.evidence.id.clone(), t.evidence.outcome))
                .collect(),
        }
    }
}

/// The checks, from the graded runs. Pure: table-tested below. `base_behaviour` lists the
/// probes (by test id) marked `checks_base_behaviour`.
pub fn judge(base_behaviour: &[String], runs: &[RunSummary]) -> Vec<CheckRecord> {
    let find = |name: &str| runs.iter().find(|r| r.name == name);
    let mut checks = Vec::new();

    let mut problems = Vec::new();
    if let Some(base) = find("base") {
        for (expectation, id, outcome) in &base.tests {
            if *outcome == Outcome::Flaky {
                problems.push(format!(
                    "`{id}` is flaky on the base (it passed only on a rerun)"
                ));
                continue;
            }
            let passed = *outcome == Outcome::Passed;
            let marked = base_behaviour.contains(id);
            match expectation {
                Expectation::FailToPass if passed => {
                    problems.push(format!("FAIL_TO_PASS `{id}` passes on the base"))
                }
                Expectation::PassToPass if !passed => problems.push(format!(
                    "PASS_TO_PASS `{id}` is {} on the base",
                    outcome.as_str()
                )),
                Expectation::Probe if marked && !passed => problems.push(format!(
                    "probe `{id}` is marked checks_base_behaviour but is {} on the base",
                    outcome.as_str()
                )),
                Expectation::Probe if !marked && passed => problems.push(format!(
                    "probe `{id}` passes on the base: it checks nothing the change adds \
                     (mark it checks_base_behaviour if that is intended)"
                )),
                _ => {}
            }
        }
        if base.verdict == Verdict::Error {
            problems.push(format!("the base could not be graded: {}", base.reason));
        }
    } else {
        problems.push("the base was not graded".into());
    }
    checks.push(check(
        "base: FAIL_TO_PASS and new probes fail, the rest passes",
        problems,
    ));

    let references: Vec<&RunSummary> = runs
        .iter()
        .filter(|r| r.name.starts_with("reference"))
        .collect();
    let mut problems = Vec::new();
    for (i, r) in references.iter().enumerate() {
        for (_, id, outcome) in r.tests.iter().filter(|t| t.2 != Outcome::Passed) {
            problems.push(format!("run {}: `{id}` is {}", i + 1, outcome.as_str()));
        }
    }
    if references.is_empty() {
        problems.push("the reference was not graded".into());
    }
    checks.push(check("reference: everything passes", problems));

    let mut problems = Vec::new();
    if let Some(first) = references.first() {
        let outcomes = |r: &RunSummary| -> BTreeMap<String, Outcome> {
            r.tests.iter().map(|(_, id, o)| (id.clone(), *o)).collect()
        };
        let want = outcomes(first);
        for (i, r) in references.iter().enumerate().skip(1) {
            for (id, got) in outcomes(r) {
                if want.get(&id) != Some(&got) {
                    problems.push(format!(
                        "`{id}` is {} in run 1 and {} in run {}",
                        want.get(&id).map_or("absent", |o| o.as_str()),
                        got.as_str(),
                        i + 1
                    ));
                }
            }
        }
    }
    checks.push(check(
        &format!(
            "reference: identical outcomes in {} runs (no flake)",
            references.len()
        ),
        problems,
    ));

    let problems = match find("null-patch") {
        Some(r) if r.verdict == Verdict::Resolved => {
            vec!["an empty change is graded resolved".to_owned()]
        }
        Some(_) => Vec::new(),
        None => vec!["the null patch was not graded".into()],
    };
    checks.push(check("null patch: not resolved", problems));
    checks
}

/// The `[[reject]]` check: each wrong patch (run name, the test ids of the probes it names)
/// was graded, not resolved, and failed each of those probes. `problems` holds what went
/// wrong before grading (a patch that could not be made). Pure: table-tested below.
pub fn judge_rejects(
    expected: &[(String, Vec<String>)],
    runs: &[RunSummary],
    mut problems: Vec<String>,
) -> CheckRecord {
    for (name, tests) in expected {
        let Some(run) = runs.iter().find(|r| &r.name == name) else {
            if !problems.iter().any(|p| p.starts_with(name.as_str())) {
                problems.push(format!("{name}: not graded"));
            }
            continue;
        };
        match run.verdict {
            Verdict::Resolved => problems.push(format!("{name}: graded resolved")),
            Verdict::Error => {
                problems.push(format!("{name}: could not be graded: {}", run.reason));
                continue;
            }
            _ => {}
        }
        for test in tests {
            match run.tests.iter().find(|(_, id, _)| id == test) {
                Some((_, _, Outcome::Failed)) => {}
                Some((_, _, outcome)) => {
                    problems.push(format!("{name}: probe `{test}` is {}", outcome.as_str()))
                }
                None => problems.push(format!("{name}: probe `{test}` has no result")),
            }
        }
    }
    check(
        "rejects: each wrong patch fails the probes it names",
        problems,
    )
}

fn check(name: &str, problems: Vec<String>) -> CheckRecord {
    CheckRecord {
        name: name.to_owned(),
        ok: problems.is_empty(),
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Expectation::{FailToPass as F2P, PassToPass as P2P, Probe};
    use Outcome::{Failed, NotRun, Passed};

    fn run(name: &str, verdict: Verdict, tests: &[(Expectation, &str, Outcome)]) -> RunSummary {
        RunSummary {
            name: name.into(),
            verdict,
            reason: "because".into(),
            tests: tests
                .iter()
                .map(|(e, id, o)| (*e, (*id).to_owned(), *o))
                .collect(),
        }
    }

    type Tests = &'static [(Expectation, &'static str, Outcome)];

    const GOOD_BASE: Tests = &[
        (F2P, "t::new", Failed),
        (P2P, "t::old", Passed),
        (Probe, "p::new", Failed),
        (Probe, "p::guard", Passed),
    ];
    const ALL_PASS: Tests = &[
        (F2P, "t::new", Passed),
        (P2P, "t::old", Passed),
        (Probe, "p::new", Passed),
        (Probe, "p::guard", Passed),
    ];

    fn problems(
        base: &[(Expectation, &str, Outcome)],
        refs: &[&[(Expectation, &str, Outcome)]],
        null: Verdict,
    ) -> Vec<Vec<String>> {
        let mut runs = vec![run("base", Verdict::Unresolved, base)];
        for (i, r) in refs.iter().enumerate() {
            runs.push(run(&format!("reference-{}", i + 1), Verdict::Resolved, r));
        }
        runs.push(run("null-patch", null, base));
        judge(&["p::guard".to_owned()], &runs)
            .into_iter()
            .map(|c| {
                assert_eq!(c.ok, c.problems.is_empty());
                c.problems
            })
            .collect()
    }

    #[test]
    fn a_sound_task_passes_every_check() {
        let found = problems(
            GOOD_BASE,
            &[ALL_PASS, ALL_PASS, ALL_PASS],
            Verdict::Unresolved,
        );
        assert!(found.iter().all(Vec::is_empty), "{found:?}");
    }

    #[test]
    fn each_broken_expectation_is_named() {
        let table: &[(Tests, usize, &str)] = &[
            (
                &[(F2P, "t::new", Passed)],
                0,
                "FAIL_TO_PASS `t::new` passes on the base",
            ),
            (
                &[(P2P, "t::old", NotRun)],
                0,
                "PASS_TO_PASS `t::old` is not_run on the base",
            ),
            (
                &[(Probe, "p::new", Passed)],
                0,
                "probe `p::new` passes on the base",
            ),
            (
                &[(Probe, "p::guard", Failed)],
                0,
                "probe `p::guard` is marked checks_base_behaviour",
            ),
            (
                &[(F2P, "t::new", Outcome::Flaky)],
                0,
                "`t::new` is flaky on the base (it passed only on a rerun)",
            ),
        ];
        for (base, check, words) in table {
            let found = problems(base, &[ALL_PASS], Verdict::Unresolved);
            assert!(
                found[*check].iter().any(|p| p.contains(words)),
                "{words}: {found:?}"
            );
        }
    }

    #[test]
    fn a_failing_or_flaky_reference_and_a_resolved_null_patch_are_caught() {
        let failing: &[(Expectation, &str, Outcome)] =
            &[(F2P, "t::new", Failed), (Probe, "p::new", Passed)];
        let found = problems(GOOD_BASE, &[ALL_PASS, failing], Verdict::Resolved);
        assert!(
            found[1]
                .iter()
                .any(|p| p.contains("run 2: `t::new` is failed")),
            "{found:?}"
        );
        assert!(
            found[2]
                .iter()
                .any(|p| p.contains("`t::new` is passed in run 1 and failed in run 2")),
            "{found:?}"
        );
        assert_eq!(
            found[3],
            vec!["an empty change is graded resolved".to_owned()]
        );
    }

    #[test]
    #[rustfmt::skip]
    fn a_reference_that_flakes_quarantines_the_task() {
        use Outcome::Flaky;
        let refs = |runs: &[Tests]| -> Vec<RunSummary> {
            let mut all = vec![run("base", Verdict::Unresolved, GOOD_BASE)];
            all.extend(runs.iter().enumerate().map(|(i, t)| run(&format!("reference-{}", i + 1), Verdict::Resolved, t)));
            all.push(run("null-patch", Verdict::Unresolved, GOOD_BASE));
            all
        };
        let flaky_probe: Tests = &[(F2P, "t::new", Passed), (Probe, "p::new", Flaky)];
        let failing: Tests = &[(F2P, "t::new", Failed), (Probe, "p::new", Passed)];
        let always_failing: Tests = &[(F2P, "t::new", Failed), (Probe, "p::new", Passed)];
        // runs of the reference, the reason (None: not quarantined)
        let rows: Vec<(Vec<Tests>, Option<&str>)> = vec![
            (vec![ALL_PASS, ALL_PASS, ALL_PASS], None),
            // Broken the same way every time: the checks fail, but it is not a flake.
            (vec![always_failing, always_failing], None),
            (vec![ALL_PASS, flaky_probe],
             Some("the reference is flaky: `p::new` passed only on a rerun in reference-2")),
            (vec![ALL_PASS, failing],
             Some("the reference is flaky: `t::new` passed in some reference runs and not in others")),
        ];
        for (runs, want) in rows {
            assert_eq!(quarantine(&refs(&runs)).as_deref(), want, "{runs:?}");
        }
        // A flaky base or null patch is not the reference's flake.
        let mut all = refs(&[ALL_PASS]);
        all[0].tests[0].2 = Flaky;
        assert_eq!(quarantine(&all), None);
    }

    #[test]
    #[rustfmt::skip]
    fn a_wrong_patch_must_fail_every_probe_it_names() {
        use Outcome::Flaky;
        let name = "reject collective_duplicated at pkg/dist.py:12";
        let expected = vec![(name.to_owned(), vec!["p::traffic".to_owned(), "p::state".to_owned()])];
        let both_fail: Tests = &[(P2P, "t::old", Passed), (Probe, "p::traffic", Failed), (Probe, "p::state", Failed)];
        let one_passes: Tests = &[(Probe, "p::traffic", Failed), (Probe, "p::state", Passed)];
        let flaky: Tests = &[(Probe, "p::traffic", Flaky), (Probe, "p::state", Failed)];
        let missing: Tests = &[(Probe, "p::state", Failed)];
        let not_run: Tests = &[(Probe, "p::traffic", NotRun), (Probe, "p::state", Failed)];
        // (verdict, tests, the problems)
        let rows: Vec<(Verdict, Tests, Vec<String>)> = vec![
            (Verdict::Unresolved, both_fail, vec![]),
            (Verdict::Unresolved, one_passes, vec![format!("{name}: probe `p::state` is passed")]),
            (Verdict::Unresolved, flaky, vec![format!("{name}: probe `p::traffic` is flaky")]),
            (Verdict::Unresolved, missing, vec![format!("{name}: probe `p::traffic` has no result")]),
            (Verdict::Unresolved, not_run, vec![format!("{name}: probe `p::traffic` is not_run")]),
            (Verdict::Resolved, ALL_PASS, vec![
                format!("{name}: graded resolved"),
                format!("{name}: probe `p::traffic` has no result"),
                format!("{name}: probe `p::state` has no result"),
            ]),
            // An infrastructure error is not evidence either way.
            (Verdict::Error, both_fail, vec![format!("{name}: could not be graded: because")]),
        ];
        for (verdict, tests, want) in rows {
            let got = judge_rejects(&expected, &[run(name, verdict, tests)], Vec::new());
            assert_eq!(got.problems, want, "{verdict:?} {tests:?}");
            assert_eq!(got.ok, want.is_empty());
        }
        // Not graded: said once, whether or not making the patch already failed.
        let got = judge_rejects(&expected, &[], Vec::new());
        assert_eq!(got.problems, vec![format!("{name}: not graded")]);
        let made = vec![format!("{name}: no `collective_duplicated` mutation at line 12")];
        assert_eq!(judge_rejects(&expected, &[], made.clone()).problems, made);
    }
}
