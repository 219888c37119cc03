//! Reads the structured results a phase wrote (`events.jsonl`, see docs/grading.md) and turns
//! them into evidence for each expected test. Pure: bytes in, evidence out.
//!
//! The results are never trusted alone: they are cross-checked with the sandbox's exit
//! status, and a test that is expected but unreported is `NotRun`, never passed.

use std::collections::HashMap;

use serde::Deserialize;

use crate::grading::{BudgetBreach, Category, Kill, Outcome, Phase, PhaseEvidence, TestEvidence};

/// The exception type recorded when the results contradict the exit status.
pub const INCONSISTENT: &str = "infradev.InconsistentResults";

#[derive(Debug, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Event {
    SessionStart {},
    CollectError {
        path: String,
        exc_type: Option<String>,
        message: Option<String>,
    },
    Start {
        nodeid: String,
    },
    Result {
        nodeid: String,
        outcome: String,
        exc_type: Option<String>,
        message: Option<String>,
        budget: Option<BudgetBreach>,
    },
    Finish {
        exitstatus: i64,
    },
}

/// A test file that could not be collected (imported).
#[derive(Debug, Clone)]
struct CollectError {
    path: String,
    exception: Option<String>,
    message: Option<String>,
}

/// The result the plugin reported for one test.
#[derive(Debug, Clone)]
struct Reported {
    outcome: Outcome,
    exception: Option<String>,
    message: Option<String>,
    budget: Option<BudgetBreach>,
}

/// What one phase's events say, indexed for lookup.
#[derive(Debug, Default)]
pub struct PhaseResults {
    /// pytest and the plugin came up (a `session_start` event).
    pub started_session: bool,
    collect_errors: Vec<CollectError>,
    started: Vec<String>,
    results: HashMap<String, Reported>,
    pub exitstatus: Option<i64>,
    /// Lines that were not valid events (a torn last line after a kill is normal).
    pub malformed_lines: usize,
}

impl PhaseResults {
    pub fn parse(bytes: &[u8]) -> PhaseResults {
        let mut r = PhaseResults::default();
        for line in bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        {
            match serde_json::from_slice::<Event>(line) {
                Ok(Event::SessionStart {}) => r.started_session = true,
                Ok(Event::CollectError {
                    path,
                    exc_type,
                    message,
                }) => r.collect_errors.push(CollectError {
                    path,
                    exception: exc_type,
                    message,
                }),
                Ok(Event::Start { nodeid }) => r.started.push(nodeid),
                Ok(Event::Result {
                    nodeid,
                    outcome,
                    exc_type,
                    message,
                    budget,
                }) => {
                    let outcome = match outcome.as_str() {
                        "passed" => Outcome::Passed,
                        "skipped" => Outcome::Skipped,
                        _ => Outcome::Failed,
                    };
                    r.results.entry(nodeid).or_insert(Reported {
                        outcome,
                        exception: exc_type,
                        message,
                        budget,
                    });
                }
                Ok(Event::Finish { exitstatus }) => r.exitstatus = Some(exitstatus),
                Err(_) => r.malformed_lines += 1,
            }
        }
        r
    }

    /// How many tests have a result so far (for live progress).
    pub fn n_results(&self) -> usize {
        self.results.len()
    }
}

/// The sandbox's side of a phase: how it ended, independent of what the results say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SandboxEnd {
    pub exit_code: Option<i64>,
    pub kill: Option<Kill>,
    pub infra_error: Option<String>,
}

/// One expected test of a phase, with the category it declares (if any).
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    pub id: String,
    pub declared: Option<Category>,
}

impl Expected {
    /// This test with nothing known about it yet: not run.
    pub fn not_run(&self, phase: Phase) -> TestEvidence {
        TestEvidence {
            id: self.id.clone(),
            phase,
            outcome: Outcome::NotRun,
            exception: None,
            message: None,
            budget: None,
            kill: None,
            declared: self.declared,
            during_collection: false,
        }
    }
}

/// Combines the results with how the sandbox ended into evidence for each expected test.
pub fn evidence(
    phase: Phase,
    expected: &[Expected],
    results: &PhaseResults,
    end: &SandboxEnd,
) -> (PhaseEvidence, Vec<TestEvidence>) {
    let mut infra_error = end.infra_error.clone();
    // No session and no collection error: pytest never ran, which is ours to answer for. (A
    // failing top-level conftest.py stops pytest before the session, but says so.)
    let pytest_ran = results.started_session || !results.collect_errors.is_empty();
    if infra_error.is_none() && end.kill.is_none() && !pytest_ran {
        infra_error = Some(match end.exit_code {
            Some(code) => format!(
                "the sandbox exited with {code} before pytest started (no results were written)"
            ),
            None => "the sandbox produced no results".to_owned(),
        });
    }
    if infra_error.is_none() && end.exit_code == Some(4) && results.collect_errors.is_empty() {
        infra_error = Some("pytest rejected the grader's arguments (exit 4)".to_owned());
    }
    let inconsistent = inconsistency(results, end, expected);
    let tests = expected
        .iter()
        .map(|e| {
            let mut t = e.not_run(phase);
            if let Some(r) = reported_for(results, &e.id) {
                (t.outcome, t.exception, t.message, t.budget) = (
                    r.outcome,
                    r.exception.clone(),
                    r.message.clone(),
                    r.budget.clone(),
                );
            } else if let Some(c) = collect_error_for(results, &e.id) {
                (t.outcome, t.exception, t.message, t.during_collection) = (
                    Outcome::Failed,
                    c.exception.clone(),
                    c.message.clone(),
                    true,
                );
            } else if results
                .started
                .iter()
                .any(|s| s == &e.id || is_case_of(s, &e.id))
            {
                // In flight when the sandbox died: the kill is this test's doing.
                t.outcome = Outcome::Failed;
                t.kill = Some(end.kill.unwrap_or(Kill::Crashed));
            } else {
                t.kill = end.kill;
            }
            if let (Some(why), Outcome::Passed) = (&inconsistent, t.outcome) {
                t.outcome = Outcome::Failed;
                t.exception = Some(INCONSISTENT.to_owned());
                t.message = Some(why.clone());
            }
            t
        })
        .collect();
    let phase_evidence = PhaseEvidence {
        phase,
        exit_code: end.exit_code,
        kill: end.kill,
        infra_error,
        inconsistent,
    };
    (phase_evidence, tests)
}

/// `case` is one parametrization of `id` (`test_x[1-2]` of `test_x`).
fn is_case_of(case: &str, id: &str) -> bool {
    case.strip_prefix(id)
        .is_some_and(|rest| rest.starts_with('[') && rest.ends_with(']'))
}

/// The result for `id`: its own, or, for a parametrized test named without its parameters,
/// all its cases together (failed if any failed, with the first failure's details).
fn reported_for(results: &PhaseResults, id: &str) -> Option<Reported> {
    if let Some(r) = results.results.get(id) {
        return Some(r.clone());
    }
    let mut cases: Vec<(&String, &Reported)> = results
        .results
        .iter()
        .filter(|(k, _)| is_case_of(k, id))
        .collect();
    cases.sort_by(|a, b| a.0.cmp(b.0));
    let first_failed = cases.iter().find(|(_, r)| r.outcome == Outcome::Failed);
    match first_failed {
        Some((_, r)) => Some((*r).clone()),
        None if cases.is_empty() => None,
        None if cases.iter().all(|(_, r)| r.outcome == Outcome::Passed) => Some(cases[0].1.clone()),
        None => cases
            .iter()
            .find(|(_, r)| r.outcome != Outcome::Passed)
            .map(|(_, r)| (*r).clone()),
    }
}

/// The collection error that kept `id` from running: its file's, or its directory's.
fn collect_error_for<'a>(results: &'a PhaseResults, id: &str) -> Option<&'a CollectError> {
    let file = id.split("::").next().unwrap_or(id);
    results.collect_errors.iter().find(|c| {
        // A conftest.py that fails to import breaks every test below its directory.
        let dir = c
            .path
            .strip_suffix("conftest.py")
            .unwrap_or(&c.path)
            .trim_end_matches('/');
        c.path == file || dir.is_empty() || dir == "." || file.starts_with(&format!("{dir}/"))
    })
}

/// Why the results cannot be believed, if they contradict the exit status.
fn inconsistency(
    results: &PhaseResults,
    end: &SandboxEnd,
    expected: &[Expected],
) -> Option<String> {
    let code = end.exit_code?;
    if end.kill.is_some() {
        return None;
    }
    if let Some(status) = results.exitstatus
        && status != code
    {
        return Some(format!(
            "pytest reported exit status {status} but the sandbox exited with {code}"
        ));
    }
    let all_passed = expected.iter().all(|e| {
        results
            .results
            .get(&e.id)
            .is_some_and(|r| r.outcome == Outcome::Passed)
    }) && results.collect_errors.is_empty();
    if all_passed && code != 0 {
        return Some(format!(
            "every test reported passing but pytest exited with {code}"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENTS: &str = r#"{"event":"session_start"}
{"event":"collect_error","path":"test_b.py","exc_type":"ModuleNotFoundError","message":"No module named 'x'"}
{"event":"start","nodeid":"test_a.py::test_ok"}
{"event":"result","nodeid":"test_a.py::test_ok","when":"call","outcome":"passed","exc_type":null,"message":null,"duration_s":0.1}
{"event":"start","nodeid":"test_a.py::test_mem"}
{"event":"result","nodeid":"test_a.py::test_mem","when":"call","outcome":"failed","exc_type":"infradev_pytest.MemoryBudgetExceeded","message":"over","duration_s":0.1,"budget":{"kind":"memory","measured":40.0,"limit":32.0}}
{"event":"start","nodeid":"test_a.py::test_hang"}
{"event":"res"#;

    fn expected(ids: &[&str]) -> Vec<Expected> {
        ids.iter()
            .map(|id| Expected {
                id: (*id).to_owned(),
                declared: Some(Category::State),
            })
            .collect()
    }

    #[test]
    fn a_test_named_without_its_parameters_stands_for_all_its_cases() {
        let events = r#"{"event":"session_start"}
{"event":"result","nodeid":"t.py::test_p[a]","when":"call","outcome":"passed","exc_type":null,"message":null,"duration_s":0.1}
{"event":"result","nodeid":"t.py::test_p[b]","when":"call","outcome":"failed","exc_type":"AssertionError","message":"b is off","duration_s":0.1}
{"event":"result","nodeid":"t.py::test_q[a]","when":"call","outcome":"passed","exc_type":null,"message":null,"duration_s":0.1}
{"event":"result","nodeid":"t.py::test_q[b]","when":"call","outcome":"passed","exc_type":null,"message":null,"duration_s":0.1}
{"event":"result","nodeid":"t.py::test_pq","when":"call","outcome":"passed","exc_type":null,"message":null,"duration_s":0.1}
{"event":"finish","exitstatus":1}"#;
        let results = PhaseResults::parse(events.as_bytes());
        let end = SandboxEnd {
            exit_code: Some(1),
            kill: None,
            infra_error: None,
        };
        let ids = [
            "t.py::test_p",
            "t.py::test_q",
            "t.py::test_q[b]",
            "t.py::test_r",
        ];
        let (_, tests) = evidence(Phase::Probes, &expected(&ids), &results, &end);
        let got: Vec<_> = tests
            .iter()
            .map(|t| (t.outcome, t.message.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                (Outcome::Failed, Some("b is off")),
                (Outcome::Passed, None),
                (Outcome::Passed, None),
                // `test_pq` is not a case of `test_p`; `test_r` never ran.
                (Outcome::NotRun, None),
            ]
        );
    }

    #[test]
    fn a_killed_phase_blames_the_test_in_flight_and_leaves_the_rest_not_run() {
        let results = PhaseResults::parse(EVENTS.as_bytes());
        assert_eq!(results.malformed_lines, 1);
        let end = SandboxEnd {
            exit_code: Some(137),
            kill: Some(Kill::OutOfMemory),
            infra_error: None,
        };
        let ids = [
            "test_a.py::test_ok",
            "test_a.py::test_mem",
            "test_a.py::test_hang",
            "test_a.py::test_later",
            "test_b.py::test_x",
        ];
        let (phase, tests) = evidence(Phase::Probes, &expected(&ids), &results, &end);
        assert_eq!(phase.infra_error, None);
        assert_eq!(phase.inconsistent, None);
        let got: Vec<_> = tests
            .iter()
            .map(|t| {
                (
                    t.outcome,
                    t.exception.as_deref(),
                    t.kill,
                    t.during_collection,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (Outcome::Passed, None, None, false),
                (
                    Outcome::Failed,
                    Some("infradev_pytest.MemoryBudgetExceeded"),
                    None,
                    false
                ),
                (Outcome::Failed, None, Some(Kill::OutOfMemory), false),
                (Outcome::NotRun, None, Some(Kill::OutOfMemory), false),
                (Outcome::Failed, Some("ModuleNotFoundError"), None, true),
            ]
        );
        assert_eq!(tests[1].budget.as_ref().map(|b| b.measured), Some(40.0));
    }

    #[test]
    fn passing_results_with_a_failing_exit_are_not_believed() {
        let events = "{\"event\":\"session_start\"}\n{\"event\":\"result\",\"nodeid\":\"t.py::a\",\"outcome\":\"passed\"}\n{\"event\":\"finish\",\"exitstatus\":0}\n";
        let results = PhaseResults::parse(events.as_bytes());
        let end = SandboxEnd {
            exit_code: Some(1),
            kill: None,
            infra_error: None,
        };
        let (phase, tests) = evidence(Phase::Tests, &expected(&["t.py::a"]), &results, &end);
        assert!(phase.inconsistent.is_some());
        assert_eq!(tests[0].outcome, Outcome::Failed);
        assert_eq!(tests[0].exception.as_deref(), Some(INCONSISTENT));
    }

    #[test]
    fn a_broken_conftest_fails_the_tests_below_it_and_is_not_our_fault() {
        let events = r#"{"event":"collect_error","path":"tests/conftest.py","exc_type":"SyntaxError","message":"invalid syntax"}"#;
        let end = SandboxEnd {
            exit_code: Some(4),
            kill: None,
            infra_error: None,
        };
        let (phase, tests) = evidence(
            Phase::Tests,
            &expected(&["tests/unit/t.py::a", "other/t.py::b"]),
            &PhaseResults::parse(events.as_bytes()),
            &end,
        );
        assert_eq!(phase.infra_error, None);
        assert_eq!(
            (tests[0].exception.as_deref(), tests[0].during_collection),
            (Some("SyntaxError"), true)
        );
        assert_eq!(tests[1].outcome, Outcome::NotRun);
    }

    #[test]
    fn no_results_at_all_is_our_fault() {
        let end = SandboxEnd {
            exit_code: Some(127),
            kill: None,
            infra_error: None,
        };
        let (phase, tests) = evidence(
            Phase::Tests,
            &expected(&["t.py::a"]),
            &PhaseResults::parse(b""),
            &end,
        );
        assert!(phase.infra_error.unwrap().contains("before pytest started"));
        assert_eq!(tests[0].outcome, Outcome::NotRun);
    }

    #[test]
    fn an_expected_test_without_a_result_is_never_passed() {
        let events = "{\"event\":\"session_start\"}\n{\"event\":\"finish\",\"exitstatus\":0}\n";
        let end = SandboxEnd {
            exit_code: Some(0),
            kill: None,
            infra_error: None,
        };
        let (_, tests) = evidence(
            Phase::Tests,
            &expected(&["t.py::a"]),
            &PhaseResults::parse(events.as_bytes()),
            &end,
        );
        assert_eq!(tests[0].outcome, Outcome::NotRun);
    }
}
