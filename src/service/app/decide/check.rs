//! `check_run` re-runs and the Re-grade button (scoped to the job the check run belongs to, by
//! its `external_id`) and `check_suite` requests (every PR of the head that a push would grade).

use serde::Serialize;

use super::{Decided, Decision, GradeReason, Known, gradeable, no_task_message};
use crate::service::app::matching::TaskMatch;
use crate::service::webhook::Repo;

/// What a check run's `external_id` names, as InfraDev set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExternalId {
    /// A job's check run: the job id.
    Job(i64),
    /// The neutral "no task" check of PR `n` (`no-task:<n>`).
    NoTask(u64),
}

impl ExternalId {
    /// `None` for an id InfraDev never sets (another App's check run, or none).
    pub fn parse(external_id: &str) -> Option<ExternalId> {
        if let Some(n) = external_id.strip_prefix("no-task:") {
            return n.parse().ok().map(ExternalId::NoTask);
        }
        external_id
            .parse()
            .ok()
            .filter(|id| *id > 0)
            .map(ExternalId::Job)
    }
}

/// Whose check run a `check_run` event is about: the caller resolves the [`ExternalId`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum CheckOwner {
    /// The check run of a job: its PR, head and task.
    Job {
        number: u64,
        head_sha: String,
        task: String,
    },
    /// The neutral "no task" check of PR `number`.
    NoTask { number: u64 },
}

/// A re-run (or the Re-grade button) of one check run: a new attempt of exactly the job it
/// belongs to, under the same rules as a push (open, an agent's or approved, not a draft), and
/// only while that head is still the PR's head.
pub(super) fn on_check_run(
    repo: &Repo,
    installation_id: Option<u64>,
    head_sha: &str,
    reason: GradeReason,
    known: &Known,
) -> Decided {
    let Some(owner) = &known.check_owner else {
        return Decided::only(Decision::nothing(
            "the check run belongs to no job InfraDev knows",
        ));
    };
    let Some(installation_id) = installation_id else {
        return Decided::only(Decision::nothing("no App installation for this repository"));
    };
    let (number, job_task) = match owner {
        CheckOwner::Job {
            number,
            head_sha: job_head,
            task,
        } => {
            if job_head != head_sha {
                return Decided::only(Decision::nothing(format!(
                    "the check run is on {head_sha}, its job graded {job_head}"
                )));
            }
            (*number, Some(task))
        }
        CheckOwner::NoTask { number } => (*number, None),
    };
    let Some(state) = known.pulls.get(&number) else {
        return Decided::only(Decision::nothing(format!(
            "PR #{number} is not in the store"
        )));
    };
    if !state.open {
        return Decided::only(Decision::nothing(format!("PR #{number} is closed")));
    }
    if state.head_sha != head_sha {
        return Decided::only(Decision::nothing(format!(
            "PR #{number} moved on to {}; {head_sha} is superseded",
            state.head_sha
        )));
    }
    if let Err(why) = gradeable(state) {
        return Decided::only(Decision::nothing(format!("PR #{number}: {why}")));
    }
    let grade = |task: &String| Decision::Grade {
        repo: repo.clone(),
        number,
        head_sha: head_sha.to_owned(),
        task: task.clone(),
        installation_id,
        reason: reason.clone(),
    };
    Decided::only(match (job_task, &state.task) {
        (Some(job), Some(now)) if job == now => grade(job),
        (Some(job), _) => Decision::nothing(format!(
            "PR #{number} no longer names task {job:?}; its own task is graded on a push"
        )),
        (None, Some(now)) => grade(now),
        (None, None) => Decision::NeutralNoTask {
            repo: repo.clone(),
            number,
            head_sha: head_sha.to_owned(),
            installation_id,
            message: no_task_message(None, &TaskMatch::None),
        },
    })
}

/// GitHub asked for checks of a head (`requested`) or "Re-run all checks" (`rerequested`):
/// each PR of the head that a push would grade.
pub(super) fn on_check_suite(
    repo: &Repo,
    installation_id: Option<u64>,
    head_sha: &str,
    pull_numbers: &[u64],
    reason: GradeReason,
    known: &Known,
) -> Decided {
    let mut numbers = if pull_numbers.is_empty() {
        known.head_prs.clone()
    } else {
        pull_numbers.to_vec()
    };
    numbers.sort_unstable();
    numbers.dedup();
    if numbers.is_empty() {
        return Decided::only(Decision::nothing(format!(
            "no known pull request has head {head_sha}"
        )));
    }
    let Some(installation_id) = installation_id else {
        return Decided::only(Decision::nothing("no App installation for this repository"));
    };
    let decisions = numbers
        .into_iter()
        .map(|number| {
            let Some(state) = known.pulls.get(&number) else {
                return Decision::nothing(format!("PR #{number} is not in the store"));
            };
            if !state.open {
                return Decision::nothing(format!("PR #{number} is closed"));
            }
            if state.head_sha != head_sha {
                return Decision::nothing(format!(
                    "PR #{number} moved on to {}; {head_sha} is not graded",
                    state.head_sha
                ));
            }
            if let Err(why) = gradeable(state) {
                return Decision::nothing(format!("PR #{number}: {why}"));
            }
            match &state.task {
                Some(task) => Decision::Grade {
                    repo: repo.clone(),
                    number,
                    head_sha: head_sha.to_owned(),
                    task: task.clone(),
                    installation_id,
                    reason: reason.clone(),
                },
                // The pull_request event of this head posts the neutral check; a new check
                // suite would only post it twice.
                None if reason == GradeReason::CheckSuiteRequested => {
                    Decision::nothing(format!("PR #{number} names no known task"))
                }
                None => Decision::NeutralNoTask {
                    repo: repo.clone(),
                    number,
                    head_sha: head_sha.to_owned(),
                    installation_id,
                    message: no_task_message(None, &TaskMatch::None),
                },
            }
        })
        .collect();
    Decided {
        pull: None,
        decisions,
        notes: Vec::new(),
    }
}
