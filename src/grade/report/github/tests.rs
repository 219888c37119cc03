use super::*;

#[test]
fn completed_checks_name_the_button_and_the_commands() {
    let output = with_commands(infra_output(GradeFault::Infra));
    for what in [
        "**Re-grade**",
        "/infradev regrade",
        "/infradev cancel",
        "/infradev grade",
        "/infradev help",
    ] {
        assert!(output.summary.contains(what), "{what}: {}", output.summary);
    }
    let mut full = infra_output(GradeFault::NoReport);
    full.summary = "a".repeat(CHECK_TEXT_LIMIT - 10);
    assert_eq!(
        with_commands(full.clone()).summary,
        full.summary,
        "no room: unchanged"
    );
}
use crate::grade::redact::Redactor;
use crate::grade::report::GuardFlag;
use crate::grade::report::fixtures::{
    PROBE_SOURCE, build_failure, flaky, infra_error, not_applied, probes_reject, resolved,
};
use crate::grading::Outcome;

const HEAD: &str = "abcdef0123456789abcdef0123456789abcdef01";

/// One check output as text, for snapshots.
fn show(output: &CheckOutput) -> String {
    let mut out = format!("title: {}\n--- summary\n{}", output.title, output.summary);
    if let Some(text) = &output.text {
        let _ = write!(out, "--- text\n{text}");
    }
    for a in &output.annotations {
        let _ = write!(
            out,
            "--- annotation {}:{}-{} {:?}\n{}\n{}\n",
            a.path, a.start_line, a.end_line, a.level, a.title, a.message
        );
    }
    out
}

fn every_output(report: &Report) -> Vec<String> {
    let check = check_run_output(report);
    let mut all = vec![check.title, check.summary, check.text.unwrap_or_default()];
    all.extend(
        check
            .annotations
            .into_iter()
            .flat_map(|a| [a.path, a.title, a.message]),
    );
    let history = [("0123456789abcdef".to_owned(), "unresolved".to_owned())];
    all.push(sticky_comment(HEAD, Some(report), "Graded.", &history));
    all.extend(
        step_annotations(report)
            .into_iter()
            .flat_map(|a| [a.file.unwrap_or_default(), a.title, a.message]),
    );
    all
}

#[test]
fn check_resolved() {
    insta::assert_snapshot!(show(&check_run_output(&resolved())), @r#"
    title: Resolved: passes all 2 official tests and 2 hidden probes
    --- summary
    **Resolved**: passes all 2 official tests and 2 hidden probes

    | | passed | not passed |
    |---|---:|---:|
    | official tests | 2 | 0 |
    | hidden probes | 2 | 0 |

    Task `shard-adam-state` (example/opt#123) · head abcdef0 · docker executor
    "#);
}

#[test]
fn check_probes_reject() {
    insta::assert_snapshot!(show(&check_run_output(&probes_reject())), @r#"
    title: Unresolved: passes the official tests, rejected by 2 hidden probes (state 1, memory 1)
    --- summary
    **Unresolved**: passes the official tests, rejected by 2 hidden probes (state 1, memory 1)

    > Every official test passes, but the hidden probes reject the change: the official tests do not check everything the task asks for.

    | | passed | not passed |
    |---|---:|---:|
    | official tests | 2 | 0 |
    | hidden probes | 0 | 2 |

    | failure category | official | probes | what it means |
    |---|---:|---:|---|
    | state | 0 | 1 | wrong state across calls, steps, aborts, failures or ranks |
    | memory | 0 | 1 | killed for memory, or over a declared peak-memory budget |

    Task `shard-adam-state` (example/opt#123) · head abcdef0 · local executor
    --- text
    ## What did not pass

    - **state**: hidden probe `test_state.py::test_resume_restores_step_count`
      - requires: A resumed optimizer continues from the saved step count.
      - `AssertionError: [redacted: matches hidden probe source]`
    - **memory**: hidden probe `test_mem.py::test_history_is_bounded`
      - requires: Optimizer history stays under 32 MB.
      - `memory budget: measured 40.5 over limit 32; infradev_pytest.MemoryBudgetExceeded: peak 40.5 MB over budget 32.0 MB`

    ## Executor limits

    This run used the `local` executor, which could not guarantee:

    - no network isolation
    - no memory limit (OOM kills not detected)
    "#);
}

#[test]
fn check_build_failure() {
    insta::assert_snapshot!(show(&check_run_output(&build_failure())), @r#"
    title: Unresolved: fails 2 of 2 official tests and 2 of 2 hidden probes (build 4)
    --- summary
    **Unresolved**: fails 2 of 2 official tests and 2 of 2 hidden probes (build 4)

    | | passed | not passed |
    |---|---:|---:|
    | official tests | 0 | 2 |
    | hidden probes | 0 | 2 |

    | failure category | official | probes | what it means |
    |---|---:|---:|---|
    | build | 2 | 2 | the change does not apply, does not import, or has a syntax error |

    **Neutralised files.** These changed files could steer pytest or the interpreter, so they were restored to the base version (or removed) before grading:

    - `conftest.py`: pytest configuration; restored to base

    Task `shard-adam-state` (example/opt#123) · head abcdef0 · docker executor
    --- text
    ## What did not pass

    - **build**: FAIL_TO_PASS test `tests/test_opt.py::test_shard_state`
      - `SyntaxError: invalid syntax (opt.py, line 12)`
    - **build**: PASS_TO_PASS test `tests/test_opt.py::test_step`
      - `SyntaxError: invalid syntax (opt.py, line 12)`
    - **build**: hidden probe `test_state.py::test_resume_restores_step_count`
      - requires: A resumed optimizer continues from the saved step count.
      - `SyntaxError: invalid syntax (opt.py, line 12)`
    - **build**: hidden probe `test_mem.py::test_history_is_bounded`
      - requires: Optimizer history stays under 32 MB.
      - `SyntaxError: invalid syntax (opt.py, line 12)`

    --- annotation conftest.py:1-1 Warning
    Neutralised by InfraDev
    pytest configuration; restored to base. This file could steer pytest or the interpreter, so InfraDev restored it to the base version (or removed it) before grading; the change here had no effect on the grade.
    "#);
}

#[test]
fn check_infra_error() {
    let report = infra_error();
    assert_eq!(conclusion_for(report.grade.verdict), "neutral");
    insta::assert_snapshot!(show(&check_run_output(&report)), @r#"
    title: Error: infrastructure error in the probes phase; our fault, not the PR's
    --- summary
    **Error**: infrastructure error in the probes phase; our fault, not the PR's

    > This is our fault, not the pull request's: the grade says nothing about the change. **Re-grade** on this check grades the head again.

    | | passed | not passed |
    |---|---:|---:|
    | official tests | 2 | 0 |
    | hidden probes | 0 | 2 |

    | failure category | official | probes | what it means |
    |---|---:|---:|---|
    | infra | 0 | 2 | our fault (Docker, images or the runner failed), not the PR's |

    Task `shard-adam-state` (example/opt#123) · head abcdef0 · docker executor
    --- text
    ## What did not pass

    - **infra**: hidden probe `test_state.py::test_resume_restores_step_count`
      - requires: A resumed optimizer continues from the saved step count.
      - `never ran`
    - **infra**: hidden probe `test_mem.py::test_history_is_bounded`
      - requires: Optimizer history stays under 32 MB.
      - `never ran`

    ## Phases

    - probes: infrastructure error (ours, not the PR's); operators see the details on the grade page
    "#);
}

#[test]
fn check_not_applied() {
    insta::assert_snapshot!(show(&check_run_output(&not_applied())), @r#"
    title: Unresolved: the change does not apply to the task's base commit
    --- summary
    **Unresolved**: the change does not apply to the task's base commit

    | | passed | not passed |
    |---|---:|---:|
    | official tests | 0 | 2 |
    | hidden probes | 0 | 2 |

    | failure category | official | probes | what it means |
    |---|---:|---:|---|
    | build | 2 | 2 | the change does not apply, does not import, or has a syntax error |

    Task `shard-adam-state` (example/opt#123) · head abcdef0 · docker executor
    --- text
    ## The change does not apply

    `head abcdef012345 does not contain base commit 1a2b3c4d5e6f`

    Nothing ran.

    ## What did not pass

    - **build**: FAIL_TO_PASS test `tests/test_opt.py::test_shard_state`
      - `never ran`
    - **build**: PASS_TO_PASS test `tests/test_opt.py::test_step`
      - `never ran`
    - **build**: hidden probe `test_state.py::test_resume_restores_step_count`
      - requires: A resumed optimizer continues from the saved step count.
      - `never ran`
    - **build**: hidden probe `test_mem.py::test_history_is_bounded`
      - requires: Optimizer history stays under 32 MB.
      - `never ran`
    "#);
}

#[test]
fn conclusions() {
    assert_eq!(conclusion_for(Verdict::Resolved), "success");
    assert_eq!(conclusion_for(Verdict::Unresolved), "failure");
    assert_eq!(conclusion_for(Verdict::Error), "neutral");
    assert_eq!(conclusion_for(probes_reject().grade.verdict), "failure");
}

#[test]
fn title_counts_hidden_probes() {
    let mut report = probes_reject();
    let extra = report.grade.tests[2].clone();
    for i in 0..3 {
        let mut test = extra.clone();
        test.evidence.id = format!("test_state.py::test_extra_{i}");
        report.grade.tests.push(test);
        report.grade.counts.probes.add(Category::State);
        report.grade.counts.total.add(Category::State);
    }
    let mut time = extra.clone();
    time.evidence.id = "test_time.py::test_step_is_fast".into();
    time.category = Some(Category::Time);
    report.grade.tests.push(time);
    report.grade.counts.probes.add(Category::Time);
    report.grade.counts.total.add(Category::Time);
    assert_eq!(
        check_run_output(&report).title,
        "Unresolved: passes the official tests, rejected by 6 hidden probes \
         (state 4, memory 1, time 1)"
    );
}

#[test]
fn infra_check() {
    // What git said, with the grader's work directory and the internal clone URL in it.
    let error = "cannot fetch the pull request: cannot fetch 0123 from \
                 file:///var/lib/infradev/gh/fork/repo.git: fatal: remote error: upload-pack: \
                 not our ref 0123 (in /var/lib/infradev/work/mirrors/o/r)";
    let output = infra_output(GradeFault::of_error(error));
    insta::assert_snapshot!(show(&output), @r#"
    title: Error: infrastructure fault, not the pull request's
    --- summary
    InfraDev could not grade this head because of a fault on our side. **This is not the pull request's fault** and says nothing about the change.

    What went wrong: the pull request's head could not be fetched.

    Nothing is needed from the pull request. **Re-grade** on this check grades the head again. Operators see the details on the grade page.
    "#);
    for internal in ["/var/lib", "file://", "fatal", "upload-pack", "0123"] {
        assert!(!show(&output).contains(internal), "{internal}");
    }
}

#[test]
fn every_fault_has_a_fixed_phrase_and_is_found_by_its_prefix() {
    for fault in [GradeFault::FetchHead, GradeFault::Task, GradeFault::Infra] {
        let error = format!("{}: whatever git said", fault.prefix());
        assert_eq!(GradeFault::of_error(&error), fault);
        assert!(!fault.phrase().is_empty());
    }
    assert_eq!(
        GradeFault::of_error("the runner vanished"),
        GradeFault::NoReport
    );
}

#[test]
fn a_grade_of_a_task_no_longer_named_says_so() {
    let now = task_changed_output("t1", Some("t2"));
    assert_eq!(now.title, "Cancelled: the pull request now names task t2");
    assert!(now.summary.contains("`t1`") && now.summary.contains("`t2`"));
    let none = task_changed_output("t1", None);
    assert_eq!(
        none.title,
        "Cancelled: the pull request no longer names a task"
    );
}

#[test]
fn no_task_check() {
    let output = no_task_output(42, &["shard-adam-state", "paged-kv-cache"]);
    insta::assert_snapshot!(show(&output), @r#"
    title: No task: PR #42 names no InfraDev task
    --- summary
    InfraDev would grade pull request #42, but it does not say which task it solves, so it was not graded. Name the task in any one of three ways:

    1. **Base branch** `infradev/<task-id>`: open the PR against that branch.
    2. **PR body**: a line `InfraDev-Task: <task-id>`.
    3. **Label** `task:<task-id>` on the PR.

    If several name different tasks, the first in this order wins. Each takes effect at once.

    Known tasks (2):

    - `shard-adam-state`
    - `paged-kv-cache`
    "#);
}

#[test]
fn unknown_task_check() {
    let output = no_task_output_for(42, Some("shard-adam"), &["shard-adam-state"]);
    assert_eq!(output.title, "No task: PR #42 names an unknown task");
    assert!(output.summary.starts_with(
        "InfraDev would grade pull request #42, but it names the task `shard-adam`, which \
         InfraDev does not have, so it was not graded."
    ));
}

#[test]
fn no_task_with_many_tasks_stays_under_the_limit() {
    let tasks: Vec<String> = (0..20_000).map(|i| format!("task-{i:05}")).collect();
    let tasks: Vec<&str> = tasks.iter().map(String::as_str).collect();
    let output = no_task_output(7, &tasks);
    assert!(output.summary.len() <= CHECK_TEXT_LIMIT);
    assert!(output.summary.contains("_Truncated: "));
    assert!(output.summary.contains("`task-00000`"));
}

#[test]
fn a_withdrawn_grade_says_why_and_blames_no_one() {
    let output = withdrawn_output();
    assert_eq!(output.title, "Cancelled");
    assert!(
        output.summary.contains("/infradev cancel"),
        "{}",
        output.summary
    );
    assert!(output.text.is_none() && output.annotations.is_empty());
}

#[test]
fn queued_in_progress_cancelled() {
    let outputs = [
        queued_output(),
        in_progress_output(),
        cancelled_output("fedcba9876543210fedcba9876543210fedcba98"),
    ];
    let shown: Vec<String> = outputs.iter().map(show).collect();
    insta::assert_snapshot!(shown.join("\n"), @r#"
    title: Queued
    --- summary
    Waiting for a grader. The official tests and the hidden probes run in a sandbox once one is free.
    title: Grading
    --- summary
    Running the task's official tests and hidden probes against this head in a sandbox.
    title: Cancelled: superseded by fedcba9
    --- summary
    A newer commit, fedcba9, was pushed to this pull request, so this head is no longer graded. See the InfraDev check on fedcba9.
    "#);
}

#[test]
fn sticky_probes_reject() {
    let history = [
        (HEAD.to_owned(), "in progress".to_owned()),
        (
            "1111111222222233333334444444".to_owned(),
            "unresolved".to_owned(),
        ),
        (
            "5555555666666677777778888888".to_owned(),
            "error".to_owned(),
        ),
    ];
    let comment = sticky_comment(HEAD, Some(&probes_reject()), "Graded in 42 s.", &history);
    insta::assert_snapshot!(comment, @r#"
    <!-- infradev:sticky -->
    ### InfraDev grade for abcdef0

    **Unresolved**: passes the official tests, rejected by 2 hidden probes (state 1, memory 1)

    Graded in 42 s.

    **Failure categories**

    - **state** (1 hidden probe): wrong state across calls, steps, aborts, failures or ranks. *Your own tests should have checked:* state across calls, steps, aborts, failures and ranks.
    - **memory** (1 hidden probe): killed for memory, or over a declared peak-memory budget. *Your own tests should have checked:* peak memory under a budget across many steps; measure it in your tests with tracemalloc / torch.cuda.max_memory_allocated.

    <details><summary>2 hidden probes that did not pass</summary>

    - **state**: hidden probe `test_state.py::test_resume_restores_step_count`
      - requires: A resumed optimizer continues from the saved step count.
      - `AssertionError: [redacted: matches hidden probe source]`
    - **memory**: hidden probe `test_mem.py::test_history_is_bounded`
      - requires: Optimizer history stays under 32 MB.
      - `memory budget: measured 40.5 over limit 32; infradev_pytest.MemoryBudgetExceeded: peak 40.5 MB over budget 32.0 MB`

    </details>

    Previous heads: 1111111 unresolved · 5555555 error

    <sub>This comment is edited for every new head. Hidden probes are never shown, only what each one requires.</sub>
    "#);
}

#[test]
fn sticky_resolved() {
    let comment = sticky_comment(HEAD, Some(&resolved()), "", &[]);
    insta::assert_snapshot!(comment, @r#"
    <!-- infradev:sticky -->
    ### InfraDev grade for abcdef0

    **Resolved**: passes all 2 official tests and 2 hidden probes

    <sub>This comment is edited for every new head. Hidden probes are never shown, only what each one requires.</sub>
    "#);
}

#[test]
fn sticky_build_failure() {
    let comment = sticky_comment(HEAD, Some(&build_failure()), "", &[]);
    insta::assert_snapshot!(comment, @r#"
    <!-- infradev:sticky -->
    ### InfraDev grade for abcdef0

    **Unresolved**: fails 2 of 2 official tests and 2 of 2 hidden probes (build 4)

    **Failure categories**

    - **build** (2 official tests, 2 hidden probes): the change does not apply, does not import, or has a syntax error. *Your own tests should have checked:* that the change applies and imports.

    <details><summary>4 tests and probes that did not pass</summary>

    - **build**: FAIL_TO_PASS test `tests/test_opt.py::test_shard_state`
      - `SyntaxError: invalid syntax (opt.py, line 12)`
    - **build**: PASS_TO_PASS test `tests/test_opt.py::test_step`
      - `SyntaxError: invalid syntax (opt.py, line 12)`
    - **build**: hidden probe `test_state.py::test_resume_restores_step_count`
      - requires: A resumed optimizer continues from the saved step count.
      - `SyntaxError: invalid syntax (opt.py, line 12)`
    - **build**: hidden probe `test_mem.py::test_history_is_bounded`
      - requires: Optimizer history stays under 32 MB.
      - `SyntaxError: invalid syntax (opt.py, line 12)`

    </details>

    **Neutralised files** (restored to the base version before grading):

    - `conftest.py`: pytest configuration; restored to base

    <sub>This comment is edited for every new head. Hidden probes are never shown, only what each one requires.</sub>
    "#);
}

#[test]
fn sticky_infra_never_blames_the_agent() {
    let comment = sticky_comment(HEAD, Some(&infra_error()), "Retrying.", &[]);
    assert!(comment.contains("this is our fault, the grade will be retried"));
    assert!(!comment.contains("Your own tests should have checked"));
    assert!(!comment.contains("failing"), "{comment}");
    assert!(!comment.contains("Failure categories"), "{comment}");
    insta::assert_snapshot!(comment, @r#"
    <!-- infradev:sticky -->
    ### InfraDev grade for abcdef0

    **Error**: infrastructure error in the probes phase; our fault, not the PR's

    Retrying.

    **What went wrong**

    - **infra** (2 hidden probes could not be run): our fault (Docker, images or the runner failed), not the PR's. *Your tests:* nothing: this is our fault, the grade will be retried.

    <details><summary>2 hidden probes that did not pass</summary>

    - **infra**: hidden probe `test_state.py::test_resume_restores_step_count`
      - requires: A resumed optimizer continues from the saved step count.
      - `never ran`
    - **infra**: hidden probe `test_mem.py::test_history_is_bounded`
      - requires: Optimizer history stays under 32 MB.
      - `never ran`

    </details>

    <sub>This comment is edited for every new head. Hidden probes are never shown, only what each one requires.</sub>
    "#);
}

#[test]
fn sticky_without_report() {
    let history = [(
        "1111111222222233333334444444".to_owned(),
        "unresolved".to_owned(),
    )];
    let comment = sticky_comment(HEAD, None, "Grading this head…", &history);
    insta::assert_snapshot!(comment, @r#"
    <!-- infradev:sticky -->
    ### InfraDev grade for abcdef0

    Grading this head…

    Previous heads: 1111111 unresolved

    <sub>This comment is edited for every new head. Hidden probes are never shown, only what each one requires.</sub>
    "#);
}

#[test]
fn sticky_history_is_bounded() {
    let history: Vec<(String, String)> = (0..25)
        .map(|i| (format!("{i:07x}aaaa"), "unresolved".to_owned()))
        .collect();
    let comment = sticky_comment(HEAD, None, "Queued.", &history);
    let line = comment
        .lines()
        .find(|l| l.starts_with("Previous heads:"))
        .unwrap();
    assert!(line.ends_with("· and 15 earlier"), "{line}");
}

#[test]
fn replies() {
    insta::assert_snapshot!(
        reply_not_permitted("some-agent[bot]", "regrade"),
        @r#"@some-agent[bot] you are not permitted to run `/infradev regrade` on this repository; ask a maintainer to run it."#
    );
    insta::assert_snapshot!(
        reply_unknown_command("octocat", "rerun `all`", &["regrade", "help"]),
        @r#"@octocat unknown command `` /infradev rerun `all` ``. Known commands: `/infradev regrade`, `/infradev help`."#
    );
}

#[test]
fn canaries_never_leak() {
    // A message that carries a canary on its own, next to the fixtures' leaks.
    let mut planted = probes_reject();
    planted.grade.tests[3].evidence.message =
        Some("history kept PROBE-SECRET-mem-91c2 alive".into());
    planted.flags.push(GuardFlag {
        path: "opt/sitecustomize.py".into(),
        reason: "sitecustomize.py is imported by every Python interpreter at startup".into(),
    });
    let before = every_output(&planted).join("\n");
    assert!(
        before.contains("PROBE-SECRET-mem-91c2"),
        "the fixture must be able to leak"
    );
    Redactor::from_sources(&[("test_state.py".into(), PROBE_SOURCE.into())])
        .redact_report(&mut planted);

    let source_lines: Vec<&str> = PROBE_SOURCE
        .lines()
        .map(str::trim)
        .filter(|l| l.len() >= 12)
        .collect();
    let reports = [
        resolved(),
        probes_reject(),
        build_failure(),
        infra_error(),
        not_applied(),
        planted,
    ];
    let infra = infra_output(GradeFault::of_error(
        "infrastructure error: lost the runner while PROBE-SECRET-x1 was in flight",
    ));
    assert!(!show(&infra).contains("PROBE-SECRET-"));
    for report in &reports {
        for output in every_output(report) {
            assert!(!output.contains("PROBE-SECRET-"), "{output}");
            assert!(!output.contains("SECRET_LR"), "{output}");
            for line in &source_lines {
                assert!(!output.contains(line), "{line:?} leaked in {output}");
            }
        }
    }
}

#[test]
fn submission_text_cannot_steer_the_markdown() {
    let mut report = probes_reject();
    report.grade.tests[2].evidence.message = Some(
        "@octocat see #1 <!-- infradev:sticky --> <img src=x> ``tick`` | cell\nsecond line".into(),
    );
    report.flags.push(GuardFlag {
        path: "a`b|c.pth".into(),
        reason: ".pth files run code at interpreter startup".into(),
    });
    let comment = sticky_comment(HEAD, Some(&report), "", &[]);
    assert!(comment.starts_with(STICKY_MARKER));
    assert_eq!(comment.matches(STICKY_MARKER).count(), 1);
    assert!(comment.contains(
        "```AssertionError: @octocat see #1 <!-- (marker) --> <img src=x> ``tick`` | \
         cell```"
    ));
    assert!(!comment.contains("second line"));
    assert!(comment.contains("- ``a`b|c.pth``: "));
    let check = check_run_output(&report);
    assert_eq!(check.annotations[0].path, "a`b|c.pth");
}

#[test]
fn outputs_stay_within_github_limits() {
    let mut report = probes_reject();
    let template = report.grade.tests[2].clone();
    for i in 0..5_000 {
        let mut test = template.clone();
        test.evidence.id = format!("test_state.py::test_case_{i:05}");
        test.evidence.message = Some("x".repeat(500));
        report.grade.tests.push(test);
        report.grade.counts.probes.add(Category::State);
        report.grade.counts.total.add(Category::State);
        report.probe_requirements.insert(
            format!("test_state.py::test_case_{i:05}"),
            "r".repeat(1_000),
        );
    }
    for i in 0..2_000 {
        report.flags.push(GuardFlag {
            path: format!("pkg{i}/conftest.py"),
            reason: "conftest.py is loaded by pytest before any test and can rewrite results"
                .into(),
        });
    }
    let check = check_run_output(&report);
    assert!(check.summary.len() <= CHECK_TEXT_LIMIT);
    let text = check.text.as_deref().unwrap();
    assert!(text.len() <= CHECK_TEXT_LIMIT);
    assert!(text.contains("_Truncated: "));
    assert!(text.ends_with("characters._\n\n"));
    assert!(check.summary.contains("_Truncated: "));
    assert!(check.title.chars().count() <= TITLE_CHARS);
    assert_eq!(check.annotations.len(), 2_000);
    assert_eq!(check.annotation_batches().count(), 40);
    assert!(
        check
            .annotation_batches()
            .all(|b| b.len() <= ANNOTATIONS_PER_REQUEST)
    );
    assert!(
        check
            .annotations
            .iter()
            .all(|a| a.title.chars().count() <= ANNOTATION_TITLE_LIMIT)
    );

    let history: Vec<(String, String)> = (0..25)
        .map(|i| (format!("not-a-sha-{i}-{}", "z".repeat(80)), "v".repeat(100)))
        .collect();
    let comment = sticky_comment(HEAD, Some(&report), "Graded.", &history);
    assert!(comment.len() <= COMMENT_LIMIT);
    assert!(comment.contains("_Truncated: "));
    assert_eq!(comment.matches("<details>").count(), 1);
    assert_eq!(comment.matches("</details>").count(), 1);
    assert!(comment.contains("· and 15 earlier"));
    assert!(comment.ends_with("what each one requires.</sub>\n"));
}

#[test]
fn serialises_to_the_checks_api_shape() {
    let output = check_run_output(&build_failure());
    let json = serde_json::to_value(&output).unwrap();
    assert_eq!(json["annotations"][0]["annotation_level"], "warning");
    assert_eq!(json["annotations"][0]["path"], "conftest.py");
    assert_eq!(json["annotations"][0]["start_line"], 1);
    let queued = serde_json::to_value(queued_output()).unwrap();
    assert!(queued.get("text").is_none());
    let action = serde_json::to_value(regrade_action()).unwrap();
    assert_eq!(action["identifier"], REGRADE_ACTION);
    let a = regrade_action();
    assert!(a.label.len() <= 20 && a.description.len() <= 40 && a.identifier.len() <= 20);
}

#[test]
fn step_annotations_place_what_they_can() {
    let shown: Vec<String> = step_annotations(&build_failure())
        .iter()
        .map(|a| format!("{:?} {:?}:{:?} {}", a.level, a.file, a.line, a.title))
        .collect();
    insta::assert_snapshot!(shown.join("\n"), @r#"
    Warning Some("conftest.py"):Some(1) Neutralised by InfraDev
    Failure Some("tests/test_opt.py"):None InfraDev build: FAIL_TO_PASS test tests/test_opt.py::test_shard_state
    Failure Some("tests/test_opt.py"):None InfraDev build: PASS_TO_PASS test tests/test_opt.py::test_step
    Failure None:None InfraDev build: hidden probe test_state.py::test_resume_restores_step_count
    Failure None:None InfraDev build: hidden probe test_mem.py::test_history_is_bounded
    "#);
    let infra = step_annotations(&infra_error());
    assert_eq!(infra.len(), 1);
    assert_eq!(infra[0].level, AnnotationLevel::Warning);
    assert!(step_annotations(&resolved()).is_empty());
}

#[test]
fn not_run_tests_are_listed_as_never_ran() {
    let report = infra_error();
    let text = check_run_output(&report).text.unwrap();
    assert_eq!(
        report
            .grade
            .tests
            .iter()
            .filter(|t| t.evidence.outcome == Outcome::NotRun)
            .count(),
        text.matches("`never ran`").count()
    );
}

#[test]
fn flaky_results_are_named_in_the_check_run_and_the_comment() {
    let r = flaky();
    let check = check_run_output(&r);
    assert!(check.title.starts_with("Unresolved"), "{}", check.title);
    insta::assert_snapshot!("check_flaky", show(&check));
    let comment = sticky_comment(HEAD, Some(&r), "Graded.", &[]);
    assert!(
        comment.contains("**Flaky:** 1 test or probe failed and then passed"),
        "{comment}"
    );
    assert!(
        comment.contains("flaky: failed, then passed on attempt 2 (not a pass)"),
        "{comment}"
    );
}
