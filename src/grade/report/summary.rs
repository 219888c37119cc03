//! The terminal summary: what a person reads first. Verdict and reason on top, the "official
//! tests pass but probes reject it" callout right below (the case the tool exists for), then
//! provenance, guard flags, one table row per test with a one-line failure message, and the
//! per-category counts. Plain text, no colour: the caller decides about terminals.

use std::fmt::Write;

use super::Report;
use crate::grading::{Category, Expectation, GradedTest, Kill, Outcome};

/// Longest failure message shown, in characters; the JSON report has the whole message.
const MESSAGE_CHARS: usize = 120;

pub fn render_summary(report: &Report) -> String {
    let mut out = String::new();
    let grade = &report.grade;
    let _ = writeln!(
        out,
        "{}  {}",
        grade.verdict.as_str().to_uppercase(),
        grade.reason
    );
    if grade.official_passed_but_probes_failed {
        let rejected = grade
            .tests
            .iter()
            .filter(|t| !t.expectation.is_official() && !t.passed())
            .count();
        let _ = writeln!(
            out,
            "  ! passes every official test but is rejected by {rejected} hidden probe(s)"
        );
    }
    out.push('\n');
    provenance(&mut out, report);
    let official: Vec<&GradedTest> = grade
        .tests
        .iter()
        .filter(|t| t.expectation.is_official())
        .collect();
    let probes: Vec<&GradedTest> = grade
        .tests
        .iter()
        .filter(|t| !t.expectation.is_official())
        .collect();
    let width = grade
        .tests
        .iter()
        .map(|t| t.evidence.id.chars().count())
        .max()
        .unwrap_or(0);
    table(&mut out, "official tests", &official, width, report);
    table(&mut out, "probes", &probes, width, report);
    counts(&mut out, report);
    phases(&mut out, report);
    terminal_safe(&out)
}

/// The summary as a terminal and a workflow log may show it: no control characters but line
/// breaks (no ANSI escapes, no carriage returns), and no line that a runner would read as a
/// workflow command (`::error::`, `::add-mask::`, `::stop-commands::`). Paths in the diff and
/// anything else a submission could name pass through here.
pub(super) fn terminal_safe(text: &str) -> String {
    text.lines()
        .map(|line| {
            let line: String = line
                .chars()
                .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
                .collect();
            let indent = line.len() - line.trim_start().len();
            if line[indent..].starts_with("::") {
                format!("{}: :{}", &line[..indent], &line[indent + 2..])
            } else {
                line
            }
        })
        .fold(String::with_capacity(text.len()), |mut out, line| {
            out.push_str(&line);
            out.push('\n');
            out
        })
}

fn provenance(out: &mut String, report: &Report) {
    let (task, sub) = (&report.task, &report.submission);
    let _ = writeln!(
        out,
        "task        {}  {}#{}  base {}  reference {}",
        task.id,
        task.repository,
        task.pr,
        short(&task.base_commit),
        short(&task.reference_commit)
    );
    let files = sub.changed_files.len();
    let _ = writeln!(
        out,
        "submission  {} @ {}  ({files} file(s) changed)",
        sub.repo,
        short(&sub.head)
    );
    let _ = writeln!(out, "executor    {}", report.executor);
    for limit in &report.executor_limits {
        let _ = writeln!(out, "  limit     {limit}");
    }
    for why in report.provenance.iter().flat_map(|p| &p.unvalidated) {
        let _ = writeln!(out, "unvalidated {}", one_line(why));
    }
    for flag in &report.flags {
        let _ = writeln!(out, "flagged     {}: {}", flag.path, flag.reason);
    }
    if let Some(error) = &report.apply_error {
        let _ = writeln!(out, "not applied {}", one_line(error));
    }
}

fn table(out: &mut String, title: &str, tests: &[&GradedTest], width: usize, report: &Report) {
    if tests.is_empty() {
        return;
    }
    let passed = tests.iter().filter(|t| t.passed()).count();
    let _ = writeln!(out, "\n{title} ({passed}/{} passed)", tests.len());
    for test in tests {
        let kind = match test.expectation {
            Expectation::FailToPass => "F2P  ",
            Expectation::PassToPass => "P2P  ",
            Expectation::Probe => "",
        };
        let category = test.category.map_or("", Category::as_str);
        let row = format!(
            "  {:<7}  {kind}{:<width$}  {category}",
            outcome(test.evidence.outcome),
            test.evidence.id
        );
        let _ = writeln!(out, "{}", row.trim_end());
        if test.passed() {
            continue;
        }
        let indent = " ".repeat(11 + kind.len());
        if let Some(requirement) = report.probe_requirements.get(&test.evidence.id) {
            let _ = writeln!(out, "{indent}requires: {}", one_line(requirement));
        }
        if let Some(message) = failure_message(test) {
            let _ = writeln!(out, "{indent}{message}");
        }
    }
}

fn counts(out: &mut String, report: &Report) {
    let c = &report.grade.counts;
    if c.total.total() == 0 {
        return;
    }
    let _ = writeln!(out, "\nfailures by category  official  probes  total");
    for category in Category::ALL.into_iter().filter(|&k| c.total.get(k) > 0) {
        let (o, p, t) = (
            c.official.get(category),
            c.probes.get(category),
            c.total.get(category),
        );
        let _ = writeln!(out, "  {:<19} {o:>8}  {p:>6}  {t:>5}", category.as_str());
    }
    if c.flaky > 0 {
        let _ = writeln!(
            out,
            "  of which flaky      {:>8}  {:>6}  {:>5}",
            flaky(report, true),
            flaky(report, false),
            c.flaky
        );
    }
}

fn flaky(report: &Report, official: bool) -> usize {
    report
        .grade
        .tests
        .iter()
        .filter(|t| t.expectation.is_official() == official && t.evidence.outcome == Outcome::Flaky)
        .count()
}

fn phases(out: &mut String, report: &Report) {
    if report.phases.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nphases");
    for phase in &report.phases {
        let e = &phase.evidence;
        let mut line = format!("  {:<7} {:>7.1} s", e.phase.as_str(), phase.duration_s);
        if phase.attempt > 1 {
            let _ = write!(line, "  rerun (attempt {})", phase.attempt);
        }
        if let Some(code) = e.exit_code {
            let _ = write!(line, "  exit {code}");
        }
        if let Some(kill) = e.kill {
            let _ = write!(line, "  {}", kill_text(kill));
        }
        if let Some(error) = &e.infra_error {
            let _ = write!(line, "  infra error: {}", one_line(error));
        }
        if let Some(why) = &e.inconsistent {
            let _ = write!(line, "  inconsistent: {}", one_line(why));
        }
        let _ = writeln!(out, "{line}");
    }
}

fn outcome(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Passed => "PASS",
        Outcome::Failed => "FAIL",
        Outcome::Skipped => "SKIP",
        Outcome::NotRun => "NOT RUN",
        Outcome::Flaky => "FLAKY",
    }
}

/// "flaky: failed, then passed on attempt 3 (not a pass)" or "failed on all 3 attempts".
pub(super) fn attempts_text(attempts: &[Outcome]) -> String {
    match attempts.iter().position(|o| *o == Outcome::Passed) {
        Some(i) => format!(
            "flaky: {}, then passed on attempt {} (not a pass)",
            attempts[..i]
                .iter()
                .map(|o| o.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            i + 1
        ),
        None => format!("did not pass on any of {} attempts", attempts.len()),
    }
}

fn kill_text(kill: Kill) -> &'static str {
    match kill {
        Kill::OutOfMemory => "killed: out of memory",
        Kill::TimedOut => "killed: wall-clock timeout",
        Kill::Crashed => "crashed",
    }
}

/// One line saying why a test did not pass: the budget, the kill, or the (already redacted)
/// exception and the first line of its message.
pub(super) fn failure_message(test: &GradedTest) -> Option<String> {
    let e = &test.evidence;
    let mut parts = Vec::new();
    if !e.attempts.is_empty() {
        parts.push(attempts_text(&e.attempts));
    }
    if let Some(b) = &e.budget {
        parts.push(format!(
            "{} budget: measured {} over limit {}",
            b.kind.as_str(),
            b.measured,
            b.limit
        ));
    }
    if let Some(kill) = e.kill {
        parts.push(kill_text(kill).to_owned());
    }
    let message = e.message.as_deref().map(one_line).filter(|m| !m.is_empty());
    match (e.exception.as_deref(), message) {
        (Some(exc), Some(msg)) => parts.push(format!("{exc}: {msg}")),
        (Some(exc), None) => parts.push(exc.to_owned()),
        (None, Some(msg)) => parts.push(msg),
        (None, None) => {}
    }
    if parts.is_empty() {
        return (e.outcome == Outcome::NotRun).then(|| "never ran".to_owned());
    }
    Some(truncate(&parts.join("; ")))
}

/// The first non-blank line, trimmed.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_owned()
}

fn truncate(text: &str) -> String {
    if text.chars().count() <= MESSAGE_CHARS {
        return text.to_owned();
    }
    let cut: String = text.chars().take(MESSAGE_CHARS - 3).collect();
    format!("{cut}...")
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::terminal_safe;

    #[test]
    fn nothing_a_sandbox_names_becomes_an_escape_or_a_workflow_command() {
        let hostile =
            "PASS x\n  \u{1b}[31mred\u{1b}[0m\r\n::error::pwned\n   ::add-mask::x\n\u{7}bell";
        let safe = terminal_safe(hostile);
        assert!(
            !safe.chars().any(|c| c.is_control() && c != '\n'),
            "{safe:?}"
        );
        assert!(
            !safe.lines().any(|l| l.trim_start().starts_with("::")),
            "{safe}"
        );
        assert!(safe.contains("red") && safe.contains("pwned"));
    }
}
