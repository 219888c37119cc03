//! What to do about an event (pure): grade, cancel, post a neutral "no task" check, ask for a
//! commenter's permission, reply, resync a repository's open PRs, or nothing, and why.
//!
//! The caller (the processor) looks up what the store knows first ([`Known`]), reads the PR
//! from the API for `pull_request` events (the payload may be stale), calls [`decide`], stores
//! [`Decided::pull`] in its PR index and carries out the decisions in order. For a
//! [`Decision::AskPermission`] it asks GitHub for the commenter's permission and then calls
//! [`decide_command`].
//!
//! Rules:
//! - A PR is graded when it is open, not a draft, and either an agent's (see
//!   [`matching::is_agent`]) or someone with write access asked with `/infradev grade`
//!   (`grade_requested`); on `opened`, `reopened`, `synchronize`, `ready_for_review`, and on
//!   `labeled`, `unlabeled`, `edited` and `converted_to_draft` when the change made it graded or
//!   changed its task ([`pull_request`]). The state is the API's, so a late `synchronize` of an
//!   old head grades (at most) the PR's current head, and never moves the stored head back.
//! - Such a PR without a known task gets a neutral check saying how to name one.
//! - A closed PR's active grades are cancelled.
//! - A check run's "Re-run" (`check_run` rerequested) and its `regrade` button grade exactly the
//!   job the check run belongs to (its `external_id`), as a new attempt, under the same rules
//!   as a push and only while its head is the PR's head ([`check`]); `check_suite`
//!   requested/rerequested grade each PR of the head that would be graded on a push.
//! - `installation` `created` (and `unsuspend`, `new_permissions_accepted`) and
//!   `installation_repositories` `added` resync the open PRs of the repositories;
//!   `installation` `deleted` (and `suspend`) and `installation_repositories` `removed`
//!   withdraw the installation's (or the repositories') grades ([`Decision::Withdraw`]).
//! - `workflow_run` and `workflow_job` deliveries (any action) only say that a GitHub Actions run
//!   changed ([`Decision::RemoteRunChanged`]): the remote-grade follower reads the run's state
//!   from GitHub and decides, so a lost or reordered delivery changes nothing but latency.

mod check;
mod comment;
mod pull_request;

pub use check::{CheckOwner, ExternalId};
pub use pull_request::Trigger;

use std::collections::BTreeMap;

use serde::Serialize;

use super::commands::{Command, code_span};
use super::matching::{self, AgentPolicy, AgentReason, HOW_TO_NAME_A_TASK, TaskMatch};
use crate::service::webhook::{Event, PrAction, PullRequest, Repo};

/// The identifier of the check run's "Re-grade" button.
pub const REGRADE_ACTION: &str = "regrade";

/// What the store's PR index keeps about a pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullState {
    /// An agent wrote it ([`matching::is_agent`]).
    pub is_agent: bool,
    /// The known task it names ([`matching::match_task`]); `None` if none or an unknown one.
    pub task: Option<String>,
    /// Someone with write access said `/infradev grade` on it: graded like an agent PR.
    pub grade_requested: bool,
    pub draft: bool,
    pub open: bool,
    pub head_sha: String,
}

/// Configuration that decisions depend on.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    pub policy: &'a AgentPolicy,
    /// Ids of the tasks we can grade against.
    pub known_tasks: &'a [&'a str],
}

/// What the store knows that the event concerns; the caller fills in what the event needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Known {
    /// Stored PR states by number, in the event's repository: for `pull_request`, the PR as it
    /// was before this event (absent if never seen); for check events, every PR of the head
    /// (the payload's `pull_numbers`, else `head_prs`).
    pub pulls: BTreeMap<u64, PullState>,
    /// The PRs the head index maps to the check event's `head_sha`, used when the payload
    /// lists none (GitHub lists none for fork heads).
    pub head_prs: Vec<u64>,
    /// The installation the store has for the repository, used when the payload has none.
    pub installation_id: Option<u64>,
    /// For a `check_run` event: the job (or neutral check) its `external_id` names, if it is
    /// one of ours; `pulls` then holds that job's PR.
    pub check_owner: Option<CheckOwner>,
}

/// Why a grade was decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum GradeReason {
    /// A `pull_request` event with this action.
    PullRequest(PrAction),
    /// The check run's "Re-run" (`check_run` rerequested).
    CheckRunRerequested,
    /// The check run's "Re-grade" button (`requested_action` `regrade`).
    RegradeButton,
    /// GitHub asked for checks of a new head (`check_suite` requested).
    CheckSuiteRequested,
    /// "Re-run all checks" (`check_suite` rerequested).
    CheckSuiteRerequested,
    /// A resync of open PRs found this head ungraded (on start, or a repository was added).
    Resync,
    /// A permitted `/infradev grade` or `/infradev regrade` by `user`.
    Command { command: Command, user: String },
}

impl GradeReason {
    /// Someone asked for this head to be graded again: make a new attempt even if this head
    /// has a result. Otherwise a grade of an already graded head is a no-op (job ids are
    /// deterministic per head).
    pub fn new_attempt(&self) -> bool {
        matches!(
            self,
            GradeReason::CheckRunRerequested
                | GradeReason::RegradeButton
                | GradeReason::CheckSuiteRerequested
                | GradeReason::Command {
                    command: Command::Regrade,
                    ..
                }
        )
    }

    /// The caller must set the PR's `grade_requested` (`/infradev grade`), so that its later
    /// heads are graded too.
    pub fn requests_grading(&self) -> bool {
        matches!(
            self,
            GradeReason::Command {
                command: Command::Grade,
                ..
            }
        )
    }
}

/// A permitted-or-not command, waiting for the commenter's permission to be looked up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandRequest {
    pub repo: Repo,
    /// The PR the comment is on.
    pub number: u64,
    /// The installation to ask GitHub (and to reply) through.
    pub installation_id: u64,
    pub comment_id: u64,
    /// The commenter, whose permission on `repo` decides.
    pub user: String,
    pub command: Command,
}

/// One thing to do. `installation_id` is the App installation to act through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Decision {
    /// Grade `head_sha` of PR `number` against `task` (a queued check run, then a job).
    Grade {
        repo: Repo,
        number: u64,
        head_sha: String,
        task: String,
        installation_id: u64,
        reason: GradeReason,
    },
    /// Cancel the PR's queued and running grades.
    CancelActive { repo: Repo, number: u64 },
    /// A neutral check on `head_sha` whose text (`message`) says how to name a task: the PR
    /// would be graded but names no task we have.
    NeutralNoTask {
        repo: Repo,
        number: u64,
        head_sha: String,
        installation_id: u64,
        message: String,
    },
    /// A neutral check on `head_sha` saying that this human's PR, which names a task, is
    /// graded once someone with write access comments `/infradev grade`.
    NeutralWaiting {
        repo: Repo,
        number: u64,
        head_sha: String,
        installation_id: u64,
    },
    /// Look up the commenter's permission on the repository, then call [`decide_command`].
    AskPermission(CommandRequest),
    /// Post `message` as a comment on PR `number` (safe Markdown: nothing in it is a command).
    Reply {
        repo: Repo,
        number: u64,
        installation_id: u64,
        message: String,
    },
    /// React to comment `comment_id` with `content` (`+1` for an accepted command, `eyes` for
    /// `help`), so its author sees it was read.
    React {
        repo: Repo,
        installation_id: u64,
        comment_id: u64,
        content: String,
    },
    /// A GitHub Actions run in `repo` changed (`workflow_run` or `workflow_job`): wake the
    /// follower of remote grades. Whether `run_id` is one of ours (a grade dispatched to the
    /// grader repository) is the follower's business: it matches run ids it recorded, and
    /// ignores the rest.
    RemoteRunChanged { repo: Repo, run_id: u64 },
    /// Read the open PRs of `repos` (full names; empty: every repository of the installation)
    /// from the API and decide about each as on a push ([`decide_resync`]).
    Resync {
        installation_id: u64,
        repos: Vec<String>,
    },
    /// The App lost access: installation `installation_id` was deleted or suspended (`repos`
    /// empty), or these repositories (full names) were removed from it. Its queued and running
    /// grades stop, and nothing more is posted through it: GitHub refuses its tokens there.
    Withdraw {
        installation_id: u64,
        repos: Vec<String>,
    },
    /// Nothing to do, and why (for the log).
    Nothing { why: String },
}

impl Decision {
    fn nothing(why: impl Into<String>) -> Decision {
        Decision::Nothing { why: why.into() }
    }
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decided {
    /// For `pull_request` events: the PR's state now, for the store's PR index.
    pub pull: Option<PullState>,
    /// What to do, in order.
    pub decisions: Vec<Decision>,
    /// Things worth logging, such as a PR naming two different tasks.
    pub notes: Vec<String>,
}

impl Decided {
    fn only(decision: Decision) -> Decided {
        Decided {
            pull: None,
            decisions: vec![decision],
            notes: Vec::new(),
        }
    }
}

/// The state `pr` has under `settings`, keeping the stored `grade_requested`; with why it counts
/// as an agent PR and which task it names.
pub fn pull_state(
    pr: &PullRequest,
    settings: &Settings<'_>,
    grade_requested: bool,
) -> (PullState, Option<AgentReason>, TaskMatch) {
    let agent = matching::is_agent(pr, settings.policy);
    let task = matching::match_task(pr, settings.known_tasks);
    let state = PullState {
        is_agent: agent.is_some(),
        task: task.known_id().map(str::to_owned),
        grade_requested,
        draft: pr.draft,
        open: pr.state_open,
        head_sha: pr.head_sha.clone(),
    };
    (state, agent, task)
}

/// Decides what `event` calls for, given what the store knows.
pub fn decide(event: &Event, settings: &Settings<'_>, known: &Known) -> Decided {
    match event {
        Event::PullRequest {
            action,
            repo,
            installation_id,
            pr,
        } => pull_request::on_pull_request(
            Trigger::Action(*action),
            repo,
            installation_id.or(known.installation_id),
            pr,
            settings,
            known,
        ),
        Event::CheckRunRerequested {
            repo,
            installation_id,
            head_sha,
            ..
        } => check::on_check_run(
            repo,
            installation_id.or(known.installation_id),
            head_sha,
            GradeReason::CheckRunRerequested,
            known,
        ),
        Event::CheckRunRequestedAction {
            repo,
            installation_id,
            head_sha,
            identifier,
            ..
        } => {
            if identifier != REGRADE_ACTION {
                return Decided::only(Decision::nothing(format!(
                    "unknown check run action {identifier:?}"
                )));
            }
            check::on_check_run(
                repo,
                installation_id.or(known.installation_id),
                head_sha,
                GradeReason::RegradeButton,
                known,
            )
        }
        Event::CheckSuite {
            rerequested,
            repo,
            installation_id,
            head_sha,
            pull_numbers,
        } => {
            let reason = if *rerequested {
                GradeReason::CheckSuiteRerequested
            } else {
                GradeReason::CheckSuiteRequested
            };
            check::on_check_suite(
                repo,
                installation_id.or(known.installation_id),
                head_sha,
                pull_numbers,
                reason,
                known,
            )
        }
        Event::IssueComment {
            repo,
            installation_id,
            issue_number,
            is_pull_request,
            comment_id,
            author_login,
            body,
        } => {
            if !is_pull_request {
                return Decided::only(Decision::nothing(
                    "a comment on an issue, not on a pull request",
                ));
            }
            let comment = comment::Comment {
                repo,
                number: *issue_number,
                comment_id: *comment_id,
                user: author_login,
                body,
            };
            comment::on_comment(&comment, installation_id.or(known.installation_id))
        }
        Event::Installation {
            action,
            installation_id,
            repositories,
        } => Decided::only(match action.as_str() {
            "created" | "unsuspend" | "new_permissions_accepted" => Decision::Resync {
                installation_id: *installation_id,
                repos: repositories.clone(),
            },
            "deleted" | "suspend" => Decision::Withdraw {
                installation_id: *installation_id,
                repos: Vec::new(),
            },
            _ => Decision::nothing(format!("installation {action}: nothing to grade")),
        }),
        Event::InstallationRepositories {
            installation_id,
            added,
            removed,
        } => {
            let mut decisions = Vec::new();
            if !removed.is_empty() {
                decisions.push(Decision::Withdraw {
                    installation_id: *installation_id,
                    repos: removed.clone(),
                });
            }
            if !added.is_empty() {
                decisions.push(Decision::Resync {
                    installation_id: *installation_id,
                    repos: added.clone(),
                });
            }
            if decisions.is_empty() {
                decisions.push(Decision::nothing("no repository added or removed"));
            }
            Decided {
                pull: None,
                decisions,
                notes: Vec::new(),
            }
        }
        Event::WorkflowRun { repo, run_id, .. } | Event::WorkflowJob { repo, run_id, .. } => {
            Decided::only(Decision::RemoteRunChanged {
                repo: repo.clone(),
                run_id: *run_id,
            })
        }
        Event::Ping => Decided::only(Decision::nothing("ping")),
        Event::Ignored { event, action } => Decided::only(Decision::nothing(match action {
            Some(action) => format!("{event} {action} is not handled"),
            None => format!("{event} is not handled"),
        })),
    }
}

/// What an open PR found by a resync calls for (`pr` as the API lists it; `known.pulls` holds
/// the store's state of it, if any): like a push, but nothing when the store already saw this
/// state, so that resyncing again changes nothing.
pub fn decide_resync(
    repo: &Repo,
    installation_id: u64,
    pr: &PullRequest,
    settings: &Settings<'_>,
    known: &Known,
) -> Decided {
    pull_request::on_pull_request(
        Trigger::Resync,
        repo,
        Some(installation_id),
        pr,
        settings,
        known,
    )
}

/// What a permitted (or not) command asks for, once the caller knows the commenter's
/// permission (`permitted`: [`super::commands::permits`]) and the PR's stored state (`None`
/// if the store has not seen the PR).
pub fn decide_command(
    request: &CommandRequest,
    permitted: bool,
    pull: Option<&PullState>,
) -> Vec<Decision> {
    let CommandRequest {
        repo,
        number,
        installation_id,
        user,
        command,
        ..
    } = request;
    let reply = |message: String| Decision::Reply {
        repo: repo.clone(),
        number: *number,
        installation_id: *installation_id,
        message: format!("@{user} {message}"),
    };
    if !permitted {
        return vec![reply(format!(
            "only people with write, maintain or admin access to this repository can run `{command}`."
        ))];
    }
    let accepted = Decision::React {
        repo: repo.clone(),
        installation_id: *installation_id,
        comment_id: request.comment_id,
        content: "+1".to_owned(),
    };
    if *command == Command::Help {
        return vec![accepted, reply(help_text())];
    }
    if *command == Command::Cancel {
        return vec![
            accepted,
            Decision::CancelActive {
                repo: repo.clone(),
                number: *number,
            },
            reply("cancelled this pull request's queued and running grades.".to_owned()),
        ];
    }
    let Some(pull) = pull else {
        return vec![reply(
            "InfraDev has not seen this pull request yet. Push a commit (or close and reopen it), then ask again."
                .to_owned(),
        )];
    };
    if !pull.open {
        return vec![reply(
            "this pull request is closed, so it is not graded.".to_owned(),
        )];
    }
    let Some(task) = &pull.task else {
        return vec![reply(format!(
            "this pull request names no task InfraDev knows. {HOW_TO_NAME_A_TASK}"
        ))];
    };
    let head = code_span(pull.head_sha.get(..12).unwrap_or(&pull.head_sha));
    let confirmation = match command {
        Command::Grade => format!(
            "grading {head} against task {}; every new head of this pull request will be graded too.",
            code_span(task)
        ),
        _ => format!(
            "grading {head} against task {} again, as a new attempt.",
            code_span(task)
        ),
    };
    vec![
        accepted,
        Decision::Grade {
            repo: repo.clone(),
            number: *number,
            head_sha: pull.head_sha.clone(),
            task: task.clone(),
            installation_id: *installation_id,
            reason: GradeReason::Command {
                command: *command,
                user: user.clone(),
            },
        },
        reply(confirmation),
    ]
}

/// The reply to `/infradev help` (after the asker's mention).
pub fn help_text() -> String {
    let list: String = Command::ALL
        .iter()
        .map(|c| format!("\n- `{c}`: {}", c.describe()))
        .collect();
    format!(
        "InfraDev's commands, at the start of a line of a comment on this pull request (all but \
         `help` need write, maintain or admin access):{list}\n\nThe **Re-grade** button on the \
         `InfraDev` check run, and GitHub's *Re-run* of it, grade that check run's head again."
    )
}

/// Whether a PR in `state` is graded on a push, or why not.
pub(crate) fn gradeable(state: &PullState) -> Result<(), &'static str> {
    if !state.open {
        Err("the pull request is closed")
    } else if !state.is_agent && !state.grade_requested {
        Err("not an agent's pull request, and nobody asked for a grade with `/infradev grade`")
    } else if state.draft {
        Err("a draft pull request waits until it is ready for review")
    } else {
        Ok(())
    }
}

fn task_id(task: &TaskMatch) -> Option<String> {
    match task {
        TaskMatch::Known { id, .. } | TaskMatch::Unknown { id, .. } => Some(id.clone()),
        TaskMatch::None => None,
    }
}

/// The text of the neutral check for a PR that would be graded but names no known task.
fn no_task_message(agent: Option<&AgentReason>, task: &TaskMatch) -> String {
    let why = match agent {
        Some(reason) => format!("InfraDev grades this pull request ({})", describe(reason)),
        None => "InfraDev grades this pull request".to_owned(),
    };
    match task {
        TaskMatch::Unknown { id, source, .. } => format!(
            "{why}, but the task it names, {}, from {source}, is not a task InfraDev has. {HOW_TO_NAME_A_TASK}",
            code_span(id)
        ),
        _ => format!("{why}, but it names no task to grade against. {HOW_TO_NAME_A_TASK}"),
    }
}

/// An [`AgentReason`] with the matched words as inline code.
fn describe(reason: &AgentReason) -> String {
    match reason {
        AgentReason::Login(login) => format!(
            "its author {} is an allowlisted agent account",
            code_span(login)
        ),
        AgentReason::BotAuthor(login) => {
            format!("its author {} is a bot account", code_span(login))
        }
        AgentReason::Label(label) => format!("it has the label {}", code_span(label)),
        AgentReason::BranchPrefix(prefix) => {
            format!("its branch starts with {}", code_span(prefix))
        }
        AgentReason::Trailer(line) => format!("its description has the line {}", code_span(line)),
    }
}

#[cfg(test)]
mod tests;
