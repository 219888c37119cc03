//! JUnit XML for CI dashboards: one `<testsuite>` per phase (`tests`, `probes`), one
//! `<testcase>` per expected test. A failure's `type` is its category and its `message` the
//! redacted exception message; infra faults are `<error>` (ours), everything else `<failure>`
//! (the submission's). No timestamps or ids, so the output is reproducible.

use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, TestCase, TestCaseStatus, TestSuite};

use super::Report;
use super::summary::failure_message;
use crate::grading::{Category, GradedTest, Outcome, Phase};

pub fn render_junit(report: &Report) -> String {
    let mut junit = quick_junit::Report::new(format!("infradev {}", report.task.id));
    for phase in [Phase::Tests, Phase::Probes] {
        let tests: Vec<&GradedTest> = report
            .grade
            .tests
            .iter()
            .filter(|t| t.evidence.phase == phase)
            .collect();
        let phase_report = report.phases.iter().find(|p| p.evidence.phase == phase);
        if tests.is_empty() && phase_report.is_none() {
            continue;
        }
        let mut suite = TestSuite::new(phase.as_str());
        if let Some(p) = phase_report {
            suite.set_time(Duration::from_secs_f64(p.duration_s.max(0.0)));
            for (name, value) in [
                ("infra_error", &p.evidence.infra_error),
                ("inconsistent", &p.evidence.inconsistent),
            ] {
                if let Some(value) = value {
                    suite.add_property(Property::new(name, value.as_str()));
                }
            }
        }
        suite.add_test_cases(tests.into_iter().map(test_case));
        junit.add_test_suite(suite);
    }
    // Writing into a Vec cannot fail, and every string is valid UTF-8 already.
    junit.to_string().expect("JUnit XML serialises into memory")
}

fn test_case(test: &GradedTest) -> TestCase {
    let e = &test.evidence;
    let mut status = match (e.outcome, test.category) {
        (Outcome::Passed, _) => TestCaseStatus::success(),
        (Outcome::Skipped, _) => TestCaseStatus::skipped(),
        (_, Some(Category::Infra)) => TestCaseStatus::non_success(NonSuccessKind::Error),
        _ => TestCaseStatus::non_success(NonSuccessKind::Failure),
    };
    if let Some(category) = test.category {
        status.set_type(category.as_str());
        let message = e
            .message
            .clone()
            .or_else(|| failure_message(test))
            .unwrap_or_default();
        status.set_message(message);
        if let Some(detail) = failure_message(test) {
            status.set_description(detail);
        }
    }
    let (classname, name) = e.id.split_once("::").unwrap_or(("", e.id.as_str()));
    let mut case = TestCase::new(name, status);
    if !classname.is_empty() {
        case.set_classname(classname);
    }
    case.add_property(Property::new("expectation", test.expectation.as_str()));
    if !e.attempts.is_empty() {
        // A flaky test is a failure (never a pass); the attempts say what happened.
        case.add_property(Property::new("outcome", e.outcome.as_str()));
        let attempts: Vec<&str> = e.attempts.iter().map(|o| o.as_str()).collect();
        case.add_property(Property::new("attempts", attempts.join(",")));
    }
    case
}
