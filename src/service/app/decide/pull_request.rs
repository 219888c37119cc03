//! `pull_request` events and resyncs. The caller reads the PR from the API (`GET` the pull, as
//! Prow's tide and bors re-read PRs) and passes it here, so the payload's copy, which may be
//! hours old (a late or redelivered delivery), never decides; the action only says what kind
//! of change prompted the look.

use serde::Serialize;

use super::{
    Decided, Decision, GradeReason, Known, PullState, Settings, gradeable, no_task_message,
    pull_state, task_id,
};
use crate::service::app::matching::{AgentReason, TaskMatch};
use crate::service::webhook::{PrAction, PullRequest, Repo};

/// What made us look at a pull request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Trigger {
    /// A `pull_request` delivery with this action.
    Action(PrAction),
    /// A resync of open PRs (on start, or when the App got access to the repository).
    Resync,
}

/// What `pr` (as the API has it now) calls for, given the state the store had before.
pub(super) fn on_pull_request(
    trigger: Trigger,
    repo: &Repo,
    installation_id: Option<u64>,
    pr: &PullRequest,
    settings: &Settings<'_>,
    known: &Known,
) -> Decided {
    let before = known.pulls.get(&pr.number);
    let (now, agent, task) = pull_state(pr, settings, before.is_some_and(|b| b.grade_requested));
    let notes = task
        .conflicts()
        .iter()
        .map(|c| {
            format!(
                "PR #{} also names task {:?} ({}); {:?} is used",
                pr.number,
                c.id,
                c.source,
                task_id(&task).unwrap_or_default()
            )
        })
        .collect();
    let decision = pr_decision(
        trigger,
        repo,
        installation_id,
        pr.number,
        &now,
        before,
        agent.as_ref(),
        &task,
    );
    Decided {
        pull: Some(now),
        decisions: vec![decision],
        notes,
    }
}

#[allow(clippy::too_many_arguments)]
fn pr_decision(
    trigger: Trigger,
    repo: &Repo,
    installation_id: Option<u64>,
    number: u64,
    now: &PullState,
    before: Option<&PullState>,
    agent: Option<&AgentReason>,
    task: &TaskMatch,
) -> Decision {
    if !now.open {
        return Decision::CancelActive {
            repo: repo.clone(),
            number,
        };
    }
    if trigger == Trigger::Action(PrAction::Closed) {
        return Decision::nothing("a late `closed`: the pull request is open again");
    }
    // Changes that do not push a commit grade only when they change whether the PR is graded
    // or against what; a resync only what changed since the store last saw the PR.
    let on_change_only = matches!(
        trigger,
        Trigger::Resync
            | Trigger::Action(
                PrAction::Labeled
                    | PrAction::Unlabeled
                    | PrAction::Edited
                    | PrAction::ConvertedToDraft
            )
    );
    let unchanged = on_change_only && before == Some(now);
    if let Err(why) = gradeable(now) {
        // A human's PR that names a task waits for a maintainer: say so on its head.
        let waits = !now.draft && !now.is_agent && !now.grade_requested && now.task.is_some();
        if let (true, false, Some(installation_id)) = (waits, unchanged, installation_id) {
            return Decision::NeutralWaiting {
                repo: repo.clone(),
                number,
                head_sha: now.head_sha.clone(),
                installation_id,
            };
        }
        return Decision::nothing(why);
    }
    if unchanged {
        return Decision::nothing(match trigger {
            Trigger::Resync => "unchanged since InfraDev last saw it",
            _ => "the change affects neither whether this PR is graded nor its task",
        });
    }
    let Some(installation_id) = installation_id else {
        return Decision::nothing("no App installation for this repository");
    };
    let head_sha = now.head_sha.clone();
    match &now.task {
        Some(task) => Decision::Grade {
            repo: repo.clone(),
            number,
            head_sha,
            task: task.clone(),
            installation_id,
            reason: match trigger {
                Trigger::Action(action) => GradeReason::PullRequest(action),
                Trigger::Resync => GradeReason::Resync,
            },
        },
        None => Decision::NeutralNoTask {
            repo: repo.clone(),
            number,
            head_sha,
            installation_id,
            message: no_task_message(agent, task),
        },
    }
}
