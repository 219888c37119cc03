//! The check run's title, summary, details and annotations, and the workflow step's
//! annotations.

use std::fmt::Write;

use super::*;

pub(super) fn plain(title: String, summary: String) -> CheckOutput {
    CheckOutput {
        title: clip(&title, TITLE_CHARS),
        summary,
        text: None,
        annotations: vec![],
    }
}

pub(super) fn title(report: &Report) -> String {
    format!(
        "{}: {}",
        verdict_word(report.grade.verdict),
        headline(report)
    )
}

pub(super) fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Resolved => "Resolved",
        Verdict::Unresolved => "Unresolved",
        Verdict::Tampered => "Tampered",
        Verdict::Error => "Error",
    }
}

/// One clause saying why, composed from counts and redacted fields only.
pub(super) fn headline(report: &Report) -> String {
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
            let flaky = match grade.counts.flaky {
                0 => String::new(),
                n => format!("; {n} flaky"),
            };
            if grade.official_passed_but_probes_failed {
                let rejected = failed(false);
                return format!(
                    "passes the official tests, rejected by {rejected} hidden {} ({}{flaky})",
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
                "{} ({}{flaky})",
                parts.join(" and "),
                by_category(&grade.counts.total.0)
            )
        }
    }
}

/// The note on flaky results, for the check run and the sticky comment; empty when none.
pub(super) fn flaky_note(report: &Report) -> String {
    match report.grade.counts.flaky {
        0 => String::new(),
        n => format!(
            "> **Flaky:** {n} {} failed and then passed when InfraDev ran {} again in a fresh \
             sandbox. A flaky result never counts as a pass; its category is that of the \
             failure. Load on the grading machine (the `time` category) is the usual cause.\n\n",
            plural(n, "test or probe", "tests or probes"),
            plural(n, "it", "them")
        ),
    }
}

pub(super) fn summary(report: &Report) -> String {
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
    head.push_str(&flaky_note(report));
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
pub(super) fn details(report: &Report) -> Option<String> {
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
pub(super) fn failures(report: &Report) -> Vec<&GradedTest> {
    let mut failing: Vec<&GradedTest> = report
        .grade
        .tests
        .iter()
        .filter(|t| t.category.is_some())
        .collect();
    failing.sort_by_key(|t| t.category);
    failing
}

pub(super) fn failure_item(report: &Report, test: &GradedTest) -> String {
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

pub(super) fn phase_notes(report: &Report) -> Vec<String> {
    let mut notes = Vec::new();
    for phase in &report.phases {
        let e = &phase.evidence;
        let name = match phase.attempt {
            1 => e.phase.as_str().to_owned(),
            n => format!("{} (attempt {n})", e.phase.as_str()),
        };
        // The error's text (Docker's, git's: paths, addresses) is for operators only.
        if e.infra_error.is_some() {
            notes.push(format!(
                "- {name}: infrastructure error (ours, not the PR's); operators see the \
                 details on the grade page\n"
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

pub(super) fn annotations(report: &Report) -> Vec<CheckAnnotation> {
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
