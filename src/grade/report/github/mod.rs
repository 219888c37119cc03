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

/// Why a grade could not run, as the public may read it: a fixed phrase per kind of fault.
/// The error itself (git's output, paths of the grader's work directory, internal URLs) is
/// kept for operators, on the grade page; it is never posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GradeFault {
    /// The pull request's head could not be fetched.
    FetchHead,
    /// The task could not be prepared for grading (ours: its commits, its validation).
    Task,
    /// Our side (Docker, git, the file system, a node) failed before a report existed.
    Infra,
    /// The grade ended without a report, for a reason not named here.
    NoReport,
}

impl GradeFault {
    /// The prefix of a stored job error of each kind: what [`GradeFault::of_error`] reads.
    pub const fn prefix(self) -> &'static str {
        match self {
            GradeFault::FetchHead => "cannot fetch the pull request",
            GradeFault::Task => "task error",
            GradeFault::Infra => "infrastructure error",
            GradeFault::NoReport => "",
        }
    }

    /// The kind of a stored job error (whatever follows the prefix is never shown).
    pub fn of_error(error: &str) -> GradeFault {
        [GradeFault::FetchHead, GradeFault::Task, GradeFault::Infra]
            .into_iter()
            .find(|f| error.starts_with(f.prefix()))
            .unwrap_or(GradeFault::NoReport)
    }

    /// The public phrase.
    pub const fn phrase(self) -> &'static str {
        match self {
            GradeFault::FetchHead => "the pull request's head could not be fetched",
            GradeFault::Task => "the task could not be prepared for grading",
            GradeFault::Infra => "the grading infrastructure failed before a report was made",
            GradeFault::NoReport => "the grade ended without a report",
        }
    }
}

/// A completed check (conclusion `neutral`) when grading failed for reasons of ours, after
/// retries, before any report existed. Only a fixed phrase for `fault` is shown: whatever the
/// error said stays with operators (the grade page).
pub fn infra_output(fault: GradeFault) -> CheckOutput {
    let mut summary = String::new();
    let _ = writeln!(
        summary,
        "InfraDev could not grade this head because of a fault on our side. **This is not the \
         pull request's fault** and says nothing about the change."
    );
    let _ = writeln!(summary, "\nWhat went wrong: {}.", fault.phrase());
    let _ = writeln!(
        summary,
        "\nNothing is needed from the pull request. **Re-grade** on this check grades the head \
         again. Operators see the details on the grade page."
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

/// A cancelled check run's output (conclusion `cancelled`): the pull request no longer names
/// the task this grade was of (`task`); it names `now` instead, or no task.
pub fn task_changed_output(task: &str, now: Option<&str>) -> CheckOutput {
    let (title, why) = match now {
        Some(now) => (
            format!(
                "Cancelled: the pull request now names task {}",
                clean(now, 100)
            ),
            format!(
                "The pull request now names the task {} instead of {}, so this grade of {} \
                 is no longer its grade. See the InfraDev check of {}.",
                code(now, 100),
                code(task, 100),
                code(task, 100),
                code(now, 100)
            ),
        ),
        None => (
            "Cancelled: the pull request no longer names a task".to_owned(),
            format!(
                "The pull request no longer names the task {}, so this grade of it is no \
                 longer its grade.",
                code(task, 100)
            ),
        ),
    };
    plain(title, why)
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

mod check;
mod comment;
#[cfg(test)]
mod tests;
mod text;

use check::*;
pub use check::{StepAnnotation, step_annotations};
pub use comment::{reply_not_permitted, reply_unknown_command, sticky_comment};
use text::*;
