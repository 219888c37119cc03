//! What the GitHub App posts: the check run's output and the one sticky PR comment (pure).
//!
//! Like every renderer here, these trust that the [`Report`] was redacted before they see it:
//! they only ever show what the report already carries (categories, counts, probe requirement
//! texts, redacted one-line failure messages), never probe source and never sandbox output.
//!
//! Text that the submission controls (failure messages, test ids, file names) is shown in
//! Markdown code spans, so that it cannot mention people, link issues, inject HTML or break
//! the layout, and the sticky marker inside it is defused.
//!
//! GitHub's limits are kept: a check run's `summary` and `text` are at most
//! [`CHECK_TEXT_LIMIT`] characters, a comment body at most [`COMMENT_LIMIT`]. Outputs are
//! measured in bytes, which bounds characters too, and cut between whole blocks (list items,
//! table rows, sections) with a note saying how much was left out.

use std::fmt::Write;

use serde::Serialize;

use super::Report;
use super::summary::failure_message;
use crate::grading::{Category, Expectation, GradedTest, Kill, Verdict};
use crate::redact::Redactor;

/// The check run's name.
pub const CHECK_NAME: &str = "InfraDev";
/// The hidden marker the sticky comment starts with; the comment is found by it.
pub const STICKY_MARKER: &str = "<!-- infradev:sticky -->";
/// The identifier of the check run's one button.
pub const REGRADE_ACTION: &str = "regrade";
/// Most characters in a check run's `summary` or `text`.
pub const CHECK_TEXT_LIMIT: usize = 65_535;
/// Most characters in an issue comment's body.
pub const COMMENT_LIMIT: usize = 65_536;
/// Most annotations GitHub accepts in one create or update request; later updates append.
pub const ANNOTATIONS_PER_REQUEST: usize = 50;
/// Most characters in an annotation's title.
pub const ANNOTATION_TITLE_LIMIT: usize = 255;

/// Longest one-line title we produce. GitHub documents no limit; a long title is unreadable.
const TITLE_CHARS: usize = 200;
/// Longest requirement text shown per probe.
const REQUIREMENT_CHARS: usize = 400;
/// Longest phase, apply or infra note shown.
const NOTE_CHARS: usize = 300;
/// Room kept at the end of a limited output for closing tags, the sticky comment's footer
/// (at most [`HISTORY_SHOWN`] earlier heads) and the truncation note.
const RESERVE: usize = 2048;
/// Previous heads listed in the sticky comment.
const HISTORY_SHOWN: usize = 10;

/// A check run's `output` object. Serialises to GitHub's field names; send the annotations
/// in batches of [`ANNOTATIONS_PER_REQUEST`] (see [`CheckOutput::annotation_batches`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckOutput {
    pub title: String,
    pub summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    pub annotations: Vec<CheckAnnotation>,
}

impl CheckOutput {
    /// The annotations in request-sized batches.
    pub fn annotation_batches(&self) -> std::slice::Chunks<'_, CheckAnnotation> {
        self.annotations.chunks(ANNOTATIONS_PER_REQUEST)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckAnnotation {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    #[serde(rename = "annotation_level")]
    pub level: AnnotationLevel,
    pub title: String,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AnnotationLevel {
    Notice,
    Warning,
    Failure,
}

/// A check run button (`actions[]`): label ≤ 20, description ≤ 40, identifier ≤ 20 chars.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckAction {
    pub label: &'static str,
    pub description: &'static str,
    pub identifier: &'static str,
}

/// The one button on every completed InfraDev check run.
pub fn regrade_action() -> CheckAction {
    CheckAction {
        label: "Re-grade",
        description: "Grade this head again",
        identifier: REGRADE_ACTION,
    }
}

/// The check run conclusion for a verdict. An error is ours, so it is never a failure.
pub fn conclusion_for(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Resolved => "success",
        Verdict::Unresolved | Verdict::Tampered => "failure",
        Verdict::Error => "neutral",
    }
}

/// What a failure category means, in one clause.
pub fn category_meaning(category: Category) -> &'static str {
    match category {
        Category::Build => "the change does not apply, does not import, or has a syntax error",
        Category::Structural => "a missing or renamed interface, or a wrong signature",
        Category::State => "wrong state across calls, steps, aborts, failures or ranks",
        Category::Numerical => {
            "numbers disagree with an independent reference beyond the justified tolerance"
        }
        Category::Memory => "killed for memory, or over a declared peak-memory budget",
        Category::Time => "timed out, or over a declared wall-time budget",
        Category::Traffic => {
            "over a declared collective-communication budget (number of calls or bytes)"
        }
        Category::Infra => "our fault (Docker, images or the runner failed), not the PR's",
    }
}

/// What the agent's own tests should have checked to catch a category before we did.
pub fn category_advice(category: Category) -> &'static str {
    match category {
        Category::Build => "that the change applies and imports",
        Category::Structural => "the exact interfaces named in the task",
        Category::State => "state across calls, steps, aborts, failures and ranks",
        Category::Numerical => "agreement with an independent reference at a justified tolerance",
        Category::Memory => {
            "peak memory under a budget across many steps; measure it in your tests with \
             tracemalloc / torch.cuda.max_memory_allocated"
        }
        Category::Time => "complexity and wall time at realistic sizes",
        Category::Traffic => "number and size of collectives per step",
        Category::Infra => "nothing: this is our fault, the grade will be retried",
    }
}

/// The completed check run's output for a graded head. Use [`conclusion_for`] for the
/// conclusion.
pub fn check_run_output(report: &Report) -> CheckOutput {
    CheckOutput {
        title: clip(&title(report), TITLE_CHARS),
        summary: summary(report),
        text: details(report),
        annotations: annotations(report),
    }
}

/// A completed check (conclusion `neutral`) when grading failed for reasons of ours, after
/// retries, before any report existed. `message` is our error (its first line is shown); it
/// must not carry sandbox output. Canary tokens in it are masked all the same.
pub fn infra_output(message: &str) -> CheckOutput {
    let message = Redactor::default().redact(message);
    let mut summary = String::new();
    let _ = writeln!(
        summary,
        "InfraDev could not grade this head because of a fault on our side. **This is not the \
         pull request's fault** and says nothing about the change."
    );
    let _ = writeln!(summary, "\nWhat went wrong: {}", code(&message, NOTE_CHARS));
    let _ = writeln!(
        summary,
        "\nNothing is needed from the pull request. **Re-grade** on this check grades the head \
         again."
    );
    plain(
        "Error: infrastructure fault, not the pull request's".to_owned(),
        summary,
    )
}

/// A completed check (conclusion `neutral`) for an agent PR that names no task.
pub fn no_task_output(pr_number: u64, known_tasks: &[&str]) -> CheckOutput {
    no_task_output_for(pr_number, None, known_tasks)
}

/// [`no_task_output`] for a PR that names a task, `named`, that InfraDev does not have.
pub fn no_task_output_for(
    pr_number: u64,
    named: Option<&str>,
    known_tasks: &[&str],
) -> CheckOutput {
    let (title, why) = match named {
        Some(id) => (
            format!("No task: PR #{pr_number} names an unknown task"),
            format!(
                "names the task {}, which InfraDev does not have",
                code(id, 100)
            ),
        ),
        None => (
            format!("No task: PR #{pr_number} names no InfraDev task"),
            "does not say which task it solves".to_owned(),
        ),
    };
    let mut doc = Doc::new(CHECK_TEXT_LIMIT);
    doc.push(&format!(
        "InfraDev would grade pull request #{pr_number}, but it {why}, so it was not graded. \
         Name the task in any one of three ways:\n\n\
         1. **Base branch** `infradev/<task-id>`: open the PR against that branch.\n\
         2. **PR body**: a line `InfraDev-Task: <task-id>`.\n\
         3. **Label** `task:<task-id>` on the PR.\n\n\
         If several name different tasks, the first in this order wins. Each takes effect \
         at once.\n"
    ));
    if known_tasks.is_empty() {
        doc.push("\nInfraDev has no tasks configured.\n");
    } else {
        doc.push(&format!("\nKnown tasks ({}):\n\n", known_tasks.len()));
        for task in known_tasks {
            doc.push(&format!("- {}\n", code(task, NOTE_CHARS)));
        }
    }
    plain(title, doc.finish("task"))
}

/// What a completed check run's summary ends with: how to grade again, and the commands.
pub const COMMANDS_FOOTER: &str = "\n---\n**Re-grade** (the button on this check run) grades \
this head again. In a comment on the pull request, at the start of a line: \
`/infradev regrade` (the same), `/infradev cancel` (cancel its grades), `/infradev grade` \
(a maintainer's request to grade a human's pull request), `/infradev help`.\n";

/// `output` with [`COMMANDS_FOOTER`] after its summary, when GitHub's limit leaves room.
pub fn with_commands(mut output: CheckOutput) -> CheckOutput {
    if output.summary.len() + COMMANDS_FOOTER.len() <= CHECK_TEXT_LIMIT {
        output.summary.push_str(COMMANDS_FOOTER);
    }
    output
}

/// The neutral check of a human's PR that names a task: it waits for a maintainer's
/// `/infradev grade`.
pub fn waiting_output(pr_number: u64) -> CheckOutput {
    let mut doc = Doc::new(CHECK_TEXT_LIMIT);
    doc.push(&format!(
        "Pull request #{pr_number} names an InfraDev task, but no agent wrote it (by the \
         `[agents]` rules of this installation), so it is graded only when a maintainer asks. \
         Someone with write, maintain or admin access can comment:\n\n\
         - `/infradev grade` to grade this head and every later one;\n\
         - `/infradev help` to list the commands.\n"
    ));
    plain(
        format!("Waiting: PR #{pr_number} is graded when a maintainer comments /infradev grade"),
        doc.finish("note"),
    )
}

/// A queued check run's output.
pub fn queued_output() -> CheckOutput {
    plain(
        "Queued".to_owned(),
        "Waiting for a grader. The official tests and the hidden probes run in a sandbox once \
         one is free."
            .to_owned(),
    )
}

/// An in-progress check run's output.
pub fn in_progress_output() -> CheckOutput {
    plain(
        "Grading".to_owned(),
        "Running the task's official tests and hidden probes against this head in a sandbox."
            .to_owned(),
    )
}

/// A cancelled check run's output (conclusion `cancelled`) when the PR was closed or someone
/// with write access asked `/infradev cancel`.
pub fn withdrawn_output() -> CheckOutput {
    plain(
        "Cancelled".to_owned(),
        "The grade was cancelled: the pull request was closed, or someone with write access \
         asked `/infradev cancel`."
            .to_owned(),
    )
}

/// A cancelled check run's output (conclusion `cancelled`): a newer head replaced this one.
pub fn cancelled_output(superseded_by_sha: &str) -> CheckOutput {
    let sha = sha(superseded_by_sha);
    plain(
        format!("Cancelled: superseded by {}", short(superseded_by_sha)),
        format!(
            "A newer commit, {sha}, was pushed to this pull request, so this head is no longer \
             graded. See the InfraDev check on {sha}."
        ),
    )
}

/// The sticky PR comment, edited in place for every head: the marker, one section for
/// `head_sha` (the report when there is one, else only `status_line`), and one line of
/// earlier heads. `history` is `(sha, verdict)` pairs, newest first; the current head is
/// skipped if it is among them. At most [`COMMENT_LIMIT`] characters.
pub fn sticky_comment(
    head_sha: &str,
    report: Option<&Report>,
    status_line: &str,
    history: &[(String, String)],
) -> String {
    let mut doc = Doc::new(COMMENT_LIMIT);
    doc.push(&format!(
        "{STICKY_MARKER}\n### InfraDev grade for {}\n\n",
        sha(head_sha)
    ));
    if let Some(report) = report {
        doc.push(&format!(
            "**{}**: {}\n\n",
            verdict_word(report.grade.verdict),
            headline(report)
        ));
    }
    let status = status_line.trim();
    if !status.is_empty() {
        doc.push(&format!("{status}\n\n"));
    }
    if let Some(report) = report {
        comment_body(&mut doc, report);
    }
    let earlier: Vec<&(String, String)> = history.iter().filter(|(s, _)| s != head_sha).collect();
    let mut footer = String::new();
    if !earlier.is_empty() {
        let shown: Vec<String> = earlier
            .iter()
            .take(HISTORY_SHOWN)
            .map(|(s, verdict)| format!("{} {}", sha(s), clean(verdict, 40)))
            .collect();
        let _ = write!(footer, "Previous heads: {}", shown.join(" · "));
        if earlier.len() > HISTORY_SHOWN {
            let _ = write!(footer, " · and {} earlier", earlier.len() - HISTORY_SHOWN);
        }
        footer.push_str("\n\n");
    }
    footer.push_str(
        "<sub>This comment is edited for every new head. Hidden probes are never shown, only \
         what each one requires.</sub>\n",
    );
    doc.close("item");
    doc.force(&footer);
    doc.finish("item")
}

/// Reply to a command from someone who may not run it.
pub fn reply_not_permitted(user: &str, command: &str) -> String {
    format!(
        "@{} you are not permitted to run {} on this repository; ask a maintainer to run it.",
        login(user),
        code(&format!("/infradev {}", command.trim()), 60)
    )
}

/// Reply to a command we do not know; `known_commands` are the words after `/infradev`.
pub fn reply_unknown_command(user: &str, command: &str, known_commands: &[&str]) -> String {
    let known: Vec<String> = known_commands
        .iter()
        .map(|c| code(&format!("/infradev {c}"), 60))
        .collect();
    let mut reply = format!(
        "@{} unknown command {}.",
        login(user),
        code(&format!("/infradev {}", command.trim()), 60)
    );
    if !known.is_empty() {
        let _ = write!(reply, " Known commands: {}.", known.join(", "));
    }
    reply
}

// ---- check run ------------------------------------------------------------------------------

fn plain(title: String, summary: String) -> CheckOutput {
    CheckOutput {
        title: clip(&title, TITLE_CHARS),
        summary,
        text: None,
        annotations: vec![],
    }
}

fn title(report: &Report) -> String {
    format!(
        "{}: {}",
        verdict_word(report.grade.verdict),
        headline(report)
    )
}

fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Resolved => "Resolved",
        Verdict::Unresolved => "Unresolved",
        Verdict::Tampered => "Tampered",
        Verdict::Error => "Error",
    }
}

/// One clause saying why, composed from counts and redacted fields only.
fn headline(report: &Report) -> String {
    let grade = &report.grade;
    let official = grade
        .tests
        .iter()
        .filter(|t| t.expectation.is_official())
        .count();
    let probes = grade.tests.len() - official;
    let failed = |is_official: bool| {
        grade
            .tests
            .iter()
            .filter(|t| t.expectation.is_official() == is_official && t.category.is_some())
            .count()
    };
    match grade.verdict {
        Verdict::Resolved => format!(
            "passes all {official} official {} and {probes} hidden {}",
            plural(official, "test", "tests"),
            plural(probes, "probe", "probes")
        ),
        Verdict::Error => {
            if grade.tests.is_empty() {
                "the task expects no tests, so there is nothing to grade (our fault)".to_owned()
            } else {
                let phase = report
                    .phases
                    .iter()
                    .find(|p| p.evidence.infra_error.is_some())
                    .map(|p| p.evidence.phase)
                    .or_else(|| {
                        grade
                            .tests
                            .iter()
                            .find(|t| t.category == Some(Category::Infra))
                            .map(|t| t.evidence.phase)
                    });
                let phase = phase.map_or("grading", |p| p.as_str());
                format!("infrastructure error in the {phase} phase; our fault, not the PR's")
            }
        }
        Verdict::Tampered => {
            let phase = report
                .phases
                .iter()
                .find(|p| p.evidence.tampered.is_some())
                .map_or("tests", |p| p.evidence.phase.as_str());
            format!(
                "a canary test planted in the {phase} phase came back contradicted: the results were rewritten inside the sandbox"
            )
        }
        Verdict::Unresolved => {
            if report.apply_error.is_some() {
                return "the change does not apply to the task's base commit".to_owned();
            }
            if grade.official_passed_but_probes_failed {
                let rejected = failed(false);
                return format!(
                    "passes the official tests, rejected by {rejected} hidden {} ({})",
                    plural(rejected, "probe", "probes"),
                    by_category(&grade.counts.probes.0)
                );
            }
            if let Some(phase) = report
                .phases
                .iter()
                .find(|p| p.evidence.inconsistent.is_some())
                .filter(|_| grade.counts.total.total() == 0)
            {
                return format!(
                    "the {} phase's results cannot be trusted",
                    phase.evidence.phase.as_str()
                );
            }
            let (official_failed, probes_failed) = (failed(true), failed(false));
            let mut parts = vec![format!(
                "fails {official_failed} of {official} official {}",
                plural(official, "test", "tests")
            )];
            if probes_failed > 0 {
                parts.push(format!(
                    "{probes_failed} of {probes} hidden {}",
                    plural(probes, "probe", "probes")
                ));
            }
            format!(
                "{} ({})",
                parts.join(" and "),
                by_category(&grade.counts.total.0)
            )
        }
    }
}

fn summary(report: &Report) -> String {
    let grade = &report.grade;
    let mut doc = Doc::new(CHECK_TEXT_LIMIT);
    let mut head = format!(
        "**{}**: {}\n\n",
        verdict_word(grade.verdict),
        headline(report)
    );
    if grade.official_passed_but_probes_failed {
        head.push_str(
            "> Every official test passes, but the hidden probes reject the change: the \
             official tests do not check everything the task asks for.\n\n",
        );
    }
    if grade.verdict == Verdict::Error {
        head.push_str(
            "> This is our fault, not the pull request's: the grade says nothing about the \
             change. **Re-grade** on this check grades the head again.\n\n",
        );
    }
    let (official, probes): (Vec<&GradedTest>, Vec<&GradedTest>) = grade
        .tests
        .iter()
        .partition(|t| t.expectation.is_official());
    let row = |name: &str, tests: &[&GradedTest]| {
        let passed = tests.iter().filter(|t| t.passed()).count();
        format!("| {name} | {passed} | {} |\n", tests.len() - passed)
    };
    head.push_str("| | passed | not passed |\n|---|---:|---:|\n");
    head.push_str(&row("official tests", &official));
    head.push_str(&row("hidden probes", &probes));
    doc.push(&head);

    let counts = &grade.counts;
    if counts.total.total() > 0 {
        doc.push(
            "\n| failure category | official | probes | what it means |\n|---|---:|---:|---|\n",
        );
        for category in Category::ALL
            .into_iter()
            .filter(|&c| counts.total.get(c) > 0)
        {
            doc.push(&format!(
                "| {category} | {} | {} | {} |\n",
                counts.official.get(category),
                counts.probes.get(category),
                category_meaning(category)
            ));
        }
    }
    if !report.flags.is_empty() {
        doc.push(
            "\n**Neutralised files.** These changed files could steer pytest or the \
             interpreter, so they were restored to the base version (or removed) before \
             grading:\n\n",
        );
        for flag in &report.flags {
            doc.push(&format!(
                "- {}: {}\n",
                code(&flag.path, NOTE_CHARS),
                clean(&flag.reason, NOTE_CHARS)
            ));
        }
    }
    let (task, sub) = (&report.task, &report.submission);
    doc.push(&format!(
        "\nTask {} ({}#{}) · head {} · {} executor\n",
        code(&task.id, 100),
        clean(&task.repository, 100),
        task.pr,
        sha(&sub.head),
        clean(&report.executor, 40)
    ));
    doc.finish("item")
}

/// The check run's `text`: every failure with its category, requirement and message, the
/// phase notes and the executor's limits. `None` when there is nothing to say.
fn details(report: &Report) -> Option<String> {
    let mut doc = Doc::new(CHECK_TEXT_LIMIT);
    let mut any = false;
    if let Some(error) = &report.apply_error {
        doc.push(&format!(
            "## The change does not apply\n\n{}\n\nNothing ran.\n\n",
            code(error, NOTE_CHARS)
        ));
        any = true;
    }
    let failures = failures(report);
    if !failures.is_empty() {
        doc.push("## What did not pass\n\n");
        for test in failures {
            doc.push(&failure_item(report, test));
        }
        doc.push("\n");
        any = true;
    }
    let notes = phase_notes(report);
    if !notes.is_empty() {
        doc.push("## Phases\n\n");
        for note in notes {
            doc.push(&note);
        }
        doc.push("\n");
        any = true;
    }
    if !report.executor_limits.is_empty() {
        doc.push(&format!(
            "## Executor limits\n\nThis run used the {} executor, which could not guarantee:\n\n",
            code(&report.executor, 40)
        ));
        for limit in &report.executor_limits {
            doc.push(&format!("- {}\n", clean(limit, NOTE_CHARS)));
        }
        any = true;
    }
    any.then(|| doc.finish("item"))
}

/// Failing tests and probes, grouped by category in [`Category::ALL`] order.
fn failures(report: &Report) -> Vec<&GradedTest> {
    let mut failing: Vec<&GradedTest> = report
        .grade
        .tests
        .iter()
        .filter(|t| t.category.is_some())
        .collect();
    failing.sort_by_key(|t| t.category);
    failing
}

fn failure_item(report: &Report, test: &GradedTest) -> String {
    let category = test.category.map_or("", Category::as_str);
    let kind = match test.expectation {
        Expectation::FailToPass => "FAIL_TO_PASS test",
        Expectation::PassToPass => "PASS_TO_PASS test",
        Expectation::Probe => "hidden probe",
    };
    let mut item = format!(
        "- **{category}**: {kind} {}\n",
        code(&test.evidence.id, NOTE_CHARS)
    );
    if let Some(requirement) = report.probe_requirements.get(&test.evidence.id) {
        let _ = writeln!(
            item,
            "  - requires: {}",
            clean(requirement, REQUIREMENT_CHARS)
        );
    }
    if let Some(message) = failure_message(test) {
        let _ = writeln!(item, "  - {}", code(&message, NOTE_CHARS));
    }
    item
}

fn phase_notes(report: &Report) -> Vec<String> {
    let mut notes = Vec::new();
    for phase in &report.phases {
        let e = &phase.evidence;
        let name = e.phase.as_str();
        if let Some(error) = &e.infra_error {
            notes.push(format!(
                "- {name}: infrastructure error (ours, not the PR's): {}\n",
                code(error, NOTE_CHARS)
            ));
        }
        if let Some(why) = &e.inconsistent {
            notes.push(format!(
                "- {name}: the results contradict the exit status, so they are not trusted: {}\n",
                code(why, NOTE_CHARS)
            ));
        }
        if let Some(kill) = e.kill {
            let text = match kill {
                Kill::OutOfMemory => "the sandbox was killed for running out of memory",
                Kill::TimedOut => "the sandbox ran out of wall-clock time",
                Kill::Crashed => "the sandbox crashed",
            };
            notes.push(format!("- {name}: {text}\n"));
        }
    }
    notes
}

fn annotations(report: &Report) -> Vec<CheckAnnotation> {
    report
        .flags
        .iter()
        .map(|flag| CheckAnnotation {
            path: flag.path.clone(),
            start_line: 1,
            end_line: 1,
            level: AnnotationLevel::Warning,
            title: clip("Neutralised by InfraDev", ANNOTATION_TITLE_LIMIT),
            message: clip(
                &format!(
                    "{}. This file could steer pytest or the interpreter, so InfraDev restored \
                     it to the base version (or removed it) before grading; the change here \
                     had no effect on the grade.",
                    clean(&flag.reason, NOTE_CHARS).trim_end_matches('.')
                ),
                4000,
            ),
        })
        .collect()
}

/// One annotation of a workflow step (`infradev action` prints it as a workflow command,
/// `::error file=…,line=…,title=…::message`). Plain text: the caller escapes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepAnnotation {
    pub level: AnnotationLevel,
    /// A file of the head; `None` when the failure cannot be placed (a hidden probe).
    pub file: Option<String>,
    pub line: Option<u32>,
    pub title: String,
    pub message: String,
}

/// The annotations of a workflow step for a graded head: each neutralised file at line 1 (a
/// warning, as on the check run), each failing official test at its test file, each failing
/// hidden probe without a file (its id and requirement only), and one warning for an error of
/// ours. Infra failures are never reported as errors of the PR.
pub fn step_annotations(report: &Report) -> Vec<StepAnnotation> {
    let mut out: Vec<StepAnnotation> = annotations(report)
        .into_iter()
        .map(|a| StepAnnotation {
            level: a.level,
            file: Some(a.path),
            line: Some(a.start_line),
            title: a.title,
            message: a.message,
        })
        .collect();
    if report.grade.verdict == Verdict::Error {
        out.push(StepAnnotation {
            level: AnnotationLevel::Warning,
            file: None,
            line: None,
            title: "InfraDev: infrastructure error".to_owned(),
            message: clip(
                &format!(
                    "{}. This says nothing about the pull request.",
                    headline(report)
                ),
                4000,
            ),
        });
    }
    for test in failures(report) {
        let Some(category) = test.category.filter(|c| *c != Category::Infra) else {
            continue;
        };
        let id = &test.evidence.id;
        let reason = failure_message(test).map(|m| clean(&m, NOTE_CHARS));
        let (file, title, mut message) = if test.expectation.is_official() {
            let file = id.split("::").next().filter(|f| !f.is_empty());
            let kind = match test.expectation {
                Expectation::FailToPass => "FAIL_TO_PASS",
                _ => "PASS_TO_PASS",
            };
            (
                file.map(str::to_owned),
                format!("InfraDev {category}: {kind} test {}", clean(id, NOTE_CHARS)),
                String::new(),
            )
        } else {
            let requirement = report
                .probe_requirements
                .get(id)
                .map(|r| {
                    format!(
                        "Requires: {}. ",
                        clean(r, REQUIREMENT_CHARS).trim_end_matches('.')
                    )
                })
                .unwrap_or_default();
            (
                None,
                format!(
                    "InfraDev {category}: hidden probe {}",
                    clean(id, NOTE_CHARS)
                ),
                requirement,
            )
        };
        message.push_str(reason.as_deref().unwrap_or("did not pass"));
        out.push(StepAnnotation {
            level: AnnotationLevel::Failure,
            file,
            line: None,
            title: clip(&title, ANNOTATION_TITLE_LIMIT),
            message: clip(&message, 4000),
        });
    }
    out
}

// ---- sticky comment -------------------------------------------------------------------------

fn comment_body(doc: &mut Doc, report: &Report) {
    let counts = &report.grade.counts;
    if counts.total.total() > 0 {
        doc.push(if report.grade.verdict == Verdict::Error {
            "**What went wrong**\n\n"
        } else {
            "**Failure categories**\n\n"
        });
        for category in Category::ALL
            .into_iter()
            .filter(|&c| counts.total.get(c) > 0)
        {
            let (official, probes) = (counts.official.get(category), counts.probes.get(category));
            let mut found = Vec::new();
            if official > 0 {
                found.push(format!(
                    "{official} official {}",
                    plural(official, "test", "tests")
                ));
            }
            if probes > 0 {
                found.push(format!(
                    "{probes} hidden {}",
                    plural(probes, "probe", "probes")
                ));
            }
            let mut found = found.join(", ");
            if category == Category::Infra {
                found.push_str(" could not be run");
            }
            let advice = if category == Category::Infra {
                format!("*Your tests:* {}.", category_advice(category))
            } else {
                format!(
                    "*Your own tests should have checked:* {}.",
                    category_advice(category)
                )
            };
            doc.push(&format!(
                "- **{category}** ({found}): {}. {advice}\n",
                category_meaning(category)
            ));
        }
        doc.push("\n");
    }
    if let Some(error) = &report.apply_error {
        doc.push(&format!(
            "The change does not apply: {}\n\n",
            code(error, NOTE_CHARS)
        ));
    }
    let failures = failures(report);
    if !failures.is_empty() {
        doc.push(&format!(
            "<details><summary>{} that did not pass</summary>\n\n",
            tests_and_probes(&failures)
        ));
        for test in failures {
            doc.push(&failure_item(report, test));
        }
        doc.force("\n</details>\n\n");
    }
    if !report.flags.is_empty() {
        doc.push("**Neutralised files** (restored to the base version before grading):\n\n");
        for flag in &report.flags {
            doc.push(&format!(
                "- {}: {}\n",
                code(&flag.path, NOTE_CHARS),
                clean(&flag.reason, NOTE_CHARS)
            ));
        }
        doc.push("\n");
    }
}

// ---- text helpers ---------------------------------------------------------------------------

/// A Markdown document that stays under a limit: whole blocks are appended while they fit,
/// the rest are counted and named in a closing note.
struct Doc {
    out: String,
    limit: usize,
    omitted: usize,
    /// The truncation note is written.
    closed: bool,
}

impl Doc {
    fn new(limit: usize) -> Self {
        Doc {
            out: String::new(),
            limit,
            omitted: 0,
            closed: false,
        }
    }

    fn push(&mut self, block: &str) {
        if self.closed {
            return;
        }
        if self.omitted > 0 || self.out.len() + block.len() > self.limit - RESERVE {
            self.omitted += 1;
        } else {
            self.out.push_str(block);
        }
    }

    /// Appends a short block that must be there (a closing tag, a footer): it uses the
    /// reserve.
    fn force(&mut self, block: &str) {
        self.out.push_str(block);
    }

    /// Appends the truncation note, if anything was left out; later blocks are dropped.
    fn close(&mut self, what: &str) {
        if self.omitted > 0 && !self.closed {
            let _ = write!(
                self.out,
                "\n_Truncated: {} more {what}(s) not shown, to stay within GitHub's limit of \
                 {} characters._\n\n",
                self.omitted, self.limit
            );
        }
        self.closed = true;
    }

    fn finish(mut self, what: &str) -> String {
        self.close(what);
        if self.out.len() > self.limit {
            // Only reachable if forced blocks outgrew the reserve; never split a character.
            let mut end = self.limit;
            while !self.out.is_char_boundary(end) {
                end -= 1;
            }
            self.out.truncate(end);
        }
        self.out
    }
}

/// The first non-blank line, without control characters, at most `max` characters, with the
/// sticky marker defused.
fn clean(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let line: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    clip(&line, max).replace(STICKY_MARKER, "<!-- (marker) -->")
}

/// `text` cut to at most `max` characters, ending in an ellipsis when cut.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A one-line Markdown code span of untrusted text: shown literally, never rendered.
fn code(text: &str, max: usize) -> String {
    let text = clean(text, max);
    if text.is_empty() {
        return "(empty)".to_owned();
    }
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A commit id, plain (so GitHub links it) when it is hex, else as code.
fn sha(commit: &str) -> String {
    let commit = commit.trim();
    if !commit.is_empty() && commit.chars().all(|c| c.is_ascii_hexdigit()) {
        short(commit).to_owned()
    } else {
        code(commit, 64)
    }
}

fn short(commit: &str) -> &str {
    commit.get(..7).unwrap_or(commit)
}

/// A GitHub login: letters, digits, `-`, and the `[bot]` suffix; anything else dropped.
fn login(user: &str) -> String {
    user.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '[' | ']'))
        .take(60)
        .collect()
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// "2 hidden probes", "1 official test", "3 tests and probes".
fn tests_and_probes(tests: &[&GradedTest]) -> String {
    let official = tests.iter().filter(|t| t.expectation.is_official()).count();
    let n = tests.len();
    match (official, n - official) {
        (_, 0) => format!("{n} official {}", plural(n, "test", "tests")),
        (0, _) => format!("{n} hidden {}", plural(n, "probe", "probes")),
        _ => format!("{n} tests and probes"),
    }
}

/// "state 3, memory 1, time 1", in [`Category::ALL`] order.
fn by_category(counts: &std::collections::BTreeMap<Category, usize>) -> String {
    let parts: Vec<String> = counts.iter().map(|(c, n)| format!("{c} {n}")).collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_checks_name_the_button_and_the_commands() {
        let output = with_commands(infra_output("docker is down"));
        for what in [
            "**Re-grade**",
            "/infradev regrade",
            "/infradev cancel",
            "/infradev grade",
            "/infradev help",
        ] {
            assert!(output.summary.contains(what), "{what}: {}", output.summary);
        }
        let mut full = infra_output("x");
        full.summary = "a".repeat(CHECK_TEXT_LIMIT - 10);
        assert_eq!(
            with_commands(full.clone()).summary,
            full.summary,
            "no room: unchanged"
        );
    }
    use crate::grading::Outcome;
    use crate::report::GuardFlag;
    use crate::report::fixtures::{
        PROBE_SOURCE, build_failure, infra_error, not_applied, probes_reject, resolved,
    };

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

        - probes: infrastructure error (ours, not the PR's): `docker: image infradev/shard-adam-state:probes not found`
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
        insta::assert_snapshot!(
            show(&infra_output("docker: cannot connect to /var/run/docker.sock\nmore")),
            @r#"
            title: Error: infrastructure fault, not the pull request's
            --- summary
            InfraDev could not grade this head because of a fault on our side. **This is not the pull request's fault** and says nothing about the change.

            What went wrong: `docker: cannot connect to /var/run/docker.sock`

            Nothing is needed from the pull request. **Re-grade** on this check grades the head again.
            "#
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
        let infra = infra_output("lost the runner while PROBE-SECRET-x1 was in flight");
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
            "@octocat see #1 <!-- infradev:sticky --> <img src=x> ``tick`` | cell\nsecond line"
                .into(),
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
}
