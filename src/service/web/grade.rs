//! The grade page of one job (pure). Two audiences:
//!
//! - **public** (anyone with the link, the PR author included): exactly what the check run
//!   shows: the verdict and its title, passed and not-passed counts, failure categories,
//!   each test and probe that did not pass with its category (and a probe's requirement),
//!   neutralised files, phase notes; plus the PR's grade history (the check runs of those
//!   heads are public too).
//! - **operator** (a credential): the full report: every test and probe with its outcome,
//!   category and requirement, phases with durations, images by digest, the executor and its
//!   limits, the exact `infradev grade` command, and the JSON and JUnit downloads.
//!
//! Nothing here reads probe files or sandbox output: a [`Report`] carries neither.

use chrono::{DateTime, Utc};

use super::html::{Html, page};
use crate::grade::report::Report;
use crate::grade::report::github::{GradeFault, category_meaning, check_run_output};
use crate::grading::{Category, Expectation, GradedTest, Kill, Verdict};

/// One row of a pull request's grade history.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryRow {
    pub id: i64,
    pub head_sha: String,
    pub task_id: String,
    /// `queued`, `running`, `finished` or `cancelled`.
    pub state: String,
    pub verdict: Option<Verdict>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// Everything the page shows.
#[derive(Debug, Clone, PartialEq)]
pub struct GradePage {
    pub id: i64,
    /// `owner/name`.
    pub repo: String,
    pub number: u64,
    pub head_sha: String,
    pub task_id: String,
    pub state: String,
    pub author: Option<String>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// `local` or the remote backend that graded it.
    pub backend: String,
    pub attempts: u32,
    /// Why the job could not be graded, when it could not (operators only).
    pub error: Option<String>,
    pub report: Option<Report>,
    pub history: Vec<HistoryRow>,
    /// `https://github.com/`: where the repository is cloned from.
    pub web_url: String,
    /// The grader's task root, holding tasks/ and probes/ (operators only; part of the command).
    pub root: String,
}

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Resolved => "<span class=\"verdict resolved\">resolved</span>",
        Verdict::Unresolved => "<span class=\"verdict unresolved\">unresolved</span>",
        Verdict::Tampered => "<span class=\"verdict tampered\">tampered</span>",
        Verdict::Error => "<span class=\"verdict error\">error</span>",
    }
}

fn time(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(
        || "-".to_owned(),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

fn kind(x: Expectation) -> &'static str {
    match x {
        Expectation::FailToPass => "FAIL_TO_PASS test",
        Expectation::PassToPass => "PASS_TO_PASS test",
        Expectation::Probe => "hidden probe",
    }
}

/// The page, for an operator (`operator`) or for anyone.
pub fn render_grade_page(p: &GradePage, operator: bool) -> String {
    let mut h = Html::new();
    h.raw("<h1>Grade ")
        .show(p.id)
        .raw(" · ")
        .text(&p.repo)
        .raw(" #")
        .show(p.number)
        .raw("</h1><p class=\"headline\">");
    match &p.report {
        Some(r) => {
            h.raw(verdict_class(r.grade.verdict))
                .raw(" ")
                .text(&check_run_output(r).title);
        }
        None if p.state == "finished" => {
            let fault = GradeFault::of_error(p.error.as_deref().unwrap_or_default());
            h.raw("<span class=\"verdict error\">error</span> ")
                .raw("The grade could not run: our fault, not the pull request's (")
                .text(fault.phrase())
                .raw(").");
        }
        None => {
            h.raw("<span class=\"verdict pending\">")
                .text(&p.state)
                .raw("</span>");
        }
    }
    h.raw("</p>");
    facts(&mut h, p);
    if let Some(r) = &p.report {
        public_report(&mut h, r);
    }
    history(&mut h, p);
    if operator {
        operator_part(&mut h, p);
    } else {
        h.raw(
            "<h2>Full report</h2><p class=\"note\">Every test and probe, the phases, the \
               images, the command to reproduce this grade and the JSON and JUnit downloads are \
               shown to operators. <a href=\"/login?next=/grades/",
        )
        .show(p.id)
        .raw("\">Log in</a></p>");
    }
    page(
        &format!("InfraDev grade {} · {}#{}", p.id, p.repo, p.number),
        &h,
    )
}

fn facts(h: &mut Html, p: &GradePage) {
    h.raw("<table class=\"facts\"><tr><th>pull request</th><td><a href=\"")
        .text(&p.web_url)
        .text(&p.repo)
        .raw("/pull/")
        .show(p.number)
        .raw("\">")
        .text(&p.repo)
        .raw(" #")
        .show(p.number)
        .raw("</a></td></tr><tr><th>head</th><td><code>")
        .text(&p.head_sha)
        .raw("</code></td></tr><tr><th>task</th><td><code>")
        .text(&p.task_id)
        .raw("</code></td></tr>");
    if let Some(author) = &p.author {
        h.raw("<tr><th>author</th><td>")
            .text(author)
            .raw("</td></tr>");
    }
    h.raw("<tr><th>state</th><td>")
        .text(&p.state)
        .raw("</td></tr><tr><th>queued</th><td>")
        .text(&time(Some(p.created_at)))
        .raw("</td></tr><tr><th>finished</th><td>")
        .text(&time(p.finished_at))
        .raw("</td></tr></table>");
}

/// What the check run shows, and nothing more.
fn public_report(h: &mut Html, r: &Report) {
    let grade = &r.grade;
    if grade.official_passed_but_probes_failed {
        h.raw(
            "<p>Every official test passes, but the hidden probes reject the change: the \
               official tests do not check everything the task asks for.</p>",
        );
    }
    if grade.verdict == Verdict::Error {
        h.raw(
            "<p>This is our fault, not the pull request's: the grade says nothing about the \
               change.</p>",
        );
    }
    let (official, probes): (Vec<&GradedTest>, Vec<&GradedTest>) = grade
        .tests
        .iter()
        .partition(|t| t.expectation.is_official());
    h.raw("<h2>Summary</h2><table class=\"summary\"><tr><th></th><th>passed</th><th>not passed</th></tr>");
    for (name, tests) in [("official tests", &official), ("hidden probes", &probes)] {
        let passed = tests.iter().filter(|t| t.passed()).count();
        h.raw("<tr><th>")
            .text(name)
            .raw("</th><td class=\"n\">")
            .show(passed)
            .raw("</td><td class=\"n\">")
            .show(tests.len() - passed)
            .raw("</td></tr>");
    }
    h.raw("</table>");
    let counts = &grade.counts;
    if counts.total.total() > 0 {
        h.raw(
            "<h2>Failure categories</h2><table class=\"categories\"><tr><th>category</th>\
               <th>official</th><th>probes</th><th>what it means</th></tr>",
        );
        for c in Category::ALL
            .into_iter()
            .filter(|&c| counts.total.get(c) > 0)
        {
            h.raw("<tr><td>")
                .text(c.as_str())
                .raw("</td><td class=\"n\">")
                .show(counts.official.get(c))
                .raw("</td><td class=\"n\">")
                .show(counts.probes.get(c))
                .raw("</td><td>")
                .text(category_meaning(c))
                .raw("</td></tr>");
        }
        h.raw("</table>");
    }
    if let Some(error) = &r.apply_error {
        h.raw("<h2>The change does not apply</h2><p><code>")
            .text(error)
            .raw("</code></p><p>Nothing ran.</p>");
    }
    let mut failing: Vec<&GradedTest> = grade
        .tests
        .iter()
        .filter(|t| t.category.is_some())
        .collect();
    failing.sort_by_key(|t| t.category);
    if !failing.is_empty() {
        h.raw(
            "<h2>What did not pass</h2><table class=\"failures\"><tr><th>category</th>\
               <th>kind</th><th>id</th><th>requires</th></tr>",
        );
        for t in failing {
            h.raw("<tr><td>")
                .text(t.category.map_or("", Category::as_str))
                .raw("</td><td>")
                .text(kind(t.expectation))
                .raw("</td><td><code>")
                .text(&t.evidence.id)
                .raw("</code></td><td>")
                .text(
                    r.probe_requirements
                        .get(&t.evidence.id)
                        .map_or("", String::as_str),
                )
                .raw("</td></tr>");
        }
        h.raw("</table>");
    }
    if !r.flags.is_empty() {
        h.raw(
            "<h2>Neutralised files</h2><p>These changed files could steer pytest or the \
               interpreter, so they were restored to the base version (or removed) before \
               grading:</p><ul>",
        );
        for f in &r.flags {
            h.raw("<li><code>")
                .text(&f.path)
                .raw("</code>: ")
                .text(&f.reason)
                .raw("</li>");
        }
        h.raw("</ul>");
    }
    let notes = phase_notes(r);
    if !notes.is_empty() {
        h.raw("<h2>Phase notes</h2><ul>");
        for note in notes {
            h.raw("<li>").text(&note).raw("</li>");
        }
        h.raw("</ul>");
    }
}

fn phase_notes(r: &Report) -> Vec<String> {
    let mut notes = Vec::new();
    for phase in &r.phases {
        let e = &phase.evidence;
        let name = e.phase.as_str();
        // What the error says (Docker's, git's: paths, addresses) is in the operator's phase
        // table, never on the public page.
        if e.infra_error.is_some() {
            notes.push(format!(
                "{name}: infrastructure error (ours, not the PR's); operators see the details"
            ));
        }
        if let Some(why) = &e.inconsistent {
            notes.push(format!(
                "{name}: the results contradict the exit status, so they are not trusted: {why}"
            ));
        }
        if let Some(kill) = e.kill {
            notes.push(format!("{name}: {}", kill_text(kill)));
        }
    }
    notes
}

fn kill_text(kill: Kill) -> &'static str {
    match kill {
        Kill::OutOfMemory => "the sandbox was killed for running out of memory",
        Kill::TimedOut => "the sandbox ran out of wall-clock time",
        Kill::Crashed => "the sandbox crashed",
    }
}

fn history(h: &mut Html, p: &GradePage) {
    h.raw(
        "<h2>Grades of this pull request</h2><table class=\"history\"><tr><th>grade</th>\
           <th>head</th><th>task</th><th>state</th><th>verdict</th><th>finished</th></tr>",
    );
    for row in &p.history {
        h.raw("<tr><td><a href=\"/grades/")
            .show(row.id)
            .raw("\">")
            .show(row.id)
            .raw("</a>");
        if row.id == p.id {
            h.raw(" (this)");
        }
        h.raw("</td><td><code>")
            .text(short(&row.head_sha))
            .raw("</code></td><td><code>")
            .text(&row.task_id)
            .raw("</code></td><td>")
            .text(&row.state)
            .raw("</td><td>");
        if let Some(v) = row.verdict {
            h.raw(verdict_class(v));
        }
        h.raw("</td><td>")
            .text(&time(row.finished_at))
            .raw("</td></tr>");
    }
    h.raw("</table>");
}

/// The exact commands that grade this head again on a machine with the task and its probes.
pub fn reproduce_commands(p: &GradePage) -> String {
    let executor = p.report.as_ref().map_or("docker", |r| r.executor.as_str());
    format!(
        "git clone {web}{repo}.git submission && cd submission\n\
         git fetch origin pull/{number}/head && git checkout --detach {head}\n\
         infradev --root {root} grade --task {task} --repo . --head {head} \
         --executor {executor} --json ../report.json --junit ../junit.xml\n",
        web = p.web_url,
        repo = p.repo,
        number = p.number,
        head = p.head_sha,
        task = p.task_id,
        root = p.root,
    )
}

fn operator_part(h: &mut Html, p: &GradePage) {
    h.raw("<h2>Downloads</h2><p><a href=\"/grades/")
        .show(p.id)
        .raw("/report.json\">report.json</a> · <a href=\"/grades/")
        .show(p.id)
        .raw("/junit.xml\">junit.xml</a></p>");
    h.raw("<h2>Reproduce</h2><pre class=\"reproduce\">")
        .text(&reproduce_commands(p))
        .raw("</pre>");
    h.raw("<h2>Job</h2><table><tr><th>backend</th><td>")
        .text(&p.backend)
        .raw("</td></tr><tr><th>attempts</th><td>")
        .show(p.attempts)
        .raw("</td></tr>");
    if let Some(error) = &p.error {
        h.raw("<tr><th>error</th><td><code>")
            .text(error)
            .raw("</code></td></tr>");
    }
    h.raw("</table>");
    let Some(r) = &p.report else {
        return;
    };
    h.raw(
        "<h2>Every test and probe</h2><table class=\"tests\"><tr><th>id</th><th>kind</th>\
           <th>outcome</th><th>category</th><th>requirement</th><th>exception</th>\
           <th>budget</th><th>kill</th></tr>",
    );
    for t in &r.grade.tests {
        let e = &t.evidence;
        h.raw("<tr><td><code>")
            .text(&e.id)
            .raw("</code></td><td>")
            .text(kind(t.expectation))
            .raw("</td><td>")
            .text(e.outcome.as_str())
            .raw("</td><td>")
            .text(t.category.map_or("", Category::as_str))
            .raw("</td><td>")
            .text(r.probe_requirements.get(&e.id).map_or("", String::as_str))
            .raw("</td><td>")
            .text(e.exception.as_deref().unwrap_or(""))
            .raw("</td><td>");
        if let Some(b) = &e.budget {
            h.text(&format!(
                "{}: {} over {}",
                b.kind.as_str(),
                b.measured,
                b.limit
            ));
        }
        h.raw("</td><td>")
            .text(e.kill.map_or("", kill_text))
            .raw("</td></tr>");
    }
    h.raw(
        "</table><h2>Phases</h2><table class=\"phases\"><tr><th>phase</th><th>duration</th>\
           <th>exit code</th><th>kill</th><th>infra error</th><th>inconsistent</th>\
           <th>tampered</th></tr>",
    );
    for ph in &r.phases {
        let e = &ph.evidence;
        h.raw("<tr><td>")
            .text(e.phase.as_str())
            .raw("</td><td class=\"n\">")
            .text(&format!("{:.1} s", ph.duration_s))
            .raw("</td><td class=\"n\">")
            .text(&e.exit_code.map_or_else(String::new, |c| c.to_string()))
            .raw("</td><td>")
            .text(e.kill.map_or("", kill_text))
            .raw("</td><td>")
            .text(e.infra_error.as_deref().unwrap_or(""))
            .raw("</td><td>")
            .text(e.inconsistent.as_deref().unwrap_or(""))
            .raw("</td><td>")
            .text(e.tampered.as_deref().unwrap_or(""))
            .raw("</td></tr>");
    }
    h.raw("</table><h2>Sandbox</h2><table><tr><th>executor</th><td>")
        .text(&r.executor)
        .raw("</td></tr><tr><th>task</th><td><code>")
        .text(&r.task.id)
        .raw("</code> (")
        .text(&r.task.repository)
        .raw(" #")
        .show(r.task.pr)
        .raw(") base <code>")
        .text(&r.task.base_commit)
        .raw("</code> reference <code>")
        .text(&r.task.reference_commit)
        .raw("</code></td></tr></table>");
    if !r.images.is_empty() {
        h.raw("<table class=\"images\"><tr><th>image</th><th>digest</th></tr>");
        for i in &r.images {
            h.raw("<tr><td><code>")
                .text(&i.tag)
                .raw("</code></td><td><code>")
                .text(&i.id)
                .raw("</code></td></tr>");
        }
        h.raw("</table>");
    }
    if let Some(p) = &r.provenance {
        h.raw("<p>Probes graded: <code>")
            .text(&p.probes_digest)
            .raw("</code></p>");
        if !p.unvalidated.is_empty() {
            h.raw("<p>Not graded as the task was validated:</p><ul>");
            for why in &p.unvalidated {
                h.raw("<li>").text(why).raw("</li>");
            }
            h.raw("</ul>");
        }
    }
    if !r.executor_limits.is_empty() {
        h.raw("<p>This executor could not guarantee:</p><ul>");
        for l in &r.executor_limits {
            h.raw("<li>").text(l).raw("</li>");
        }
        h.raw("</ul>");
    }
    if !r.submission.changed_files.is_empty() {
        h.raw("<h2>Changed files</h2><ul>");
        for f in &r.submission.changed_files {
            h.raw("<li><code>").text(f).raw("</code></li>");
        }
        h.raw("</ul>");
    }
}
