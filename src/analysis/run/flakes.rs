//! The run's flake record, `runs/<id>/flakes.json`: per task, every test or probe whose result
//! changed across the attempts of one grade (failed, then passed on a rerun), with the
//! submissions it happened in. Built from the records; pure.
//!
//! It is the run's counterpart of `validation.json`'s `flakes` (`tasks validate`): a task that
//! keeps showing up here under load wants larger budgets or more `retries`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::record::{Outcome, Record};
use crate::grading::Outcome as TestOutcome;

/// `runs/<id>/flakes.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flakes {
    pub run_id: String,
    /// Tasks with at least one flaky result, by id.
    pub tasks: Vec<TaskFlakes>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskFlakes {
    pub task: String,
    /// Grades of the task in the run that have a verdict of the submission's own.
    pub graded: usize,
    /// Its flaky tests and probes, by id.
    pub tests: Vec<FlakyTest>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlakyTest {
    pub id: String,
    /// The submissions (record keys) where it was flaky.
    pub submissions: Vec<String>,
    /// Each of those grades' attempts, in the same order (`failed`, `not_run`, `passed`).
    pub attempts: Vec<Vec<String>>,
}

/// The flake record of a run's records.
pub fn build(run_id: &str, records: &[Record]) -> Flakes {
    let mut tasks: BTreeMap<&str, (usize, BTreeMap<&str, FlakyTest>)> = BTreeMap::new();
    for r in records {
        let Outcome::Graded { report } = &r.outcome else {
            continue;
        };
        if !r.is_done() {
            continue; // An infra error says nothing about flakes.
        }
        let (graded, tests) = tasks.entry(&r.task).or_default();
        *graded += 1;
        for t in report
            .grade
            .tests
            .iter()
            .filter(|t| t.evidence.outcome == TestOutcome::Flaky)
        {
            let entry = tests.entry(&t.evidence.id).or_insert_with(|| FlakyTest {
                id: t.evidence.id.clone(),
                submissions: Vec::new(),
                attempts: Vec::new(),
            });
            entry.submissions.push(r.key.clone());
            entry.attempts.push(
                t.evidence
                    .attempts
                    .iter()
                    .map(|o| o.as_str().to_owned())
                    .collect(),
            );
        }
    }
    Flakes {
        run_id: run_id.to_owned(),
        tasks: tasks
            .into_iter()
            .filter(|(_, (_, tests))| !tests.is_empty())
            .map(|(task, (graded, tests))| TaskFlakes {
                task: task.to_owned(),
                graded,
                tests: tests.into_values().collect(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::run::record::{RECORD_VERSION, RecordedChange};
    use crate::analysis::stats::Labels;
    use crate::grade::report::fixtures;

    fn record(key: &str, task: &str, outcome: Outcome) -> Record {
        Record {
            record_version: RECORD_VERSION,
            key: key.into(),
            line: 1,
            task: task.into(),
            repository: "example/opt".into(),
            labels: Labels {
                agent: "a".into(),
                model: None,
                account: None,
            },
            change: RecordedChange::Rev("main".into()),
            duration_s: 1.0,
            finished_at: "2026-12-02T06:00:00Z".into(),
            outcome,
        }
    }

    fn graded(r: crate::grade::report::Report) -> Outcome {
        Outcome::Graded {
            report: Box::new(r),
        }
    }

    #[test]
    fn flaky_results_are_recorded_per_task_and_infra_errors_say_nothing() {
        let records = [
            record("s1", "t", graded(fixtures::flaky())),
            record("s2", "t", graded(fixtures::resolved())),
            record("s3", "t", graded(fixtures::flaky())),
            record("s4", "t", graded(fixtures::infra_error())),
            record("s5", "quiet", graded(fixtures::probes_reject())),
            record(
                "s6",
                "t",
                Outcome::Infra {
                    error: "no docker".into(),
                },
            ),
        ];
        let f = build("r1", &records);
        assert_eq!(
            f,
            Flakes {
                run_id: "r1".into(),
                tasks: vec![TaskFlakes {
                    task: "t".into(),
                    graded: 3,
                    tests: vec![FlakyTest {
                        id: "test_mem.py::test_history_is_bounded".into(),
                        submissions: vec!["s1".into(), "s3".into()],
                        attempts: vec![vec!["failed".into(), "passed".into()]; 2],
                    }],
                }],
            }
        );
    }
}
