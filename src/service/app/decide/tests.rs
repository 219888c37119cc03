//! Table tests of the decisions.

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
        Decision::NeutralWaiting {
            repo,
            number,
            head_sha,
            installation_id,
        } => format!("waiting {repo}#{number} {head_sha} inst={installation_id}"),
        Decision::React {
            repo,
            comment_id,
            content,
            ..
        } => format!("react {repo} comment={comment_id} {content}"),
        Decision::Resync {
            installation_id,
            repos,
        } => format!("resync inst={installation_id} {repos:?}"),
        Decision::Withdraw {
            installation_id,
            repos,
        } => format!("withdraw inst={installation_id} {repos:?}"),
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
    let waiting = format!("waiting o/r#2 {SHA} inst={INST}");
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
            vec![waiting.clone()],
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
                "nothing: the change affects neither whether this PR is graded nor its task".into(),
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
                "nothing: the change affects neither whether this PR is graded nor its task".into(),
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
            "labeled, closed (a lost `closed` delivery still cancels)",
            pr_event(
                Labeled,
                PullRequest {
                    state_open: false,
                    ..agent_pr()
                },
            ),
            Known::default(),
            vec!["cancel o/r#2".into()],
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
                pr: PullRequest {
                    state_open: false,
                    ..agent_pr()
                },
            },
            Known::default(),
            vec!["cancel o/r#2".into()],
        ),
        (
            "a late closed: the API has it open again",
            pr_event(Closed, agent_pr()),
            known_pr(2, state(true, Some("t1"))),
            vec!["nothing: a late `closed`: the pull request is open again".into()],
        ),
        (
            "a late synchronize: the API's head is graded",
            pr_event(Synchronize, agent_pr()),
            known_pr(
                2,
                PullState {
                    head_sha: "old".into(),
                    ..state(true, Some("t1"))
                },
            ),
            vec![grade(Synchronize)],
        ),
        (
            "unlabeled: no longer an agent's",
            pr_event(Unlabeled, human_pr()),
            known_pr(2, state(true, Some("t1"))),
            vec![waiting.clone()],
        ),
        (
            "human opened without a task",
            pr_event(
                Opened,
                PullRequest {
                    base_ref: "main".into(),
                    ..human_pr()
                },
            ),
            Known::default(),
            vec![NOT_AGENT.into()],
        ),
        (
            "unlabeled: task label removed",
            pr_event(Unlabeled, no_task.clone()),
            known_pr(2, state(true, Some("t1"))),
            vec![neutral.clone()],
        ),
        (
            "unlabeled, nothing changed",
            pr_event(Unlabeled, agent_pr()),
            known_pr(2, state(true, Some("t1"))),
            vec![
                "nothing: the change affects neither whether this PR is graded nor its task".into(),
            ],
        ),
        (
            "edited: the task line now names t2",
            pr_event(
                Edited,
                PullRequest {
                    body: Some("InfraDev-Task: t2".into()),
                    ..no_task.clone()
                },
            ),
            known_pr(2, state(true, Some("t1"))),
            vec![format!(
                "grade o/r#2 {SHA} t2 inst={INST} PullRequest(Edited)"
            )],
        ),
        (
            "edited, title only",
            pr_event(Edited, agent_pr()),
            known_pr(2, state(true, Some("t1"))),
            vec![
                "nothing: the change affects neither whether this PR is graded nor its task".into(),
            ],
        ),
        (
            "converted to draft",
            pr_event(
                ConvertedToDraft,
                PullRequest {
                    draft: true,
                    ..agent_pr()
                },
            ),
            known_pr(2, state(true, Some("t1"))),
            vec![DRAFT.into()],
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
        external_id: Some("1".into()),
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

fn job_of(number: u64) -> CheckOwner {
    CheckOwner::Job {
        number,
        head_sha: SHA.into(),
        task: "t1".into(),
    }
}

/// `known` with the check run's owner.
fn owned(owner: CheckOwner, known: Known) -> Known {
    Known {
        check_owner: Some(owner),
        ..known
    }
}

#[test]
fn check_table() {
    let grade = |n: u64, reason: &str| format!("grade o/r#{n} {SHA} t1 inst={INST} {reason}");
    let action = |identifier: &str| Event::CheckRunRequestedAction {
        repo: repo(),
        installation_id: Some(INST),
        head_sha: SHA.into(),
        external_id: Some("1".into()),
        identifier: identifier.into(),
        pull_numbers: vec![2],
    };
    let agent = state(true, Some("t1"));
    let human = state(false, Some("t1"));
    let approved = PullState {
        grade_requested: true,
        ..human.clone()
    };
    let draft = PullState {
        draft: true,
        ..agent.clone()
    };
    let suite_of_head = |rerequested| Event::CheckSuite {
        rerequested,
        repo: repo(),
        installation_id: Some(INST),
        head_sha: SHA.into(),
        pull_numbers: vec![],
    };
    let head_index = Known {
        pulls: BTreeMap::from([(3, agent.clone()), (4, agent.clone())]),
        head_prs: vec![4, 3, 4],
        ..Known::default()
    };
    let two_prs_one_head = Known {
        pulls: BTreeMap::from([(2, agent.clone()), (3, human.clone())]),
        ..Known::default()
    };
    let cases: Vec<(&str, Event, Known, Vec<String>)> = vec![
        (
            "rerun",
            check_run(vec![2]),
            owned(job_of(2), known_pr(2, agent.clone())),
            vec![grade(2, "CheckRunRerequested")],
        ),
        (
            "rerun grades its own job, not every PR of the head",
            check_run(vec![2, 3]),
            owned(job_of(2), two_prs_one_head),
            vec![grade(2, "CheckRunRerequested")],
        ),
        (
            "not one of our check runs",
            check_run(vec![2]),
            known_pr(2, agent.clone()),
            vec!["nothing: the check run belongs to no job InfraDev knows".into()],
        ),
        (
            "unknown PR",
            check_run(vec![]),
            owned(job_of(9), Known::default()),
            vec!["nothing: PR #9 is not in the store".into()],
        ),
        (
            "head moved on",
            check_run(vec![2]),
            owned(
                job_of(2),
                known_pr(
                    2,
                    PullState {
                        head_sha: "bbbb".into(),
                        ..agent.clone()
                    },
                ),
            ),
            vec![format!(
                "nothing: PR #2 moved on to bbbb; {SHA} is superseded"
            )],
        ),
        (
            "a job of another head",
            check_run(vec![2]),
            owned(
                CheckOwner::Job {
                    number: 2,
                    head_sha: "cccc".into(),
                    task: "t1".into(),
                },
                known_pr(2, agent.clone()),
            ),
            vec![format!(
                "nothing: the check run is on {SHA}, its job graded cccc"
            )],
        ),
        (
            "closed",
            check_run(vec![2]),
            owned(
                job_of(2),
                known_pr(
                    2,
                    PullState {
                        open: false,
                        ..agent.clone()
                    },
                ),
            ),
            vec!["nothing: PR #2 is closed".into()],
        ),
        (
            "rerun of a human PR nobody approved",
            check_run(vec![2]),
            owned(job_of(2), known_pr(2, human.clone())),
            vec![format!("nothing: PR #2: {}", &NOT_AGENT[9..])],
        ),
        (
            "rerun of an approved human PR",
            check_run(vec![2]),
            owned(job_of(2), known_pr(2, approved.clone())),
            vec![grade(2, "CheckRunRerequested")],
        ),
        (
            "rerun on a draft",
            check_run(vec![2]),
            owned(job_of(2), known_pr(2, draft.clone())),
            vec![format!("nothing: PR #2: {}", &DRAFT[9..])],
        ),
        (
            "rerun after the task changed",
            check_run(vec![2]),
            owned(job_of(2), known_pr(2, state(true, Some("t2")))),
            vec![
                r#"nothing: PR #2 no longer names task "t1"; its own task is graded on a push"#
                    .into(),
            ],
        ),
        (
            "rerun of the no-task check, still no task",
            check_run(vec![2]),
            owned(
                CheckOwner::NoTask { number: 2 },
                known_pr(2, state(true, None)),
            ),
            vec![format!("neutral o/r#2 {SHA} inst={INST}")],
        ),
        (
            "rerun of the no-task check, now with a task",
            check_run(vec![2]),
            owned(CheckOwner::NoTask { number: 2 }, known_pr(2, agent.clone())),
            vec![grade(2, "CheckRunRerequested")],
        ),
        (
            "no installation",
            Event::CheckRunRerequested {
                repo: repo(),
                installation_id: None,
                head_sha: SHA.into(),
                external_id: Some("1".into()),
                pull_numbers: vec![2],
            },
            owned(job_of(2), known_pr(2, agent.clone())),
            vec!["nothing: no App installation for this repository".into()],
        ),
        (
            "regrade button",
            action("regrade"),
            owned(job_of(2), known_pr(2, agent.clone())),
            vec![grade(2, "RegradeButton")],
        ),
        (
            "regrade button on a human PR nobody approved",
            action("regrade"),
            owned(job_of(2), known_pr(2, human.clone())),
            vec![format!("nothing: PR #2: {}", &NOT_AGENT[9..])],
        ),
        (
            "other button",
            action("lgtm|26764"),
            owned(job_of(2), known_pr(2, agent.clone())),
            vec![r#"nothing: unknown check run action "lgtm|26764""#.into()],
        ),
        (
            "suite via head index",
            suite_of_head(true),
            head_index.clone(),
            vec![
                grade(3, "CheckSuiteRerequested"),
                grade(4, "CheckSuiteRerequested"),
            ],
        ),
        (
            "no PR for the suite's head",
            suite_of_head(false),
            Known::default(),
            vec![format!("nothing: no known pull request has head {SHA}")],
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
            known_pr(2, approved),
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
fn external_ids() {
    assert_eq!(ExternalId::parse("42"), Some(ExternalId::Job(42)));
    assert_eq!(ExternalId::parse("no-task:7"), Some(ExternalId::NoTask(7)));
    for theirs in ["", "0", "-3", "job-1", "no-task:", "no-task:x", "ci/build"] {
        assert_eq!(ExternalId::parse(theirs), None, "{theirs:?}");
    }
}

#[test]
fn resync_table() {
    let policy = policy();
    let settings = Settings {
        policy: &policy,
        known_tasks: TASKS,
    };
    let run = |pr: PullRequest, known: Known| -> Vec<String> {
        decide_resync(&repo(), INST, &pr, &settings, &known)
            .decisions
            .iter()
            .map(summary)
            .collect()
    };
    let no_task = PullRequest {
        base_ref: "main".into(),
        ..agent_pr()
    };
    let cases: Vec<(&str, PullRequest, Known, Vec<String>)> = vec![
        (
            "never seen",
            agent_pr(),
            Known::default(),
            vec![format!("grade o/r#2 {SHA} t1 inst={INST} Resync")],
        ),
        (
            "a new head",
            agent_pr(),
            known_pr(
                2,
                PullState {
                    head_sha: "old".into(),
                    ..state(true, Some("t1"))
                },
            ),
            vec![format!("grade o/r#2 {SHA} t1 inst={INST} Resync")],
        ),
        (
            "seen as it is",
            agent_pr(),
            known_pr(2, state(true, Some("t1"))),
            vec!["nothing: unchanged since InfraDev last saw it".into()],
        ),
        (
            "without a task",
            no_task.clone(),
            Known::default(),
            vec![format!("neutral o/r#2 {SHA} inst={INST}")],
        ),
        (
            "without a task, seen",
            no_task,
            known_pr(2, state(true, None)),
            vec!["nothing: unchanged since InfraDev last saw it".into()],
        ),
        (
            "a human's",
            human_pr(),
            Known::default(),
            vec![format!("waiting o/r#2 {SHA} inst={INST}")],
        ),
        (
            "a human's, seen",
            human_pr(),
            known_pr(2, state(false, Some("t1"))),
            vec![NOT_AGENT.into()],
        ),
        (
            "closed meanwhile",
            PullRequest {
                state_open: false,
                ..agent_pr()
            },
            known_pr(2, state(true, Some("t1"))),
            vec!["cancel o/r#2".into()],
        ),
    ];
    for (name, pr, known, want) in cases {
        assert_eq!(run(pr, known), want, "{name}");
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
        (
            "help, for anyone",
            comment(true, "/infradev help", Some(INST)),
            vec![
                "react o/r comment=77 +1".into(),
                format!("reply o/r#2 inst={INST}"),
            ],
        ),
        (
            "help and a command",
            comment(true, "/infradev help\n/infradev cancel", Some(INST)),
            vec![
                "react o/r comment=77 +1".into(),
                format!("reply o/r#2 inst={INST}"),
                ask("Cancel"),
            ],
        ),
    ];
    for (name, event, want) in cases {
        assert_eq!(run(&event, &Known::default()), want, "{name}");
    }
}

#[test]
fn help_names_every_command_and_the_button() {
    let help = help_text();
    for command in Command::ALL {
        assert!(help.contains(&format!("`{command}`")), "{help}");
    }
    assert!(help.contains("**Re-grade**"), "{help}");
    // Read back as a comment, it asks for nothing.
    assert_eq!(
        run(&comment(true, &help, Some(INST)), &Known::default()),
        vec!["nothing: no /infradev command in the comment"]
    );
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
        "@bob I did not understand:\n- unknown sub-command `merge`: expected grade, regrade, cancel or help\n- `/infradev` needs a sub-command: grade, regrade, cancel or help\n\nCommands: `/infradev grade`, `/infradev regrade`, `/infradev cancel`, `/infradev help`."
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
    let react = "react o/r comment=77 +1".to_owned();
    let agent = state(true, Some("t1"));
    // Name, command, permitted, stored state, decisions.
    type Case = (&'static str, Command, bool, Option<PullState>, Vec<String>);
    let cases: Vec<Case> = vec![
        (
            "grade",
            Command::Grade,
            true,
            Some(state(false, Some("t1"))),
            vec![react.clone(), grade("Grade"), reply.clone()],
        ),
        (
            "regrade",
            Command::Regrade,
            true,
            Some(agent.clone()),
            vec![react.clone(), grade("Regrade"), reply.clone()],
        ),
        (
            "grade a draft",
            Command::Grade,
            true,
            Some(PullState {
                draft: true,
                ..agent.clone()
            }),
            vec![react.clone(), grade("Grade"), reply.clone()],
        ),
        (
            "cancel",
            Command::Cancel,
            true,
            Some(agent.clone()),
            vec![react.clone(), "cancel o/r#2".into(), reply.clone()],
        ),
        (
            "cancel, PR unknown",
            Command::Cancel,
            true,
            None,
            vec![react.clone(), "cancel o/r#2".into(), reply.clone()],
        ),
        (
            "help",
            Command::Help,
            true,
            None,
            vec![react.clone(), reply.clone()],
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
    let graded = decide_command(&request(Command::Grade), true, Some(&agent));
    let [_, _, Decision::Reply { message, .. }] = &graded[..] else {
        panic!("{graded:?}")
    };
    assert_eq!(
        message,
        &format!(
            "@bob grading `{SHA}` against task `t1`; every new head of this pull request will be graded too."
        )
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
                repositories: vec!["o/r".into()],
            },
            r#"resync inst=1 ["o/r"]"#,
        ),
        (
            Event::Installation {
                action: "unsuspend".into(),
                installation_id: 1,
                repositories: vec![],
            },
            "resync inst=1 []",
        ),
        (
            Event::Installation {
                action: "deleted".into(),
                installation_id: 1,
                repositories: vec!["o/r".into()],
            },
            "withdraw inst=1 []",
        ),
        (
            Event::InstallationRepositories {
                installation_id: 1,
                added: vec!["o/r".into()],
                removed: vec![],
            },
            r#"resync inst=1 ["o/r"]"#,
        ),
        (
            Event::InstallationRepositories {
                installation_id: 1,
                added: vec![],
                removed: vec!["o/r".into()],
            },
            r#"withdraw inst=1 ["o/r"]"#,
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
    let workflow_run = |action: &str, status: &str, conclusion: Option<&str>| Event::WorkflowRun {
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
