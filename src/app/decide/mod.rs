//! What to do about an event (pure): grade, cancel, post a neutral "no task" check, ask for a
//! commenter's permission, reply, or nothing, and why.
//!
//! The caller (the processor) looks up what the store knows first ([`Known`]), calls [`decide`],
//! stores [`Decided::pull`] in its PR index and carries out the decisions in order. For a
//! [`Decision::AskPermission`] it asks GitHub for the commenter's permission and then calls
//! [`decide_command`].
//!
//! Rules:
//! - A PR is graded when it is open, not a draft, and either an agent's (see
//!   [`matching::is_agent`]) or someone with write access asked with `/infradev grade`
//!   (`grade_requested`); on `opened`, `reopened`, `synchronize`, `ready_for_review`, and on
//!   `labeled` when the label changed whether it is graded or its task.
//! - Such a PR without a known task gets a neutral check saying how to name one.
//! - `closed` cancels the PR's active grades.
//! - Check re-runs (`check_run` rerequested, the `regrade` button) grade each PR of the head
//!   again, as a new attempt; `check_suite` requested/rerequested grade each PR of the head
//!   that would be graded on a push. A PR whose head moved on is left alone.
//! - `workflow_run` and `workflow_job` deliveries (any action) only say that a GitHub Actions run
//!   changed ([`Decision::RemoteRunChanged`]): the remote-grade follower reads the run's state
//!   from GitHub and decides, so a lost or reordered delivery changes nothing but latency.

use std::collections::BTreeMap;

use serde::Serialize;

use super::commands::{Command, code_span, parse_commands};
use super::matching::{self, AgentPolicy, AgentReason, HOW_TO_NAME_A_TASK, TaskMatch};
use crate::webhook::{Event, PrAction, PullRequest, Repo};

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
    /// Look up the commenter's permission on the repository, then call [`decide_command`].
    AskPermission(CommandRequest),
    /// Post `message` as a comment on PR `number` (safe Markdown: nothing in it is a command).
    Reply {
        repo: Repo,
        number: u64,
        installation_id: u64,
        message: String,
    },
    /// A GitHub Actions run in `repo` changed (`workflow_run` or `workflow_job`): wake the
    /// follower of remote grades. Whether `run_id` is one of ours (a grade dispatched to the
    /// grader repository) is the follower's business: it matches run ids it recorded, and
    /// ignores the rest.
    RemoteRunChanged { repo: Repo, run_id: u64 },
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
        } => on_pull_request(
            *action,
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
            pull_numbers,
            ..
        } => {
            let installation_id = installation_id.or(known.installation_id);
            on_check(
                repo,
                installation_id,
                head_sha,
                pull_numbers,
                GradeReason::CheckRunRerequested,
                known,
            )
        }
        Event::CheckRunRequestedAction {
            repo,
            installation_id,
            head_sha,
            identifier,
            pull_numbers,
            ..
        } => {
            if identifier != REGRADE_ACTION {
                return Decided::only(Decision::nothing(format!(
                    "unknown check run action {identifier:?}"
                )));
            }
            let installation_id = installation_id.or(known.installation_id);
            on_check(
                repo,
                installation_id,
                head_sha,
                pull_numbers,
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
            on_check(
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
            let comment = Comment {
                repo,
                number: *issue_number,
                comment_id: *comment_id,
                user: author_login,
                body,
            };
            on_comment(&comment, installation_id.or(known.installation_id))
        }
        Event::Installation { action, .. } => Decided::only(Decision::nothing(format!(
            "installation {action}: nothing to grade"
        ))),
        Event::InstallationRepositories { .. } => Decided::only(Decision::nothing(
            "installation repositories changed: nothing to grade",
        )),
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
    if *command == Command::Cancel {
        return vec![Decision::CancelActive {
            repo: repo.clone(),
            number: *number,
        }];
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
    vec![Decision::Grade {
        repo: repo.clone(),
        number: *number,
        head_sha: pull.head_sha.clone(),
        task: task.clone(),
        installation_id: *installation_id,
        reason: GradeReason::Command {
            command: *command,
            user: user.clone(),
        },
    }]
}

fn on_pull_request(
    action: PrAction,
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
        action,
        repo,
        installation_id,
        pr,
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
    action: PrAction,
    repo: &Repo,
    installation_id: Option<u64>,
    pr: &PullRequest,
    now: &PullState,
    before: Option<&PullState>,
    agent: Option<&AgentReason>,
    task: &TaskMatch,
) -> Decision {
    if action == PrAction::Closed {
        return Decision::CancelActive {
            repo: repo.clone(),
            number: pr.number,
        };
    }
    if let Err(why) = gradeable(now) {
        return Decision::nothing(why);
    }
    if action == PrAction::Labeled && before == Some(now) {
        return Decision::nothing(
            "the label changes neither whether this PR is graded nor its task",
        );
    }
    let Some(installation_id) = installation_id else {
        return Decision::nothing("no App installation for this repository");
    };
    let (number, head_sha) = (pr.number, pr.head_sha.clone());
    match &now.task {
        Some(task) => Decision::Grade {
            repo: repo.clone(),
            number,
            head_sha,
            task: task.clone(),
            installation_id,
            reason: GradeReason::PullRequest(action),
        },
        None => {
            let message = no_task_message(agent, task);
            Decision::NeutralNoTask {
                repo: repo.clone(),
                number,
                head_sha,
                installation_id,
                message,
            }
        }
    }
}

/// Whether a PR in `state` is graded on a push, or why not.
fn gradeable(state: &PullState) -> Result<(), &'static str> {
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

fn on_check(
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
    // A re-run of our own check run needs no other reason; a check suite is GitHub's, so
    // only PRs that a push would grade are graded.
    let is_suite = matches!(
        reason,
        GradeReason::CheckSuiteRequested | GradeReason::CheckSuiteRerequested
    );
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
            if is_suite && let Err(why) = gradeable(state) {
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

struct Comment<'a> {
    repo: &'a Repo,
    number: u64,
    comment_id: u64,
    user: &'a str,
    body: &'a str,
}

fn on_comment(comment: &Comment<'_>, installation_id: Option<u64>) -> Decided {
    let parsed = parse_commands(comment.body);
    if parsed.is_empty() {
        return Decided::only(Decision::nothing("no /infradev command in the comment"));
    }
    let Some(installation_id) = installation_id else {
        return Decided::only(Decision::nothing("no App installation for this repository"));
    };
    let mut commands: Vec<Command> = Vec::new();
    let mut errors = Vec::new();
    for result in parsed {
        match result {
            Ok(command) if !commands.contains(&command) => commands.push(command),
            Ok(_) => {}
            Err(error) => errors.push(error.to_string()),
        }
    }
    let mut decisions = Vec::new();
    if !errors.is_empty() {
        let list: String = errors.iter().map(|e| format!("\n- {e}")).collect();
        let usage: Vec<String> = Command::ALL.iter().map(|c| format!("`{c}`")).collect();
        decisions.push(Decision::Reply {
            repo: comment.repo.clone(),
            number: comment.number,
            installation_id,
            message: format!(
                "@{} I did not understand:{list}\n\nCommands: {}.",
                comment.user,
                usage.join(", ")
            ),
        });
    }
    decisions.extend(commands.into_iter().map(|command| {
        Decision::AskPermission(CommandRequest {
            repo: comment.repo.clone(),
            number: comment.number,
            installation_id,
            comment_id: comment.comment_id,
            user: comment.user.to_owned(),
            command,
        })
    }));
    Decided {
        pull: None,
        decisions,
        notes: Vec::new(),
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
mod tests {
    use super::*;

    const INST: u64 = 11;
    const SHA: &str = "aaaa";

    fn repo() -> Repo {
        Repo {
            owner: "o".into(),
            name: "r".into(),
        }
    }

    fn policy() -> AgentPolicy {
        AgentPolicy {
            logins: vec!["agent[bot]".into()],
            bot_authors: false,
            labels: vec!["agent".into()],
            branch_prefixes: vec![],
            commit_trailers: vec![],
        }
    }

    const TASKS: &[&str] = &["t1", "t2"];

    /// An agent PR naming task t1.
    fn agent_pr() -> PullRequest {
        PullRequest {
            number: 2,
            head_sha: SHA.into(),
            head_ref: "fix".into(),
            base_ref: "infradev/t1".into(),
            head_repo_full_name: Some("o/r".into()),
            head_clone_url: Some("https://github.com/o/r.git".into()),
            draft: false,
            state_open: true,
            author_login: "agent[bot]".into(),
            author_is_bot: true,
            labels: vec![],
            body: None,
        }
    }

    fn human_pr() -> PullRequest {
        PullRequest {
            author_login: "alice".into(),
            author_is_bot: false,
            ..agent_pr()
        }
    }

    fn state(is_agent: bool, task: Option<&str>) -> PullState {
        PullState {
            is_agent,
            task: task.map(str::to_owned),
            grade_requested: false,
            draft: false,
            open: true,
            head_sha: SHA.into(),
        }
    }

    fn pr_event(action: PrAction, pr: PullRequest) -> Event {
        Event::PullRequest {
            action,
            repo: repo(),
            installation_id: Some(INST),
            pr,
        }
    }

    fn known_pr(number: u64, s: PullState) -> Known {
        Known {
            pulls: BTreeMap::from([(number, s)]),
            ..Known::default()
        }
    }

    /// One line per decision, to keep the tables short.
    fn summary(d: &Decision) -> String {
        match d {
            Decision::Grade {
                repo,
                number,
                head_sha,
                task,
                installation_id,
                reason,
            } => {
                format!("grade {repo}#{number} {head_sha} {task} inst={installation_id} {reason:?}")
            }
            Decision::CancelActive { repo, number } => format!("cancel {repo}#{number}"),
            Decision::NeutralNoTask {
                repo,
                number,
                head_sha,
                installation_id,
                ..
            } => {
                format!("neutral {repo}#{number} {head_sha} inst={installation_id}")
            }
            Decision::AskPermission(r) => {
                format!(
                    "ask {}#{} inst={} comment={} {} {:?}",
                    r.repo, r.number, r.installation_id, r.comment_id, r.user, r.command
                )
            }
            Decision::Reply {
                repo,
                number,
                installation_id,
                ..
            } => format!("reply {repo}#{number} inst={installation_id}"),
            Decision::RemoteRunChanged { repo, run_id } => format!("run {repo} {run_id}"),
            Decision::Nothing { why } => format!("nothing: {why}"),
        }
    }

    fn run(event: &Event, known: &Known) -> Vec<String> {
        let policy = policy();
        let settings = Settings {
            policy: &policy,
            known_tasks: TASKS,
        };
        decide(event, &settings, known)
            .decisions
            .iter()
            .map(summary)
            .collect()
    }

    const NOT_AGENT: &str =
        "nothing: not an agent's pull request, and nobody asked for a grade with `/infradev grade`";
    const DRAFT: &str = "nothing: a draft pull request waits until it is ready for review";

    #[test]
    fn pull_request_table() {
        use PrAction::*;
        let grade = |a: PrAction| format!("grade o/r#2 {SHA} t1 inst={INST} PullRequest({a:?})");
        let neutral = format!("neutral o/r#2 {SHA} inst={INST}");
        let requested = PullState {
            grade_requested: true,
            ..state(false, Some("t1"))
        };
        let no_task = PullRequest {
            base_ref: "main".into(),
            ..agent_pr()
        };
        let labelled_agent = PullRequest {
            labels: vec!["agent".into()],
            ..human_pr()
        };
        let cases: Vec<(&str, Event, Known, Vec<String>)> = vec![
            (
                "agent opened",
                pr_event(Opened, agent_pr()),
                Known::default(),
                vec![grade(Opened)],
            ),
            (
                "agent synchronize",
                pr_event(Synchronize, agent_pr()),
                Known::default(),
                vec![grade(Synchronize)],
            ),
            (
                "agent reopened",
                pr_event(Reopened, agent_pr()),
                Known::default(),
                vec![grade(Reopened)],
            ),
            (
                "agent ready",
                pr_event(ReadyForReview, agent_pr()),
                Known::default(),
                vec![grade(ReadyForReview)],
            ),
            (
                "agent draft",
                pr_event(
                    Opened,
                    PullRequest {
                        draft: true,
                        ..agent_pr()
                    },
                ),
                Known::default(),
                vec![DRAFT.into()],
            ),
            (
                "agent draft synchronize",
                pr_event(
                    Synchronize,
                    PullRequest {
                        draft: true,
                        ..agent_pr()
                    },
                ),
                Known::default(),
                vec![DRAFT.into()],
            ),
            (
                "human opened",
                pr_event(Opened, human_pr()),
                Known::default(),
                vec![NOT_AGENT.into()],
            ),
            (
                "human synchronize, grade requested",
                pr_event(Synchronize, human_pr()),
                known_pr(2, requested.clone()),
                vec![grade(Synchronize)],
            ),
            (
                "human draft, grade requested",
                pr_event(
                    Synchronize,
                    PullRequest {
                        draft: true,
                        ..human_pr()
                    },
                ),
                known_pr(2, requested.clone()),
                vec![DRAFT.into()],
            ),
            (
                "agent closed",
                pr_event(
                    Closed,
                    PullRequest {
                        state_open: false,
                        ..agent_pr()
                    },
                ),
                Known::default(),
                vec!["cancel o/r#2".into()],
            ),
            (
                "human closed",
                pr_event(
                    Closed,
                    PullRequest {
                        state_open: false,
                        ..human_pr()
                    },
                ),
                Known::default(),
                vec!["cancel o/r#2".into()],
            ),
            (
                "agent without task",
                pr_event(Opened, no_task.clone()),
                Known::default(),
                vec![neutral.clone()],
            ),
            (
                "agent with unknown task",
                pr_event(
                    Opened,
                    PullRequest {
                        base_ref: "infradev/nope".into(),
                        ..agent_pr()
                    },
                ),
                Known::default(),
                vec![neutral.clone()],
            ),
            (
                "labeled, never seen",
                pr_event(Labeled, agent_pr()),
                Known::default(),
                vec![grade(Labeled)],
            ),
            (
                "labeled, nothing changed",
                pr_event(Labeled, agent_pr()),
                known_pr(2, state(true, Some("t1"))),
                vec![
                    "nothing: the label changes neither whether this PR is graded nor its task"
                        .into(),
                ],
            ),
            (
                "labeled, newly agent",
                pr_event(Labeled, labelled_agent.clone()),
                known_pr(2, state(false, Some("t1"))),
                vec![grade(Labeled)],
            ),
            (
                "labeled, newly task-labelled",
                pr_event(
                    Labeled,
                    PullRequest {
                        labels: vec!["task:t1".into()],
                        ..no_task.clone()
                    },
                ),
                known_pr(2, state(true, None)),
                vec![grade(Labeled)],
            ),
            (
                "labeled, newly agent without task",
                pr_event(
                    Labeled,
                    PullRequest {
                        base_ref: "main".into(),
                        ..labelled_agent.clone()
                    },
                ),
                known_pr(2, state(false, None)),
                vec![neutral.clone()],
            ),
            (
                "labeled, still no task",
                pr_event(Labeled, no_task.clone()),
                known_pr(2, state(true, None)),
                vec![
                    "nothing: the label changes neither whether this PR is graded nor its task"
                        .into(),
                ],
            ),
            (
                "labeled, human",
                pr_event(
                    Labeled,
                    PullRequest {
                        labels: vec!["bug".into()],
                        ..human_pr()
                    },
                ),
                known_pr(2, state(false, Some("t1"))),
                vec![NOT_AGENT.into()],
            ),
            (
                "labeled, closed",
                pr_event(
                    Labeled,
                    PullRequest {
                        state_open: false,
                        ..agent_pr()
                    },
                ),
                Known::default(),
                vec!["nothing: the pull request is closed".into()],
            ),
            (
                "installation from the store",
                Event::PullRequest {
                    action: Opened,
                    repo: repo(),
                    installation_id: None,
                    pr: agent_pr(),
                },
                Known {
                    installation_id: Some(INST),
                    ..Known::default()
                },
                vec![grade(Opened)],
            ),
            (
                "no installation",
                Event::PullRequest {
                    action: Opened,
                    repo: repo(),
                    installation_id: None,
                    pr: agent_pr(),
                },
                Known::default(),
                vec!["nothing: no App installation for this repository".into()],
            ),
            (
                "closed without installation still cancels",
                Event::PullRequest {
                    action: Closed,
                    repo: repo(),
                    installation_id: None,
                    pr: agent_pr(),
                },
                Known::default(),
                vec!["cancel o/r#2".into()],
            ),
        ];
        for (name, event, known, want) in cases {
            assert_eq!(run(&event, &known), want, "{name}");
        }
    }

    #[test]
    fn pull_request_state_and_notes() {
        let policy = policy();
        let settings = Settings {
            policy: &policy,
            known_tasks: TASKS,
        };
        let requested = PullState {
            grade_requested: true,
            ..state(false, Some("t1"))
        };
        let pr = PullRequest {
            labels: vec!["task:t2".into()],
            draft: true,
            ..human_pr()
        };
        let decided = decide(
            &pr_event(PrAction::Synchronize, pr),
            &settings,
            &known_pr(2, requested),
        );
        assert_eq!(
            decided.pull,
            Some(PullState {
                is_agent: false,
                task: Some("t1".into()),
                grade_requested: true,
                draft: true,
                open: true,
                head_sha: SHA.into()
            })
        );
        assert_eq!(
            decided.notes,
            vec![r#"PR #2 also names task "t2" (a `task:` label); "t1" is used"#.to_owned()]
        );
    }

    #[test]
    fn neutral_messages() {
        let policy = policy();
        let settings = Settings {
            policy: &policy,
            known_tasks: TASKS,
        };
        let message = |pr: PullRequest| match &decide(
            &pr_event(PrAction::Opened, pr),
            &settings,
            &Known::default(),
        )
        .decisions[..]
        {
            [Decision::NeutralNoTask { message, .. }] => message.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            message(PullRequest {
                base_ref: "main".into(),
                ..agent_pr()
            }),
            format!(
                "InfraDev grades this pull request (its author `agent[bot]` is an allowlisted agent account), but it names no task to grade against. {HOW_TO_NAME_A_TASK}"
            )
        );
        assert_eq!(
            message(PullRequest {
                base_ref: "main".into(),
                labels: vec!["agent".into(), "task:`@x`".into()],
                ..human_pr()
            }),
            format!(
                "InfraDev grades this pull request (it has the label `agent`), but the task it names, `` `@x` ``, from a `task:` label, is not a task InfraDev has. {HOW_TO_NAME_A_TASK}"
            )
        );
    }

    fn check_run(pull_numbers: Vec<u64>) -> Event {
        Event::CheckRunRerequested {
            repo: repo(),
            installation_id: Some(INST),
            head_sha: SHA.into(),
            external_id: Some("job-1".into()),
            pull_numbers,
        }
    }

    fn suite(rerequested: bool) -> Event {
        Event::CheckSuite {
            rerequested,
            repo: repo(),
            installation_id: Some(INST),
            head_sha: SHA.into(),
            pull_numbers: vec![2],
        }
    }

    #[test]
    fn check_table() {
        let grade = |n: u64, reason: &str| format!("grade o/r#{n} {SHA} t1 inst={INST} {reason}");
        let action = |identifier: &str| Event::CheckRunRequestedAction {
            repo: repo(),
            installation_id: Some(INST),
            head_sha: SHA.into(),
            external_id: None,
            identifier: identifier.into(),
            pull_numbers: vec![2],
        };
        let agent = state(true, Some("t1"));
        let human = state(false, Some("t1"));
        let draft = PullState {
            draft: true,
            ..agent.clone()
        };
        let head_index = Known {
            pulls: BTreeMap::from([(3, agent.clone()), (4, agent.clone())]),
            head_prs: vec![4, 3, 4],
            ..Known::default()
        };
        let cases: Vec<(&str, Event, Known, Vec<String>)> = vec![
            (
                "rerun",
                check_run(vec![2]),
                known_pr(2, agent.clone()),
                vec![grade(2, "CheckRunRerequested")],
            ),
            (
                "rerun via head index",
                check_run(vec![]),
                head_index.clone(),
                vec![
                    grade(3, "CheckRunRerequested"),
                    grade(4, "CheckRunRerequested"),
                ],
            ),
            (
                "payload numbers beat the head index",
                check_run(vec![3]),
                head_index,
                vec![grade(3, "CheckRunRerequested")],
            ),
            (
                "no PR for the head",
                check_run(vec![]),
                Known::default(),
                vec![format!("nothing: no known pull request has head {SHA}")],
            ),
            (
                "unknown PR",
                check_run(vec![9]),
                Known::default(),
                vec!["nothing: PR #9 is not in the store".into()],
            ),
            (
                "head moved on",
                check_run(vec![2]),
                known_pr(
                    2,
                    PullState {
                        head_sha: "bbbb".into(),
                        ..agent.clone()
                    },
                ),
                vec![format!(
                    "nothing: PR #2 moved on to bbbb; {SHA} is not graded"
                )],
            ),
            (
                "closed",
                check_run(vec![2]),
                known_pr(
                    2,
                    PullState {
                        open: false,
                        ..agent.clone()
                    },
                ),
                vec!["nothing: PR #2 is closed".into()],
            ),
            (
                "rerun of a human PR's check",
                check_run(vec![2]),
                known_pr(2, human.clone()),
                vec![grade(2, "CheckRunRerequested")],
            ),
            (
                "rerun on a draft",
                check_run(vec![2]),
                known_pr(2, draft.clone()),
                vec![grade(2, "CheckRunRerequested")],
            ),
            (
                "rerun without task",
                check_run(vec![2]),
                known_pr(2, state(true, None)),
                vec![format!("neutral o/r#2 {SHA} inst={INST}")],
            ),
            (
                "no installation",
                Event::CheckRunRerequested {
                    repo: repo(),
                    installation_id: None,
                    head_sha: SHA.into(),
                    external_id: None,
                    pull_numbers: vec![2],
                },
                known_pr(2, agent.clone()),
                vec!["nothing: no App installation for this repository".into()],
            ),
            (
                "regrade button",
                action("regrade"),
                known_pr(2, agent.clone()),
                vec![grade(2, "RegradeButton")],
            ),
            (
                "other button",
                action("lgtm|26764"),
                known_pr(2, agent.clone()),
                vec![r#"nothing: unknown check run action "lgtm|26764""#.into()],
            ),
            (
                "suite requested",
                suite(false),
                known_pr(2, agent.clone()),
                vec![grade(2, "CheckSuiteRequested")],
            ),
            (
                "suite rerequested",
                suite(true),
                known_pr(2, agent.clone()),
                vec![grade(2, "CheckSuiteRerequested")],
            ),
            (
                "suite on a human PR",
                suite(true),
                known_pr(2, human.clone()),
                vec![format!("nothing: PR #2: {}", &NOT_AGENT[9..])],
            ),
            (
                "suite on a requested human PR",
                suite(false),
                known_pr(
                    2,
                    PullState {
                        grade_requested: true,
                        ..human.clone()
                    },
                ),
                vec![grade(2, "CheckSuiteRequested")],
            ),
            (
                "suite on a draft",
                suite(false),
                known_pr(2, draft),
                vec![format!("nothing: PR #2: {}", &DRAFT[9..])],
            ),
            (
                "suite requested without task",
                suite(false),
                known_pr(2, state(true, None)),
                vec!["nothing: PR #2 names no known task".into()],
            ),
            (
                "suite rerequested without task",
                suite(true),
                known_pr(2, state(true, None)),
                vec![format!("neutral o/r#2 {SHA} inst={INST}")],
            ),
        ];
        for (name, event, known, want) in cases {
            assert_eq!(run(&event, &known), want, "{name}");
        }
    }

    #[test]
    fn grade_reasons() {
        use Command::*;
        let cmd = |command| GradeReason::Command {
            command,
            user: "u".into(),
        };
        let cases = [
            (
                GradeReason::PullRequest(PrAction::Synchronize),
                false,
                false,
            ),
            (GradeReason::CheckRunRerequested, true, false),
            (GradeReason::RegradeButton, true, false),
            (GradeReason::CheckSuiteRequested, false, false),
            (GradeReason::CheckSuiteRerequested, true, false),
            (cmd(Grade), false, true),
            (cmd(Regrade), true, false),
        ];
        for (reason, new_attempt, requests) in cases {
            assert_eq!(
                (reason.new_attempt(), reason.requests_grading()),
                (new_attempt, requests),
                "{reason:?}"
            );
        }
    }

    fn comment(is_pull_request: bool, body: &str, installation_id: Option<u64>) -> Event {
        Event::IssueComment {
            repo: repo(),
            installation_id,
            issue_number: 2,
            is_pull_request,
            comment_id: 77,
            author_login: "bob".into(),
            body: body.into(),
        }
    }

    #[test]
    fn comment_table() {
        let ask = |c: &str| format!("ask o/r#2 inst={INST} comment=77 bob {c}");
        let cases: Vec<(&str, Event, Vec<String>)> = vec![
            (
                "on an issue",
                comment(false, "/infradev grade", Some(INST)),
                vec!["nothing: a comment on an issue, not on a pull request".into()],
            ),
            (
                "no command",
                comment(true, "nice work", Some(INST)),
                vec!["nothing: no /infradev command in the comment".into()],
            ),
            (
                "quoted command",
                comment(true, "> /infradev grade\n\nno", Some(INST)),
                vec!["nothing: no /infradev command in the comment".into()],
            ),
            (
                "grade",
                comment(true, "/infradev grade", Some(INST)),
                vec![ask("Grade")],
            ),
            (
                "several, deduplicated",
                comment(
                    true,
                    "/infradev grade\n/infradev cancel\n/infradev grade",
                    Some(INST),
                ),
                vec![ask("Grade"), ask("Cancel")],
            ),
            (
                "unknown and valid",
                comment(true, "/infradev merge\n/infradev regrade", Some(INST)),
                vec![format!("reply o/r#2 inst={INST}"), ask("Regrade")],
            ),
            (
                "no installation",
                comment(true, "/infradev grade", None),
                vec!["nothing: no App installation for this repository".into()],
            ),
        ];
        for (name, event, want) in cases {
            assert_eq!(run(&event, &Known::default()), want, "{name}");
        }
    }

    #[test]
    fn comment_reply_is_safe() {
        let policy = policy();
        let settings = Settings {
            policy: &policy,
            known_tasks: TASKS,
        };
        let decided = decide(
            &comment(true, "/infradev merge `@all`\n/infradev", Some(INST)),
            &settings,
            &Known::default(),
        );
        let [Decision::Reply { message, .. }] = &decided.decisions[..] else {
            panic!("{decided:?}")
        };
        assert_eq!(
            message,
            "@bob I did not understand:\n- unknown sub-command `merge`: expected grade, regrade or cancel\n- `/infradev` needs a sub-command: grade, regrade or cancel\n\nCommands: `/infradev grade`, `/infradev regrade`, `/infradev cancel`."
        );
        // Our own reply, read back as a comment, asks for nothing.
        assert_eq!(
            run(&comment(true, message, Some(INST)), &Known::default()),
            vec!["nothing: no /infradev command in the comment"]
        );
    }

    #[test]
    fn command_table() {
        let request = |command| CommandRequest {
            repo: repo(),
            number: 2,
            installation_id: INST,
            comment_id: 77,
            user: "bob".into(),
            command,
        };
        let grade = |c: &str| {
            format!("grade o/r#2 {SHA} t1 inst={INST} Command {{ command: {c}, user: \"bob\" }}")
        };
        let reply = format!("reply o/r#2 inst={INST}");
        let agent = state(true, Some("t1"));
        // Name, command, permitted, stored state, decisions.
        type Case = (&'static str, Command, bool, Option<PullState>, Vec<String>);
        let cases: Vec<Case> = vec![
            (
                "grade",
                Command::Grade,
                true,
                Some(state(false, Some("t1"))),
                vec![grade("Grade")],
            ),
            (
                "regrade",
                Command::Regrade,
                true,
                Some(agent.clone()),
                vec![grade("Regrade")],
            ),
            (
                "grade a draft",
                Command::Grade,
                true,
                Some(PullState {
                    draft: true,
                    ..agent.clone()
                }),
                vec![grade("Grade")],
            ),
            (
                "cancel",
                Command::Cancel,
                true,
                Some(agent.clone()),
                vec!["cancel o/r#2".into()],
            ),
            (
                "cancel, PR unknown",
                Command::Cancel,
                true,
                None,
                vec!["cancel o/r#2".into()],
            ),
            (
                "not permitted",
                Command::Grade,
                false,
                Some(agent.clone()),
                vec![reply.clone()],
            ),
            (
                "cancel not permitted",
                Command::Cancel,
                false,
                Some(agent.clone()),
                vec![reply.clone()],
            ),
            (
                "PR unknown",
                Command::Grade,
                true,
                None,
                vec![reply.clone()],
            ),
            (
                "closed",
                Command::Regrade,
                true,
                Some(PullState {
                    open: false,
                    ..agent.clone()
                }),
                vec![reply.clone()],
            ),
            (
                "no task",
                Command::Grade,
                true,
                Some(state(false, None)),
                vec![reply.clone()],
            ),
        ];
        for (name, command, permitted, pull, want) in cases {
            let got: Vec<String> = decide_command(&request(command), permitted, pull.as_ref())
                .iter()
                .map(summary)
                .collect();
            assert_eq!(got, want, "{name}");
        }
        let refused = decide_command(&request(Command::Grade), false, None);
        let [Decision::Reply { message, .. }] = &refused[..] else {
            panic!("{refused:?}")
        };
        assert_eq!(
            message,
            "@bob only people with write, maintain or admin access to this repository can run `/infradev grade`."
        );
    }

    #[test]
    fn other_events_do_nothing() {
        let cases = [
            (Event::Ping, "nothing: ping"),
            (
                Event::Installation {
                    action: "created".into(),
                    installation_id: 1,
                    repositories: vec![],
                },
                "nothing: installation created: nothing to grade",
            ),
            (
                Event::InstallationRepositories {
                    installation_id: 1,
                    added: vec!["o/r".into()],
                    removed: vec![],
                },
                "nothing: installation repositories changed: nothing to grade",
            ),
            (
                Event::Ignored {
                    event: "push".into(),
                    action: None,
                },
                "nothing: push is not handled",
            ),
            (
                Event::Ignored {
                    event: "pull_request".into(),
                    action: Some("assigned".into()),
                },
                "nothing: pull_request assigned is not handled",
            ),
        ];
        for (event, want) in cases {
            assert_eq!(
                run(&event, &Known::default()),
                vec![want.to_owned()],
                "{event:?}"
            );
        }
    }

    #[test]
    fn workflow_events_wake_the_remote_follower() {
        let workflow_run =
            |action: &str, status: &str, conclusion: Option<&str>| Event::WorkflowRun {
                action: action.into(),
                repo: repo(),
                installation_id: Some(INST),
                run_id: 31,
                status: status.into(),
                conclusion: conclusion.map(str::to_owned),
                display_title: "infradev-7-1".into(),
            };
        let workflow_job =
            |action: &str, status: &str, conclusion: Option<&str>, runner: Option<&str>| {
                Event::WorkflowJob {
                    action: action.into(),
                    repo: repo(),
                    installation_id: None,
                    run_id: 32,
                    job_id: 900,
                    status: status.into(),
                    conclusion: conclusion.map(str::to_owned),
                    runner_name: runner.map(str::to_owned),
                }
            };
        let cases = [
            (
                "run requested",
                workflow_run("requested", "queued", None),
                "run o/r 31",
            ),
            (
                "run in progress",
                workflow_run("in_progress", "in_progress", None),
                "run o/r 31",
            ),
            (
                "run completed",
                workflow_run("completed", "completed", Some("failure")),
                "run o/r 31",
            ),
            (
                "run of another workflow, or one GitHub adds later",
                workflow_run("some_new_action", "completed", Some("success")),
                "run o/r 31",
            ),
            (
                "job waiting for a runner, no installation in the payload",
                workflow_job("waiting", "waiting", None, None),
                "run o/r 32",
            ),
            (
                "job taken by a runner",
                workflow_job("in_progress", "in_progress", None, Some("gpu-4-a")),
                "run o/r 32",
            ),
            (
                "job completed",
                workflow_job("completed", "completed", Some("cancelled"), Some("gpu-4-a")),
                "run o/r 32",
            ),
        ];
        for (name, event, want) in cases {
            let decided = {
                let policy = policy();
                let settings = Settings {
                    policy: &policy,
                    known_tasks: TASKS,
                };
                decide(&event, &settings, &Known::default())
            };
            assert_eq!(decided.pull, None, "{name}");
            assert!(decided.notes.is_empty(), "{name}");
            assert_eq!(
                decided.decisions.iter().map(summary).collect::<Vec<_>>(),
                vec![want.to_owned()],
                "{name}"
            );
        }
    }
}
