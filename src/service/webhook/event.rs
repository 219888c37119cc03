//! The closed set of webhook events the service acts on (docs/service-design.md, "Shared
//! types"). Everything else GitHub sends becomes [`Event::Ignored`].

use std::fmt;

use serde::Serialize;

/// A repository, from the payload's `repository.owner.login` and `repository.name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Repo {
    pub owner: String,
    pub name: String,
}

impl Repo {
    /// `owner/name`, as GitHub's `full_name`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
}

impl fmt::Display for Repo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// The fields of a `pull_request` payload's `pull_request` object that we use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullRequest {
    pub number: u64,
    /// `head.sha`: the commit to grade.
    pub head_sha: String,
    /// `head.ref`: the branch the PR comes from.
    pub head_ref: String,
    /// `base.ref`: the branch the PR targets (`infradev/<task-id>` names a task).
    pub base_ref: String,
    /// `head.repo.full_name`; `None` when the head repository was deleted.
    pub head_repo_full_name: Option<String>,
    /// `head.repo.clone_url`; `None` when the head repository was deleted.
    pub head_clone_url: Option<String>,
    /// `draft` (absent in old payloads: `false`).
    pub draft: bool,
    /// `state == "open"`.
    pub state_open: bool,
    /// `user.login`.
    pub author_login: String,
    /// `user.type == "Bot"`.
    pub author_is_bot: bool,
    /// `labels[].name`, in payload order.
    pub labels: Vec<String>,
    /// `body`; `None` when the PR has no description.
    pub body: Option<String>,
}

impl PullRequest {
    /// Whether the head branch lives in another repository than `base` (a fork PR, or one whose
    /// head repository was deleted).
    pub fn is_fork_of(&self, base: &Repo) -> bool {
        self.head_repo_full_name.as_deref() != Some(base.full_name().as_str())
    }
}

/// The `pull_request` actions we act on; any other action is [`Event::Ignored`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PrAction {
    Opened,
    Synchronize,
    Reopened,
    ReadyForReview,
    Closed,
    Labeled,
    Unlabeled,
    /// The title, description or base branch changed (the task may have).
    Edited,
    ConvertedToDraft,
}

impl PrAction {
    /// The action as GitHub spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PrAction::Opened => "opened",
            PrAction::Synchronize => "synchronize",
            PrAction::Reopened => "reopened",
            PrAction::ReadyForReview => "ready_for_review",
            PrAction::Closed => "closed",
            PrAction::Labeled => "labeled",
            PrAction::Unlabeled => "unlabeled",
            PrAction::Edited => "edited",
            PrAction::ConvertedToDraft => "converted_to_draft",
        }
    }

    /// The action named `action`, if we act on it.
    pub fn from_github(action: &str) -> Option<PrAction> {
        Some(match action {
            "opened" => PrAction::Opened,
            "synchronize" => PrAction::Synchronize,
            "reopened" => PrAction::Reopened,
            "ready_for_review" => PrAction::ReadyForReview,
            "closed" => PrAction::Closed,
            "labeled" => PrAction::Labeled,
            "unlabeled" => PrAction::Unlabeled,
            "edited" => PrAction::Edited,
            "converted_to_draft" => PrAction::ConvertedToDraft,
            _ => return None,
        })
    }
}

impl fmt::Display for PrAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One parsed webhook delivery.
///
/// `installation_id` is `None` for deliveries of a repository or organisation webhook (not the
/// App's). `external_id` is `None` when GitHub sends it null or empty. `pull_numbers` lists the
/// PRs of the check's head *in this repository*; GitHub sends none for fork heads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Event {
    PullRequest {
        action: PrAction,
        repo: Repo,
        installation_id: Option<u64>,
        pr: PullRequest,
    },
    CheckRunRerequested {
        repo: Repo,
        installation_id: Option<u64>,
        head_sha: String,
        external_id: Option<String>,
        pull_numbers: Vec<u64>,
    },
    CheckRunRequestedAction {
        repo: Repo,
        installation_id: Option<u64>,
        head_sha: String,
        external_id: Option<String>,
        identifier: String,
        pull_numbers: Vec<u64>,
    },
    CheckSuite {
        rerequested: bool,
        repo: Repo,
        installation_id: Option<u64>,
        head_sha: String,
        pull_numbers: Vec<u64>,
    },
    /// An `issue_comment` `created`. `is_pull_request`: the issue is a PR (`issue.pull_request`
    /// is present).
    IssueComment {
        repo: Repo,
        installation_id: Option<u64>,
        issue_number: u64,
        is_pull_request: bool,
        comment_id: u64,
        author_login: String,
        body: String,
    },
    /// Any `installation` action (`created`, `deleted`, `suspend`, …); `repositories` are the
    /// `full_name`s the payload lists (none for some actions).
    Installation {
        action: String,
        installation_id: u64,
        repositories: Vec<String>,
    },
    /// `installation_repositories` `added` or `removed`: `full_name`s.
    InstallationRepositories {
        installation_id: u64,
        added: Vec<String>,
        removed: Vec<String>,
    },
    /// A `workflow_run` delivery, any action (`requested`, `in_progress`, `completed`): a
    /// GitHub Actions run in `repo` changed. The scale-out backend dispatches grades as runs of
    /// the private grader repository and follows them through these (plus polling, since a
    /// delivery can be lost). `display_title` is the run's `run-name`, which the grading
    /// workflow sets to the dispatch's name.
    WorkflowRun {
        action: String,
        repo: Repo,
        installation_id: Option<u64>,
        run_id: u64,
        /// `requested`, `queued`, `pending`, `waiting`, `in_progress` or `completed`.
        status: String,
        /// Set once `completed` (`success`, `failure`, `cancelled`, `timed_out`, …).
        conclusion: Option<String>,
        display_title: String,
    },
    /// A `workflow_job` delivery, any action (`queued`, `waiting`, `in_progress`, `completed`):
    /// a job of run `run_id` in `repo` changed; `in_progress` tells which runner took it.
    WorkflowJob {
        action: String,
        repo: Repo,
        installation_id: Option<u64>,
        run_id: u64,
        job_id: u64,
        status: String,
        conclusion: Option<String>,
        /// The runner the job was assigned to; `None` while it waits for one.
        runner_name: Option<String>,
    },
    Ping,
    /// An event or action we do not handle: accepted and ignored.
    Ignored {
        event: String,
        action: Option<String>,
    },
}

impl Event {
    /// The payload's `action` as GitHub spells it, where the event keeps it (for logs and the
    /// delivery record). `installation_repositories` says `added` or `removed` from which list is
    /// non-empty (`None` if both or neither are).
    pub fn action(&self) -> Option<&str> {
        match self {
            Event::PullRequest { action, .. } => Some(action.as_str()),
            Event::CheckRunRerequested { .. } => Some("rerequested"),
            Event::CheckRunRequestedAction { .. } => Some("requested_action"),
            Event::CheckSuite {
                rerequested: true, ..
            } => Some("rerequested"),
            Event::CheckSuite {
                rerequested: false, ..
            } => Some("requested"),
            Event::IssueComment { .. } => Some("created"),
            Event::Installation { action, .. }
            | Event::WorkflowRun { action, .. }
            | Event::WorkflowJob { action, .. } => Some(action),
            Event::InstallationRepositories { added, removed, .. } => {
                match (added.is_empty(), removed.is_empty()) {
                    (false, true) => Some("added"),
                    (true, false) => Some("removed"),
                    _ => None,
                }
            }
            Event::Ping => None,
            Event::Ignored { action, .. } => action.as_deref(),
        }
    }

    /// The event name (`X-GitHub-Event`) this was parsed from.
    pub fn name(&self) -> &str {
        match self {
            Event::PullRequest { .. } => "pull_request",
            Event::CheckRunRerequested { .. } | Event::CheckRunRequestedAction { .. } => {
                "check_run"
            }
            Event::CheckSuite { .. } => "check_suite",
            Event::IssueComment { .. } => "issue_comment",
            Event::Installation { .. } => "installation",
            Event::InstallationRepositories { .. } => "installation_repositories",
            Event::WorkflowRun { .. } => "workflow_run",
            Event::WorkflowJob { .. } => "workflow_job",
            Event::Ping => "ping",
            Event::Ignored { event, .. } => event,
        }
    }

    /// The repository the event is about, if it is about one.
    pub fn repo(&self) -> Option<&Repo> {
        match self {
            Event::PullRequest { repo, .. }
            | Event::CheckRunRerequested { repo, .. }
            | Event::CheckRunRequestedAction { repo, .. }
            | Event::CheckSuite { repo, .. }
            | Event::IssueComment { repo, .. }
            | Event::WorkflowRun { repo, .. }
            | Event::WorkflowJob { repo, .. } => Some(repo),
            _ => None,
        }
    }

    /// The App installation the delivery came through, if any.
    pub fn installation_id(&self) -> Option<u64> {
        match self {
            Event::PullRequest {
                installation_id, ..
            }
            | Event::CheckRunRerequested {
                installation_id, ..
            }
            | Event::CheckRunRequestedAction {
                installation_id, ..
            }
            | Event::CheckSuite {
                installation_id, ..
            }
            | Event::IssueComment {
                installation_id, ..
            }
            | Event::WorkflowRun {
                installation_id, ..
            }
            | Event::WorkflowJob {
                installation_id, ..
            } => *installation_id,
            Event::Installation {
                installation_id, ..
            }
            | Event::InstallationRepositories {
                installation_id, ..
            } => Some(*installation_id),
            Event::Ping | Event::Ignored { .. } => None,
        }
    }
}
