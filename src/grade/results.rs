//! Reads the structured results a phase wrote (`events.jsonl`, see docs/grading.md) and turns
//! them into evidence for each expected test. Pure: bytes in, evidence out.
//!
//! The results are never trusted alone: they are cross-checked with the sandbox's exit
//! status, and a test that is expected but unreported is `NotRun`, never passed.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use crate::grading::{
    BudgetBreach, BudgetKind, Category, Kill, Outcome, Phase, PhaseEvidence, TestEvidence,
};

/// The exception type recorded when the results contradict the exit status.
pub const INCONSISTENT: &str = "infradev.InconsistentResults";

/// One event of a phase's results (docs/grading.md), from the official phase's plugin or the
/// probe phase's judge.
#[derive(Debug, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// Sent before any submission code can run: the infra boundary.
    Ready {},
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
        /// Only the official phase's plugin reports budgets; the broker measures the probes'.
        #[serde(default)]
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
    /// A kill the broker saw while this test ran.
    kill: Option<Kill>,
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
    /// The infra boundary: our side was up before submission code could run.
    ready: bool,
    events: usize,
    /// The first test reported twice with different outcomes.
    conflict: Option<String>,
}

/// Events kept per phase; a sandbox cannot make the host hold more.
const MAX_EVENTS: usize = 200_000;
/// Characters kept of a node id or path.
const MAX_ID: usize = 512;
/// Characters kept of a message (used to classify, never rendered).
const MAX_MESSAGE: usize = 2000;

/// Exception names a report may carry: anything else a sandbox names is `Exception`.
pub const ALLOWED_EXCEPTIONS: &[&str] = &[
    "AssertionError",
    "TypeError",
    "ValueError",
    "KeyError",
    "IndexError",
    "LookupError",
    "AttributeError",
    "NotImplementedError",
    "RuntimeError",
    "ImportError",
    "ModuleNotFoundError",
    "SyntaxError",
    "IndentationError",
    "TabError",
    "NameError",
    "ZeroDivisionError",
    "ArithmeticError",
    "OverflowError",
    "RecursionError",
    "MemoryError",
    "OSError",
    "FileNotFoundError",
    "PermissionError",
    "TimeoutError",
    "StopIteration",
    "UnicodeError",
    "Exception",
    "Failed",
    "torch.OutOfMemoryError",
    "torch.cuda.OutOfMemoryError",
    "numpy.linalg.LinAlgError",
    "infradev_pytest.TestTimeout",
    "infradev_pytest.TimeBudgetExceeded",
    "infradev_pytest.MemoryBudgetExceeded",
    "infradev_pytest.TrafficBudgetExceeded",
    "infradev.SubjectError",
    "infradev.SubjectCrashed",
    "infradev.SubjectTimeout",
    "infradev.SubjectOutOfMemory",
    "infradev.StaleHandle",
    "infradev.ProtocolError",
    "infradev.TestTimeout",
    "infradev.Skipped",
    "infradev.FixtureError",
    "infradev.MissingInterface",
    "infradev.TimeBudgetExceeded",
    "infradev.MemoryBudgetExceeded",
    "infradev.TrafficBudgetExceeded",
    INCONSISTENT,
];

/// The allow-listed name for an exception a sandbox reported.
pub fn allowed_exception(name: &str) -> &'static str {
    let bare = name.strip_prefix("builtins.").unwrap_or(name);
    ALLOWED_EXCEPTIONS
        .iter()
        .find(|a| **a == bare)
        .copied()
        .unwrap_or("Exception")
}

fn budget_exception(kind: BudgetKind) -> &'static str {
    match kind {
        BudgetKind::Memory => "infradev.MemoryBudgetExceeded",
        BudgetKind::Time => "infradev.TimeBudgetExceeded",
        BudgetKind::Traffic => "infradev.TrafficBudgetExceeded",
    }
}

fn cap(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

impl PhaseResults {
    /// Results from a whole `events.jsonl`-style text (one event a line).
    pub fn parse(bytes: &[u8]) -> PhaseResults {
        let mut r = PhaseResults::default();
        for line in bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        {
            r.apply_json(line);
        }
        r
    }

    /// Records one event given as JSON; anything else counts as malformed.
    pub fn apply_json(&mut self, bytes: &[u8]) {
        match serde_json::from_slice::<Event>(bytes) {
            Ok(event) => self.apply(event),
            Err(_) => self.malformed_lines += 1,
        }
    }

    /// Records one event. Names and messages are capped; exception names outside the
    /// allow-list become `Exception` (they are free text the sandbox chose).
    pub fn apply(&mut self, event: Event) {
        if self.events >= MAX_EVENTS {
            self.malformed_lines += 1;
            return;
        }
        self.events += 1;
        match event {
            Event::Ready {} => self.ready = true,
            Event::SessionStart {} => self.started_session = true,
            Event::CollectError {
                path,
                exc_type,
                message,
            } => self.collect_errors.push(CollectError {
                path: cap(path, MAX_ID),
                exception: exc_type.map(|e| allowed_exception(&e).to_owned()),
                message: message.map(|m| cap(m, MAX_MESSAGE)),
            }),
            Event::Start { nodeid } => self.started.push(cap(nodeid, MAX_ID)),
            Event::Result {
                nodeid,
                outcome,
                exc_type,
                message,
                budget,
            } => {
                let outcome = match outcome.as_str() {
                    "passed" => Outcome::Passed,
                    "skipped" => Outcome::Skipped,
                    _ => Outcome::Failed,
                };
                let nodeid = cap(nodeid, MAX_ID);
                if let Some(earlier) = self.results.get(&nodeid)
                    && earlier.outcome != outcome
                    && self.conflict.is_none()
                {
                    // The plugin reports each test once: two different outcomes for one test
                    // mean something else in the sandbox reported too.
                    self.conflict = Some(nodeid.clone());
                }
                self.results.entry(nodeid).or_insert(Reported {
                    outcome,
                    exception: exc_type.map(|e| allowed_exception(&e).to_owned()),
                    message: message.map(|m| cap(m, MAX_MESSAGE)),
                    budget: budget.filter(|b| b.measured.is_finite() && b.limit.is_finite()),
                    kill: None,
                });
            }
            Event::Finish { exitstatus } => self.exitstatus = Some(exitstatus),
        }
    }

    /// The infra boundary was crossed: our side came up before any submission code ran.
    pub fn mark_ready(&mut self) {
        self.ready = true;
    }

    pub fn ready(&self) -> bool {
        self.ready
    }

    /// The broker's own findings for a test outrank what the judge reported: a kill while
    /// it ran, or a budget it measured as exceeded, make it failed.
    pub fn override_result(
        &mut self,
        nodeid: &str,
        kill: Option<Kill>,
        breach: Option<BudgetBreach>,
    ) {
        if kill.is_none() && breach.is_none() {
            return;
        }
        let r = self.results.entry(nodeid.to_owned()).or_insert(Reported {
            outcome: Outcome::Failed,
            exception: None,
            message: None,
            budget: None,
            kill: None,
        });
        r.outcome = Outcome::Failed;
        if let Some(b) = breach {
            r.exception = Some(budget_exception(b.kind).to_owned());
            r.budget = Some(b);
        }
        if kill.is_some() {
            r.kill = kill;
        }
    }

    /// A test reported twice with different outcomes, if any (for the tampering check).
    pub fn conflict(&self) -> Option<&str> {
        self.conflict.as_deref()
    }

    /// The reported outcome of a test (for the canaries).
    pub fn outcome_of(&self, nodeid: &str) -> Option<Outcome> {
        self.results.get(nodeid).map(|r| r.outcome)
    }

    /// The kill the broker recorded against a test, if any.
    pub fn kill_of(&self, nodeid: &str) -> Option<Kill> {
        self.results.get(nodeid).and_then(|r| r.kill)
    }

    /// Node ids with a result that end with `suffix` (the canaries' node ids depend on where
    /// pytest puts its root).
    pub fn find_result(&self, suffix: &str) -> Option<Outcome> {
        self.results
            .iter()
            .find(|(id, _)| id.ends_with(suffix))
            .map(|(_, r)| r.outcome)
    }

    /// Every test with a result, by node id, and the files that could not be collected
    /// (`infradev tasks new` proposes the official test lists from these).
    pub fn outcomes(&self) -> (BTreeMap<String, Outcome>, Vec<String>) {
        let outcomes = self
            .results
            .iter()
            .map(|(id, r)| (id.clone(), r.outcome))
            .collect();
        let mut broken: Vec<String> = self.collect_errors.iter().map(|c| c.path.clone()).collect();
        broken.sort();
        broken.dedup();
        (outcomes, broken)
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
            attempts: Vec::new(),
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
    let mut end_kill = end.kill;
    // The infra boundary: before our side said it was up, nothing of the submission had run,
    // so a phase that ends there is ours. After it, a phase that ends without reporting is
    // the submission's doing (it crashed, exited, or broke the reporting), never ours.
    let pytest_ran = results.ready || results.started_session || !results.collect_errors.is_empty();
    if infra_error.is_none() && end.kill.is_none() && !pytest_ran {
        infra_error = Some(match end.exit_code {
            Some(code) => format!(
                "the sandbox exited with {code} before the grader's side came up (no results were written)"
            ),
            None => "the sandbox produced no results".to_owned(),
        });
    }
    if infra_error.is_none()
        && end_kill.is_none()
        && results.ready
        && results.results.is_empty()
        && results.collect_errors.is_empty()
        && end.exit_code != Some(5)
    {
        end_kill = Some(Kill::Crashed);
    }
    let inconsistent = inconsistency(results, end, expected);
    let tests = expected
        .iter()
        .map(|e| {
            let mut t = e.not_run(phase);
            if let Some(r) = reported_for(results, &e.id) {
                (t.outcome, t.exception, t.message, t.budget, t.kill) = (
                    r.outcome,
                    r.exception.clone(),
                    r.message.clone(),
                    r.budget.clone(),
                    r.kill,
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
                t.kill = Some(end_kill.unwrap_or(Kill::Crashed));
            } else {
                t.kill = end_kill;
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
        kill: end_kill,
        infra_error,
        inconsistent,
        tampered: None,
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
    // Over everything reported, not just the expected tests: the planted canary and tests
    // nobody expects run too, and pytest's exit status covers them all.
    let _ = expected;
    let all_passed = results
        .results
        .values()
        .all(|r| r.outcome != Outcome::Failed)
        && results.collect_errors.is_empty();
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
        assert!(
            phase
                .infra_error
                .unwrap()
                .contains("before the grader's side came up")
        );
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
