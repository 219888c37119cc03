//! Which task a pull request is graded against, and whether an agent wrote it (pure).
//!
//! Both read only the `pull_request` payload. Commit messages are not in that payload, so
//! "commit trailers" are looked for in the PR description instead (`Key: value` lines), which is
//! where agents that open PRs through the API put them as well.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::service::webhook::PullRequest;

/// The base branch prefix that names a task: a PR into `infradev/<task-id>`.
pub const TASK_BRANCH_PREFIX: &str = "infradev/";
/// The description line key that names a task: `InfraDev-Task: <task-id>` (any case).
pub const TASK_LINE_KEY: &str = "InfraDev-Task";
/// The label prefix that names a task: `task:<task-id>` (any case).
pub const TASK_LABEL_PREFIX: &str = "task:";

/// Where a task id was found, in order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum TaskSource {
    /// The PR's base branch is `infradev/<id>`.
    BaseBranch,
    /// A line `InfraDev-Task: <id>` in the PR description.
    BodyLine,
    /// A label `task:<id>`.
    Label,
}

impl fmt::Display for TaskSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskSource::BaseBranch => "the base branch",
            TaskSource::BodyLine => "an `InfraDev-Task:` line in the description",
            TaskSource::Label => "a `task:` label",
        })
    }
}

/// One place that names a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskClaim {
    pub source: TaskSource,
    pub id: String,
}

/// The task a PR names. The first source by precedence (base branch, description line, label)
/// decides; `conflicts` lists the other places that name a *different* task, so they can be
/// reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum TaskMatch {
    /// A task we have.
    Known {
        id: String,
        source: TaskSource,
        conflicts: Vec<TaskClaim>,
    },
    /// The PR names a task id we do not have.
    Unknown {
        id: String,
        source: TaskSource,
        conflicts: Vec<TaskClaim>,
    },
    /// The PR names no task.
    None,
}

impl TaskMatch {
    /// The task to grade against: the id of a known task.
    pub fn known_id(&self) -> Option<&str> {
        match self {
            TaskMatch::Known { id, .. } => Some(id),
            _ => None,
        }
    }

    /// Places that name another task than the one chosen.
    pub fn conflicts(&self) -> &[TaskClaim] {
        match self {
            TaskMatch::Known { conflicts, .. } | TaskMatch::Unknown { conflicts, .. } => conflicts,
            TaskMatch::None => &[],
        }
    }
}

/// Finds the task `pr` names; `known` are the ids of the tasks we have (compared exactly).
pub fn match_task(pr: &PullRequest, known: &[&str]) -> TaskMatch {
    let claims = task_claims(pr);
    let Some(first) = claims.first() else {
        return TaskMatch::None;
    };
    let mut conflicts: Vec<TaskClaim> = Vec::new();
    for claim in &claims[1..] {
        if claim.id != first.id && !conflicts.contains(claim) {
            conflicts.push(claim.clone());
        }
    }
    let (id, source) = (first.id.clone(), first.source);
    if known.contains(&id.as_str()) {
        TaskMatch::Known {
            id,
            source,
            conflicts,
        }
    } else {
        TaskMatch::Unknown {
            id,
            source,
            conflicts,
        }
    }
}

/// Every place in `pr` that names a task, in order of precedence.
fn task_claims(pr: &PullRequest) -> Vec<TaskClaim> {
    let mut claims = Vec::new();
    if let Some(id) = pr
        .base_ref
        .strip_prefix(TASK_BRANCH_PREFIX)
        .filter(|id| !id.is_empty())
    {
        claims.push(TaskClaim {
            source: TaskSource::BaseBranch,
            id: id.to_owned(),
        });
    }
    for value in trailer_values(pr.body.as_deref().unwrap_or(""), TASK_LINE_KEY) {
        claims.push(TaskClaim {
            source: TaskSource::BodyLine,
            id: value.to_owned(),
        });
    }
    for label in &pr.labels {
        if let Some(id) = strip_prefix_ignore_case(label, TASK_LABEL_PREFIX)
            .map(str::trim)
            .filter(|id| !id.is_empty())
        {
            claims.push(TaskClaim {
                source: TaskSource::Label,
                id: id.to_owned(),
            });
        }
    }
    claims
}

/// How a PR names its task, for messages to people.
pub const HOW_TO_NAME_A_TASK: &str = "Name the task in one of these ways (the first one found wins): \
open the PR against the branch `infradev/<task-id>`, add a line `InfraDev-Task: <task-id>` to the PR \
description, or add the label `task:<task-id>`.";

/// Which pull requests count as written by a coding agent. Any one rule matching is enough;
/// an empty list disables its rule.
///
/// Trust: `logins` and `bot_authors` rest on who opened the PR, which only GitHub decides.
/// `labels` need triage access to set. `branch_prefixes` and `commit_trailers` are chosen by
/// whoever opens the PR, so they let anyone opt a PR in to grading (which runs its code in the
/// sandbox, as for every agent PR).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentPolicy {
    /// Allowlisted accounts, compared case-insensitively with the PR author's login. GitHub Apps
    /// post as `<app-slug>[bot]`, so write them in that form (`my-coding-agent[bot]`); a plain
    /// name matches only a user account of exactly that login.
    pub logins: Vec<String>,
    /// Count every author whose GitHub account type is `Bot` (`user.type`), i.e. every App,
    /// including ones like Dependabot.
    pub bot_authors: bool,
    /// PR labels that mark a PR as agent-written, compared case-insensitively.
    pub labels: Vec<String>,
    /// Head branch prefixes (`agent/`) that mark a PR as agent-written, compared exactly.
    pub branch_prefixes: Vec<String>,
    /// Trailers that mark a PR as agent-written: `Key` (any value) or `Key: value` (that value),
    /// compared case-insensitively. Commit messages are not in the webhook payload, so these are
    /// matched against the PR description's lines of the form `Key: value`.
    pub commit_trailers: Vec<String>,
}

impl Default for AgentPolicy {
    /// The defaults documented in `infradev.example.toml`.
    fn default() -> Self {
        AgentPolicy {
            logins: Vec::new(),
            bot_authors: true,
            labels: vec!["agent".to_owned()],
            branch_prefixes: vec!["agent/".to_owned()],
            commit_trailers: vec!["Agent-Authored-By".to_owned()],
        }
    }
}

/// The rule of [`AgentPolicy`] that made a PR an agent PR, with what matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum AgentReason {
    /// The author's login is in `logins`.
    Login(String),
    /// The author is a `Bot` account (`bot_authors`).
    BotAuthor(String),
    /// The PR carries this label from `labels`.
    Label(String),
    /// The head branch starts with this prefix from `branch_prefixes`.
    BranchPrefix(String),
    /// The description has this `Key: value` line, matching `commit_trailers`.
    Trailer(String),
}

impl fmt::Display for AgentReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentReason::Login(login) => {
                write!(f, "author {login} is an allowlisted agent account")
            }
            AgentReason::BotAuthor(login) => write!(f, "author {login} is a bot account"),
            AgentReason::Label(label) => write!(f, "label {label}"),
            AgentReason::BranchPrefix(prefix) => write!(f, "head branch starts with {prefix}"),
            AgentReason::Trailer(line) => write!(f, "description line {line}"),
        }
    }
}

/// Whether `pr` was written by an agent under `policy`, and the first rule that says so (rules
/// are tried in the order of the policy's fields).
pub fn is_agent(pr: &PullRequest, policy: &AgentPolicy) -> Option<AgentReason> {
    if policy
        .logins
        .iter()
        .any(|l| l.trim().eq_ignore_ascii_case(&pr.author_login))
    {
        return Some(AgentReason::Login(pr.author_login.clone()));
    }
    if policy.bot_authors && pr.author_is_bot {
        return Some(AgentReason::BotAuthor(pr.author_login.clone()));
    }
    if let Some(label) = pr
        .labels
        .iter()
        .find(|l| policy.labels.iter().any(|p| p.eq_ignore_ascii_case(l)))
    {
        return Some(AgentReason::Label(label.clone()));
    }
    if let Some(prefix) = policy
        .branch_prefixes
        .iter()
        .find(|p| !p.is_empty() && pr.head_ref.starts_with(p.as_str()))
    {
        return Some(AgentReason::BranchPrefix(prefix.clone()));
    }
    let body = pr.body.as_deref().unwrap_or("");
    for trailer in &policy.commit_trailers {
        let (key, want) = match trailer.split_once(':') {
            Some((key, value)) => (key.trim(), Some(value.trim())),
            None => (trailer.trim(), None),
        };
        if key.is_empty() {
            continue;
        }
        if let Some(value) =
            trailer_values(body, key).find(|v| want.is_none_or(|w| w.eq_ignore_ascii_case(v)))
        {
            return Some(AgentReason::Trailer(format!("{key}: {value}")));
        }
    }
    None
}

/// The non-empty values of the `key: value` lines of `text` (key compared case-insensitively,
/// surrounding whitespace ignored; CRLF and LF line ends both work).
fn trailer_values<'t>(text: &'t str, key: &'t str) -> impl Iterator<Item = &'t str> + 't {
    text.lines().filter_map(move |line| {
        let (k, v) = line.split_once(':')?;
        let v = v.trim();
        (k.trim().eq_ignore_ascii_case(key) && !v.is_empty()).then_some(v)
    })
}

fn strip_prefix_ignore_case<'s>(s: &'s str, prefix: &str) -> Option<&'s str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr() -> PullRequest {
        PullRequest {
            number: 7,
            head_sha: "abc".into(),
            head_ref: "feature".into(),
            base_ref: "main".into(),
            head_repo_full_name: Some("o/r".into()),
            head_clone_url: Some("https://github.com/o/r.git".into()),
            draft: false,
            state_open: true,
            author_login: "alice".into(),
            author_is_bot: false,
            labels: vec![],
            body: None,
        }
    }

    fn with(base: &str, body: Option<&str>, labels: &[&str]) -> PullRequest {
        PullRequest {
            base_ref: base.into(),
            body: body.map(str::to_owned),
            labels: labels.iter().map(|l| l.to_string()).collect(),
            ..pr()
        }
    }

    fn claim(source: TaskSource, id: &str) -> TaskClaim {
        TaskClaim {
            source,
            id: id.into(),
        }
    }

    #[test]
    fn task_matching_table() {
        use TaskSource::*;
        let known = ["t1", "t2"];
        let known_m = |id: &str, source, conflicts| TaskMatch::Known {
            id: id.into(),
            source,
            conflicts,
        };
        let unknown_m = |id: &str, source, conflicts| TaskMatch::Unknown {
            id: id.into(),
            source,
            conflicts,
        };
        let cases: Vec<(&str, PullRequest, TaskMatch)> = vec![
            ("nothing", with("main", None, &[]), TaskMatch::None),
            (
                "base branch",
                with("infradev/t1", None, &[]),
                known_m("t1", BaseBranch, vec![]),
            ),
            (
                "bare prefix names nothing",
                with("infradev/", None, &[]),
                TaskMatch::None,
            ),
            (
                "prefix is case-sensitive",
                with("InfraDev/t1", None, &[]),
                TaskMatch::None,
            ),
            (
                "body line",
                with("main", Some("Fixes it.\n\nInfraDev-Task: t2\n"), &[]),
                known_m("t2", BodyLine, vec![]),
            ),
            (
                "body key any case, spaces",
                with("main", Some("  infradev-task :  t2  "), &[]),
                known_m("t2", BodyLine, vec![]),
            ),
            (
                "body CRLF",
                with("main", Some("x\r\nINFRADEV-TASK: t1\r\ny"), &[]),
                known_m("t1", BodyLine, vec![]),
            ),
            (
                "empty body value",
                with("main", Some("InfraDev-Task:   "), &[]),
                TaskMatch::None,
            ),
            (
                "key must be the whole key",
                with("main", Some("Not-InfraDev-Task: t1"), &[]),
                TaskMatch::None,
            ),
            (
                "label",
                with("main", None, &["bug", "task:t1"]),
                known_m("t1", Label, vec![]),
            ),
            (
                "label prefix any case",
                with("main", None, &["Task: t2"]),
                known_m("t2", Label, vec![]),
            ),
            (
                "unknown via base",
                with("infradev/nope", None, &[]),
                unknown_m("nope", BaseBranch, vec![]),
            ),
            (
                "unknown via label",
                with("main", None, &["task:zzz"]),
                unknown_m("zzz", Label, vec![]),
            ),
            (
                "ids are exact",
                with("main", None, &["task:T1"]),
                unknown_m("T1", Label, vec![]),
            ),
            (
                "base beats body and label, conflicts reported",
                with("infradev/t1", Some("InfraDev-Task: t2"), &["task:t3"]),
                known_m(
                    "t1",
                    BaseBranch,
                    vec![claim(BodyLine, "t2"), claim(Label, "t3")],
                ),
            ),
            (
                "agreeing sources are no conflict",
                with("infradev/t1", Some("InfraDev-Task: t1"), &["task:t1"]),
                known_m("t1", BaseBranch, vec![]),
            ),
            (
                "body beats label",
                with("main", Some("InfraDev-Task: t2"), &["task:t1"]),
                known_m("t2", BodyLine, vec![claim(Label, "t1")]),
            ),
            (
                "unknown first source wins over a known later one",
                with("infradev/nope", None, &["task:t1"]),
                unknown_m("nope", BaseBranch, vec![claim(Label, "t1")]),
            ),
            (
                "two body lines disagree; duplicates once",
                with(
                    "main",
                    Some("InfraDev-Task: t1\nInfraDev-Task: t2\nInfraDev-Task: t2"),
                    &[],
                ),
                known_m("t1", BodyLine, vec![claim(BodyLine, "t2")]),
            ),
        ];
        for (name, pr, want) in cases {
            assert_eq!(match_task(&pr, &known), want, "{name}");
        }
    }

    #[test]
    fn known_id_and_conflicts() {
        let m = match_task(&with("infradev/t1", None, &["task:t2"]), &["t1"]);
        assert_eq!(m.known_id(), Some("t1"));
        assert_eq!(m.conflicts(), &[claim(TaskSource::Label, "t2")]);
        assert_eq!(
            match_task(&with("infradev/x", None, &[]), &["t1"]).known_id(),
            None
        );
        assert_eq!(TaskMatch::None.conflicts(), &[]);
    }

    #[test]
    fn agent_rules_table() {
        let none = AgentPolicy {
            logins: vec![],
            bot_authors: false,
            labels: vec![],
            branch_prefixes: vec![],
            commit_trailers: vec![],
        };
        let policy = AgentPolicy {
            logins: vec!["My-Agent[bot]".into(), "agent-user".into()],
            bot_authors: false,
            labels: vec!["AI".into()],
            branch_prefixes: vec!["agent/".into(), "".into()],
            commit_trailers: vec!["Agent-Authored-By".into(), "Co-authored-by: Claude".into()],
        };
        let bots = AgentPolicy {
            bot_authors: true,
            ..none.clone()
        };
        let human = pr();
        let cases: Vec<(&str, PullRequest, &AgentPolicy, Option<AgentReason>)> = vec![
            ("plain human", human.clone(), &policy, None),
            (
                "empty policy",
                PullRequest {
                    author_is_bot: true,
                    ..human.clone()
                },
                &none,
                None,
            ),
            (
                "allowlisted app, any case",
                PullRequest {
                    author_login: "my-agent[bot]".into(),
                    author_is_bot: true,
                    ..human.clone()
                },
                &policy,
                Some(AgentReason::Login("my-agent[bot]".into())),
            ),
            (
                "allowlisted user account",
                PullRequest {
                    author_login: "Agent-User".into(),
                    ..human.clone()
                },
                &policy,
                Some(AgentReason::Login("Agent-User".into())),
            ),
            (
                "a plain name does not match the [bot] login",
                PullRequest {
                    author_login: "agent-user[bot]".into(),
                    author_is_bot: true,
                    ..human.clone()
                },
                &policy,
                None,
            ),
            (
                "not-allowlisted bot without bot_authors",
                PullRequest {
                    author_login: "dependabot[bot]".into(),
                    author_is_bot: true,
                    ..human.clone()
                },
                &policy,
                None,
            ),
            (
                "bot_authors",
                PullRequest {
                    author_login: "dependabot[bot]".into(),
                    author_is_bot: true,
                    ..human.clone()
                },
                &bots,
                Some(AgentReason::BotAuthor("dependabot[bot]".into())),
            ),
            (
                "label any case",
                PullRequest {
                    labels: vec!["bug".into(), "ai".into()],
                    ..human.clone()
                },
                &policy,
                Some(AgentReason::Label("ai".into())),
            ),
            (
                "branch prefix",
                PullRequest {
                    head_ref: "agent/fix-1".into(),
                    ..human.clone()
                },
                &policy,
                Some(AgentReason::BranchPrefix("agent/".into())),
            ),
            (
                "branch prefix is exact, empty prefix ignored",
                PullRequest {
                    head_ref: "Agent/fix-1".into(),
                    ..human.clone()
                },
                &policy,
                None,
            ),
            (
                "trailer key, any value",
                PullRequest {
                    body: Some("Did it.\r\n\r\nagent-authored-by: devin\r\n".into()),
                    ..human.clone()
                },
                &policy,
                Some(AgentReason::Trailer("Agent-Authored-By: devin".into())),
            ),
            (
                "trailer key with empty value",
                PullRequest {
                    body: Some("Agent-Authored-By:".into()),
                    ..human.clone()
                },
                &policy,
                None,
            ),
            (
                "trailer key and value",
                PullRequest {
                    body: Some("Co-Authored-By: claude".into()),
                    ..human.clone()
                },
                &policy,
                Some(AgentReason::Trailer("Co-authored-by: claude".into())),
            ),
            (
                "trailer value must match",
                PullRequest {
                    body: Some("Co-authored-by: Bob".into()),
                    ..human.clone()
                },
                &policy,
                None,
            ),
            (
                "first rule wins",
                PullRequest {
                    author_login: "my-agent[bot]".into(),
                    labels: vec!["ai".into()],
                    head_ref: "agent/x".into(),
                    ..human.clone()
                },
                &policy,
                Some(AgentReason::Login("my-agent[bot]".into())),
            ),
        ];
        for (name, pr, policy, want) in cases {
            assert_eq!(is_agent(&pr, policy), want, "{name}");
        }
    }

    #[test]
    fn policy_config_is_strict_and_defaults_follow_the_example() {
        let p: AgentPolicy = serde_json::from_str(r#"{"logins":["a[bot]"]}"#).unwrap();
        assert_eq!(p.logins, vec!["a[bot]".to_owned()]);
        assert!(p.bot_authors);
        assert_eq!(p.labels, vec!["agent".to_owned()]);
        let err = serde_json::from_str::<AgentPolicy>(r#"{"login":["a[bot]"]}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `login`"), "{err}");
    }
}
