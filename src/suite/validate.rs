//! `infradev tasks validate`: proves a task is sound by grading real upstream code with it.
//!
//! * the **base** (the official test files restored from the reference, nothing else
//!   changed): every FAIL_TO_PASS test fails, every PASS_TO_PASS test passes, and every probe
//!   fails unless it is marked `checks_base_behaviour` (then it passes);
//! * the **reference**, several times: everything passes, with the same outcomes each run;
//! * a **null patch** (an empty commit on the base): the verdict is not `resolved`;
//! * each **wrong patch** of the task's `[[reject]]` (the reference with one mutation of
//!   runners/tasks/mutate.py at one line): not `resolved`, and every probe it names fails.
//!
//! Every run reruns what fails (flake handling, `grading::combine_attempts`). A reference
//! whose results change (a test that passes only on a rerun, or runs that disagree) puts the
//! task in **quarantine**: `validation.json` says why (`quarantined`), `tasks check` fails
//! and `tasks list` shows it. Every flaky result of every run is kept in `flakes`.
//!
//! The upstream code comes from a local git clone (exact commits) or from the release sdists
//! that stand in for them (task.toml says which, and why). Each run goes through
//! [`grade_submission`], the one grading flow. The record (image ids, outcomes, durations,
//! checks) is written to `validation.json` beside task.toml.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::suite::fetch::{Cache, fetch_sdist};
use crate::grade::{ExecutorChoice, GradeRequest, grade_submission};
use crate::grading::{Expectation, Outcome, Verdict};
use crate::grade::report::Report;
use crate::grade::sandbox::docker::{DockerExecutor, EnvImage};
use crate::task::{FollowUpRelease, Reject, Release, Task, UpstreamSource};

/// The file written beside task.toml.
pub const VALIDATION_FILE: &str = "validation.json";
const SCHEMA_VERSION: u32 = 1;

/// How to validate.
#[derive(Debug, Clone)]
pub struct ValidateOptions {
    /// The repository's runners/ folder.
    pub runners: PathBuf,
    pub cache: Cache,
    /// A local clone of the upstream repository (git-sourced tasks); defaults to the cache's.
    pub git: Option<PathBuf>,
    /// How many times the reference is graded (flake detection).
    pub reference_runs: usize,
    /// Reruns of a failing test or probe unless the task sets its own (flake handling).
    pub retries: u32,
    /// Where records go instead of beside task.toml (`<task-id>.validation.json`).
    pub out_dir: Option<PathBuf>,
    /// The host Python that runs runners/tasks/mutate.py (the `[[reject]]` patches).
    pub python: PathBuf,
}

impl ValidateOptions {
    /// Where a task's record is written.
    pub fn record_path(&self, task: &Task) -> PathBuf {
        match &self.out_dir {
            Some(dir) => dir.join(format!("{}.{VALIDATION_FILE}", task.id)),
            None => task.dir.join(VALIDATION_FILE),
        }
    }
}

/// What `validation.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Validation {
    pub schema_version: u32,
    pub task: String,
    pub infradev_version: String,
    /// RFC 3339, UTC.
    pub validated_at: String,
    pub ok: bool,
    pub source: SourceRecord,
    /// Each environment layer: the tag and the image id, base first.
    pub images: Vec<ImageRecord>,
    pub runs: Vec<RunRecord>,
    pub checks: Vec<CheckRecord>,
    /// Every result that changed across the attempts of one run (docs/tasks-format.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flakes: Vec<FlakeRecord>,
    /// Why the task is quarantined: its reference flaked. Absent when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined: Option<String>,
    /// Probe power (`infradev tasks power`), kept when the task is validated again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<crate::suite::power::PowerRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceRecord {
    /// `git` or `release`.
    pub kind: String,
    pub base: String,
    pub reference: String,
    /// The commits graded (in a git source, the upstream ones).
    pub base_commit: String,
    pub reference_commit: String,
    /// Upstream fixes applied on top of the reference (`upstream.follow_up`); then
    /// `reference_commit` is the commit they made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub follow_up: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageRecord {
    pub tag: String,
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// `base`, `reference-1` … `reference-N`, `null-patch`.
    pub name: String,
    pub head: String,
    pub verdict: String,
    pub duration_s: f64,
    /// Test or probe id → outcome (`passed`, `failed`, `skipped`, `not_run`).
    pub outcomes: BTreeMap<String, String>,
}

/// A test or probe whose result changed across the attempts of one graded run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlakeRecord {
    /// The run: `base`, `reference-<n>` or `null-patch`.
    pub run: String,
    pub id: String,
    /// Every attempt's outcome, first to last (`failed`, `not_run`, `passed`).
    pub attempts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRecord {
    pub name: String,
    pub ok: bool,
    /// What was wrong, naming each test; empty when the check passed.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub problems: Vec<String>,
}

/// Validates one task and writes its validation.json. Errors are infrastructure failures
/// (no Docker, a download failed); a task that does not hold up is an `Ok` with `ok: false`.
pub async fn validate_task(task: &Task, opts: &ValidateOptions) -> anyhow::Result<Validation> {
    let source = Source::prepare(task, opts).await?;
    let mut graded_task = task.clone();
    graded_task.base_commit = source.base.clone();
    graded_task.reference_commit = source.reference.clone();

    let docker = DockerExecutor::connect().await?;
    let image = EnvImage::ensure(
        &docker,
        &graded_task,
        &opts.runners,
        Some(&opts.cache.wheels()),
    )
    .await
    .context("building the task's environment image")?;

    let mut plan = vec![("base".to_owned(), source.base.clone())];
    for i in 1..=opts.reference_runs.max(1) {
        plan.push((format!("reference-{i}"), source.reference.clone()));
    }
    plan.push(("null-patch".to_owned(), source.null.clone()));
    // The wrong patches of `[[reject]]`, each a commit on top of the reference. One that
    // cannot be made (no such mutation at its line) is a problem of the task, not graded.
    let mut reject_problems = Vec::new();
    for reject in &task.rejects {
        match reject_commit(&source, reject, opts) {
            Ok(commit) => plan.push((reject.run_name(), commit)),
            Err(e) => reject_problems.push(format!("{}: {e:#}", reject.run_name())),
        }
    }

    let mut reports = Vec::new();
    for (name, head) in &plan {
        eprintln!("validate {}: grading the {name} ({})", task.id, short(head));
        let request = GradeRequest {
            task: graded_task.clone(),
            repo: source.repo.clone(),
            head: head.clone(),
            lib: opts.runners.join("python"),
            executor: ExecutorChoice::Docker {
                wheels: Some(opts.cache.wheels()),
            },
            keep_workdir: false,
            retries: opts.retries,
        };
        let report = grade_submission(&request, &|_| {})
            .await
            .with_context(|| format!("grading the {name}"))?;
        eprintln!(
            "validate {}: {name}: {} ({})",
            task.id,
            report.grade.verdict.as_str(),
            report.grade.reason
        );
        reports.push((name.clone(), report));
    }
    let base_behaviour: Vec<String> = task
        .probes
        .probes
        .iter()
        .filter(|p| p.checks_base_behaviour)
        .map(|p| p.test.clone())
        .collect();
    let summaries: Vec<RunSummary> = reports
        .iter()
        .map(|(n, r)| RunSummary::from_report(n, r))
        .collect();
    let mut checks = judge(&base_behaviour, &summaries);
    if !task.rejects.is_empty() {
        let expected: Vec<(String, Vec<String>)> = task
            .rejects
            .iter()
            .map(|r| {
                let tests = r
                    .probes
                    .iter()
                    .filter_map(|id| task.probes.probes.iter().find(|p| &p.id == id))
                    .map(|p| p.test.clone())
                    .collect();
                (r.run_name(), tests)
            })
            .collect();
        checks.push(judge_rejects(&expected, &summaries, reject_problems));
    }
    let quarantined = quarantine(&summaries);
    if let Some(why) = &quarantined {
        eprintln!("validate {}: quarantined: {why}", task.id);
    }
    let validation = Validation {
        schema_version: SCHEMA_VERSION,
        task: task.id.clone(),
        infradev_version: env!("CARGO_PKG_VERSION").to_owned(),
        validated_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ok: checks.iter().all(|c| c.ok),
        source: source.record,
        images: image
            .layers
            .iter()
            .map(|(tag, id)| ImageRecord {
                tag: tag.clone(),
                id: id.clone(),
            })
            .collect(),
        runs: reports.iter().map(|(n, r)| run_record(n, r)).collect(),
        checks,
        flakes: reports.iter().flat_map(|(n, r)| flakes_of(n, r)).collect(),
        quarantined,
        power: None,
    };
    let path = opts.record_path(task);
    let mut validation = validation;
    validation.power = read_validation(&path)
        .or_else(|| read_validation(&task.dir.join(VALIDATION_FILE)))
        .and_then(|v| v.power);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, serde_json::to_string_pretty(&validation)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(validation)
}

/// A task's validation.json, if there is one that parses.
pub fn read_validation(path: &Path) -> Option<Validation> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

/// Why `task` is quarantined, from its validation.json (beside task.toml), if it is.
pub fn quarantined(task: &Task) -> Option<String> {
    read_validation(&task.dir.join(VALIDATION_FILE))?.quarantined
}

/// The results of one run that changed across its attempts.
fn flakes_of(name: &str, report: &Report) -> Vec<FlakeRecord> {
    report
        .grade
        .tests
        .iter()
        .filter(|t| t.evidence.outcome == Outcome::Flaky)
        .map(|t| FlakeRecord {
            run: name.to_owned(),
            id: t.evidence.id.clone(),
            attempts: t
                .evidence
                .attempts
                .iter()
                .map(|o| o.as_str().to_owned())
                .collect(),
        })
        .collect()
}

/// Why the task must be quarantined, if its reference flaked: a test that passed only on a
/// rerun in some reference run, or one that passed in some runs and not in others. A
/// reference that fails the same way every time is broken, not flaky (the checks say so).
/// Pure: table-tested below.
pub fn quarantine(runs: &[RunSummary]) -> Option<String> {
    let references: Vec<&RunSummary> = runs
        .iter()
        .filter(|r| r.name.starts_with("reference"))
        .collect();
    let mut why = Vec::new();
    for r in &references {
        for (_, id, _) in r.tests.iter().filter(|t| t.2 == Outcome::Flaky) {
            why.push(format!("`{id}` passed only on a rerun in {}", r.name));
        }
    }
    let mut seen: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
    for r in &references {
        for (_, id, outcome) in &r.tests {
            let (passed, failed) = seen.entry(id).or_default();
            match outcome {
                Outcome::Passed => *passed = true,
                Outcome::Flaky => {}
                _ => *failed = true,
            }
        }
    }
    for (id, _) in seen.iter().filter(|(_, (p, f))| *p && *f) {
        why.push(format!(
            "`{id}` passed in some reference runs and not in others"
        ));
    }
    (!why.is_empty()).then(|| format!("the reference is flaky: {}", why.join("; ")))
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(10)]
}

fn run_record(name: &str, report: &Report) -> RunRecord {
    RunRecord {
        name: name.to_owned(),
        head: report.submission.head.clone(),
        verdict: report.grade.verdict.as_str().to_owned(),
        duration_s: (report.phases.iter().map(|p| p.duration_s).sum::<f64>() * 10.0).round() / 10.0,
        outcomes: report
            .grade
            .tests
            .iter()
            .map(|t| {
                (
                    t.evidence.id.clone(),
                    t.evidence.outcome.as_str().to_owned(),
                )
            })
            .collect(),
    }
}

/// One graded run, as the checks see it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// `base`, `reference-<n>` or `null-patch`.
    pub name: String,
    pub verdict: Verdict,
    pub reason: String,
    /// Every expected test and probe with its outcome.
    pub tests: Vec<(Expectation, String, Outcome)>,
}

impl RunSummary {
    pub fn from_report(name: &str, report: &Report) -> RunSummary {
        RunSummary {
            name: name.to_owned(),
            verdict: report.grade.verdict,
            reason: report.grade.reason.clone(),
            tests: report
                .grade
                .tests
                .iter()
                .map(|t| (t.expectation, t.evidence.id.clone(), t.evidence.outcome))
                .collect(),
        }
    }
}

/// The checks, from the graded runs. Pure: table-tested below. `base_behaviour` lists the
/// probes (by test id) marked `checks_base_behaviour`.
pub fn judge(base_behaviour: &[String], runs: &[RunSummary]) -> Vec<CheckRecord> {
    let find = |name: &str| runs.iter().find(|r| r.name == name);
    let mut checks = Vec::new();

    let mut problems = Vec::new();
    if let Some(base) = find("base") {
        for (expectation, id, outcome) in &base.tests {
            if *outcome == Outcome::Flaky {
                problems.push(format!(
                    "`{id}` is flaky on the base (it passed only on a rerun)"
                ));
                continue;
            }
            let passed = *outcome == Outcome::Passed;
            let marked = base_behaviour.contains(id);
            match expectation {
                Expectation::FailToPass if passed => {
                    problems.push(format!("FAIL_TO_PASS `{id}` passes on the base"))
                }
                Expectation::PassToPass if !passed => problems.push(format!(
                    "PASS_TO_PASS `{id}` is {} on the base",
                    outcome.as_str()
                )),
                Expectation::Probe if marked && !passed => problems.push(format!(
                    "probe `{id}` is marked checks_base_behaviour but is {} on the base",
                    outcome.as_str()
                )),
                Expectation::Probe if !marked && passed => problems.push(format!(
                    "probe `{id}` passes on the base: it checks nothing the change adds \
                     (mark it checks_base_behaviour if that is intended)"
                )),
                _ => {}
            }
        }
        if base.verdict == Verdict::Error {
            problems.push(format!("the base could not be graded: {}", base.reason));
        }
    } else {
        problems.push("the base was not graded".into());
    }
    checks.push(check(
        "base: FAIL_TO_PASS and new probes fail, the rest passes",
        problems,
    ));

    let references: Vec<&RunSummary> = runs
        .iter()
        .filter(|r| r.name.starts_with("reference"))
        .collect();
    let mut problems = Vec::new();
    for (i, r) in references.iter().enumerate() {
        for (_, id, outcome) in r.tests.iter().filter(|t| t.2 != Outcome::Passed) {
            problems.push(format!("run {}: `{id}` is {}", i + 1, outcome.as_str()));
        }
    }
    if references.is_empty() {
        problems.push("the reference was not graded".into());
    }
    checks.push(check("reference: everything passes", problems));

    let mut problems = Vec::new();
    if let Some(first) = references.first() {
        let outcomes = |r: &RunSummary| -> BTreeMap<String, Outcome> {
            r.tests.iter().map(|(_, id, o)| (id.clone(), *o)).collect()
        };
        let want = outcomes(first);
        for (i, r) in references.iter().enumerate().skip(1) {
            for (id, got) in outcomes(r) {
                if want.get(&id) != Some(&got) {
                    problems.push(format!(
                        "`{id}` is {} in run 1 and {} in run {}",
                        want.get(&id).map_or("absent", |o| o.as_str()),
                        got.as_str(),
                        i + 1
                    ));
                }
            }
        }
    }
    checks.push(check(
        &format!(
            "reference: identical outcomes in {} runs (no flake)",
            references.len()
        ),
        problems,
    ));

    let problems = match find("null-patch") {
        Some(r) if r.verdict == Verdict::Resolved => {
            vec!["an empty change is graded resolved".to_owned()]
        }
        Some(_) => Vec::new(),
        None => vec!["the null patch was not graded".into()],
    };
    checks.push(check("null patch: not resolved", problems));
    checks
}

/// The `[[reject]]` check: each wrong patch (run name, the test ids of the probes it names)
/// was graded, not resolved, and failed each of those probes. `problems` holds what went
/// wrong before grading (a patch that could not be made). Pure: table-tested below.
pub fn judge_rejects(
    expected: &[(String, Vec<String>)],
    runs: &[RunSummary],
    mut problems: Vec<String>,
) -> CheckRecord {
    for (name, tests) in expected {
        let Some(run) = runs.iter().find(|r| &r.name == name) else {
            if !problems.iter().any(|p| p.starts_with(name.as_str())) {
                problems.push(format!("{name}: not graded"));
            }
            continue;
        };
        match run.verdict {
            Verdict::Resolved => problems.push(format!("{name}: graded resolved")),
            Verdict::Error => {
                problems.push(format!("{name}: could not be graded: {}", run.reason));
                continue;
            }
            _ => {}
        }
        for test in tests {
            match run.tests.iter().find(|(_, id, _)| id == test) {
                Some((_, _, Outcome::Failed)) => {}
                Some((_, _, outcome)) => {
                    problems.push(format!("{name}: probe `{test}` is {}", outcome.as_str()))
                }
                None => problems.push(format!("{name}: probe `{test}` has no result")),
            }
        }
    }
    check(
        "rejects: each wrong patch fails the probes it names",
        problems,
    )
}

/// The reference with a `[[reject]]`'s mutation applied, as a commit on top of it.
fn reject_commit(
    source: &Source,
    reject: &Reject,
    opts: &ValidateOptions,
) -> anyhow::Result<String> {
    let text = git(
        &source.repo,
        &["show", &format!("{}:{}", source.reference, reject.path)],
    )
    .with_context(|| format!("the reference has no file {}", reject.path))?;
    let line = reject.line;
    let file = serde_json::json!({
        "path": reject.path, "source": text + "\n", "changed": [[line, line]]
    });
    let candidates = crate::suite::power::run::mutate(&opts.python, &opts.runners, vec![file])?;
    let at_line: Vec<&crate::suite::power::Candidate> = candidates
        .iter()
        .filter(|c| c.kind == crate::suite::power::Kind::Mutant && c.line == line)
        .collect();
    let Some(mutant) = at_line.iter().find(|c| c.operator == reject.operator) else {
        let mut there: Vec<&str> = at_line.iter().map(|c| c.operator.as_str()).collect();
        there.sort_unstable();
        there.dedup();
        bail!(
            "no `{}` mutation at line {line} (the mutations there: {})",
            reject.operator,
            if there.is_empty() {
                "none".to_owned()
            } else {
                there.join(", ")
            }
        );
    };
    crate::suite::power::run::commit_candidate(&source.repo, &source.reference, mutant)
}

fn check(name: &str, problems: Vec<String>) -> CheckRecord {
    CheckRecord {
        name: name.to_owned(),
        ok: problems.is_empty(),
        problems,
    }
}

/// A private git repository holding the base, the reference and a null patch.
pub(crate) struct Source {
    _dir: tempfile::TempDir,
    pub(crate) repo: PathBuf,
    pub(crate) base: String,
    pub(crate) reference: String,
    null: String,
    record: SourceRecord,
}

impl Source {
    pub(crate) async fn prepare(task: &Task, opts: &ValidateOptions) -> anyhow::Result<Source> {
        let dir = tempfile::tempdir().context("cannot create a work dir")?;
        let repo = dir.path().join("upstream");
        let (base, reference, record) = match &task.upstream.source {
            UpstreamSource::Git => {
                let clone = opts
                    .git
                    .clone()
                    .unwrap_or_else(|| opts.cache.upstream_git(&task.repository));
                if !clone.exists() {
                    bail!(
                        "task `{}` is validated from git, and there is no clone of {} at {} \
                         (pass --git <clone>, or clone it there)",
                        task.id,
                        task.repository,
                        clone.display()
                    );
                }
                git(
                    dir.path(),
                    &[
                        "clone",
                        "--quiet",
                        "--shared",
                        "--no-checkout",
                        &clone.display().to_string(),
                        "upstream",
                    ],
                )?;
                for (field, sha) in [
                    ("base_commit", &task.base_commit),
                    ("reference_commit", &task.reference_commit),
                ] {
                    git(&repo, &["cat-file", "-e", &format!("{sha}^{{commit}}")])
                        .with_context(|| format!("{field} {sha} is not in {}", clone.display()))?;
                }
                let reference =
                    with_follow_ups(&repo, &task.reference_commit, &task.upstream.follow_up)
                        .with_context(|| format!("task `{}`: upstream.follow_up", task.id))?;
                let record = SourceRecord {
                    kind: "git".into(),
                    base: task.base_commit.clone(),
                    reference: task.reference_commit.clone(),
                    base_commit: task.base_commit.clone(),
                    reference_commit: reference,
                    follow_up: task.upstream.follow_up.clone(),
                    note: task.upstream.note.clone(),
                };
                let reference = record.reference_commit.clone();
                (task.base_commit.clone(), reference, record)
            }
            UpstreamSource::Release { base, reference } => {
                let base_sdist = fetch_sdist(base, &opts.cache).await?;
                let reference_sdist = fetch_sdist(reference, &opts.cache).await?;
                std::fs::create_dir_all(&repo)?;
                git(&repo, &["init", "--quiet"])?;
                let base_sha = commit_sdist(&repo, &base_sdist, base, None)?;
                let mut reference_sha =
                    commit_sdist(&repo, &reference_sdist, reference, Some(&base_sha))?;
                let mut follow_up = Vec::new();
                for fix in &task.upstream.follow_up_releases {
                    let sdist = fetch_sdist(&fix.release, &opts.cache).await?;
                    reference_sha = with_release_follow_up(&repo, &reference_sha, &sdist, fix)
                        .with_context(|| {
                            format!(
                                "task `{}`: upstream.follow_up_release {}",
                                task.id, fix.release
                            )
                        })?;
                    follow_up.extend(fix.paths.iter().map(|p| format!("{}:{p}", fix.release)));
                }
                let record = SourceRecord {
                    kind: "release".into(),
                    base: base.to_string(),
                    reference: reference.to_string(),
                    base_commit: base_sha.clone(),
                    reference_commit: reference_sha.clone(),
                    follow_up,
                    note: task.upstream.note.clone(),
                };
                (base_sha, reference_sha, record)
            }
        };
        let null = git(
            &repo,
            &[
                "commit-tree",
                &format!("{base}^{{tree}}"),
                "-p",
                &base,
                "-m",
                "null patch: no change",
            ],
        )?;
        Ok(Source {
            _dir: dir,
            repo,
            base,
            reference,
            null,
            record,
        })
    }
}

/// The reference with the upstream fixes of `follow_up` applied in order, each as a commit of
/// our own (fixed author and date, so the same fixes always make the same commit): what a
/// cherry-pick makes, computed without a work tree (`git merge-tree`). A fix that does not
/// apply cleanly is an error naming it.
fn with_follow_ups(repo: &Path, reference: &str, follow_up: &[String]) -> anyhow::Result<String> {
    let mut head = reference.to_owned();
    for fix in follow_up {
        git(repo, &["cat-file", "-e", &format!("{fix}^{{commit}}")])
            .with_context(|| format!("{fix} is not in the clone"))?;
        let merged = git(
            repo,
            &[
                "merge-tree",
                "--write-tree",
                "--no-messages",
                "--merge-base",
                &format!("{fix}^"),
                &head,
                fix,
            ],
        )
        .with_context(|| format!("{fix} does not apply cleanly on top of {head}"))?;
        let tree = merged.lines().next().unwrap_or_default().trim().to_owned();
        head = git(
            repo,
            &[
                "commit-tree",
                &tree,
                "-p",
                &head,
                "-m",
                &format!("follow-up {fix} applied to the reference"),
            ],
        )?
        .trim()
        .to_owned();
    }
    Ok(head)
}

/// The reference with `fix.paths` replaced by their content in the later release `sdist`, as
/// one commit on top of it: what upstream's fix made of those files. A path the fix release
/// does not ship is an error naming it.
fn with_release_follow_up(
    repo: &Path,
    reference: &str,
    sdist: &Path,
    fix: &FollowUpRelease,
) -> anyhow::Result<String> {
    let work = tempfile::tempdir()?;
    // `*` stands for the sdist's top folder only: a deeper file of the same name is not it.
    let mut only = vec![
        "--wildcards".to_owned(),
        "--no-wildcards-match-slash".to_owned(),
    ];
    only.extend(fix.paths.iter().map(|p| format!("*/{p}")));
    let unpacked = untar(sdist, work.path(), &only)?;
    let index = repo
        .join(".git")
        .join(format!("index-follow-up-{}", fix.release.version));
    let env = [("GIT_INDEX_FILE", index.as_os_str())];
    let run = |args: &[&str]| git_env(repo, &env, args);
    run(&["read-tree", reference])?;
    for path in &fix.paths {
        let file = work.path().join(path);
        if !file.is_file() {
            bail!("{} ships no file {path}", fix.release);
        }
        let blob = run(&["hash-object", "-w", &file.display().to_string()])?;
        run(&[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("100644,{blob},{path}"),
        ])?;
    }
    // Every path is there, so a failure is something else.
    unpacked?;
    let tree = run(&["write-tree"])?;
    let message = format!("follow-up from {}: {}", fix.release, fix.paths.join(", "));
    run(&["commit-tree", &tree, "-p", reference, "-m", &message])
}

/// Unpacks `sdist` into `dest` without its top folder (`members`: tar's member selection,
/// empty for all). The outer error is not running tar; the inner one, tar's failure, with its
/// words.
fn untar(sdist: &Path, dest: &Path, members: &[String]) -> anyhow::Result<anyhow::Result<()>> {
    let out = Command::new("tar")
        .arg("-xzf")
        .arg(sdist)
        .arg("--strip-components=1")
        .arg("--no-same-owner")
        .arg("-C")
        .arg(dest)
        .args(members)
        .output()
        .context("cannot run tar")?;
    Ok(if out.status.success() {
        Ok(())
    } else {
        Err(anyhow::anyhow!(
            "cannot unpack {}: {}",
            sdist.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    })
}

/// Commits an sdist's tree (its top folder stripped) on top of `parent`, replacing the tree.
fn commit_sdist(
    repo: &Path,
    sdist: &Path,
    release: &Release,
    parent: Option<&str>,
) -> anyhow::Result<String> {
    let work = tempfile::tempdir()?;
    untar(sdist, work.path(), &[])??;
    let index = repo.join(".git").join(format!("index-{}", release.version));
    let env = [
        ("GIT_INDEX_FILE", index.as_os_str()),
        ("GIT_WORK_TREE", work.path().as_os_str()),
    ];
    let run = |args: &[&str]| git_env(repo, &env, args);
    run(&["add", "--all", "--force", "."])?;
    let tree = run(&["write-tree"])?;
    let message = format!("{release} (sdist)");
    let mut args = vec!["commit-tree", tree.as_str(), "-m", message.as_str()];
    if let Some(p) = parent {
        args.extend(["-p", p]);
    }
    run(&args)
}

pub(crate) fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    git_env(dir, &[], args)
}

/// Runs git in `dir` as the validation's own committer, with fixed dates so that the same
/// sdists always give the same commits.
pub(crate) fn git_env(dir: &Path, env: &[(&str, &OsStr)], args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "infradev")
        .env("GIT_AUTHOR_EMAIL", "infradev@localhost")
        .env("GIT_COMMITTER_NAME", "infradev")
        .env("GIT_COMMITTER_EMAIL", "infradev@localhost")
        .env("GIT_AUTHOR_DATE", "2000-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2000-01-01T00:00:00Z")
        .envs(env.iter().copied())
        .output()
        .context("cannot run git")?;
    if !out.status.success() {
        bail!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Expectation::{FailToPass as F2P, PassToPass as P2P, Probe};
    use Outcome::{Failed, NotRun, Passed};

    fn run(name: &str, verdict: Verdict, tests: &[(Expectation, &str, Outcome)]) -> RunSummary {
        RunSummary {
            name: name.into(),
            verdict,
            reason: "because".into(),
            tests: tests
                .iter()
                .map(|(e, id, o)| (*e, (*id).to_owned(), *o))
                .collect(),
        }
    }

    type Tests = &'static [(Expectation, &'static str, Outcome)];

    const GOOD_BASE: Tests = &[
        (F2P, "t::new", Failed),
        (P2P, "t::old", Passed),
        (Probe, "p::new", Failed),
        (Probe, "p::guard", Passed),
    ];
    const ALL_PASS: Tests = &[
        (F2P, "t::new", Passed),
        (P2P, "t::old", Passed),
        (Probe, "p::new", Passed),
        (Probe, "p::guard", Passed),
    ];

    fn problems(
        base: &[(Expectation, &str, Outcome)],
        refs: &[&[(Expectation, &str, Outcome)]],
        null: Verdict,
    ) -> Vec<Vec<String>> {
        let mut runs = vec![run("base", Verdict::Unresolved, base)];
        for (i, r) in refs.iter().enumerate() {
            runs.push(run(&format!("reference-{}", i + 1), Verdict::Resolved, r));
        }
        runs.push(run("null-patch", null, base));
        judge(&["p::guard".to_owned()], &runs)
            .into_iter()
            .map(|c| {
                assert_eq!(c.ok, c.problems.is_empty());
                c.problems
            })
            .collect()
    }

    #[test]
    fn a_sound_task_passes_every_check() {
        let found = problems(
            GOOD_BASE,
            &[ALL_PASS, ALL_PASS, ALL_PASS],
            Verdict::Unresolved,
        );
        assert!(found.iter().all(Vec::is_empty), "{found:?}");
    }

    #[test]
    fn each_broken_expectation_is_named() {
        let table: &[(Tests, usize, &str)] = &[
            (
                &[(F2P, "t::new", Passed)],
                0,
                "FAIL_TO_PASS `t::new` passes on the base",
            ),
            (
                &[(P2P, "t::old", NotRun)],
                0,
                "PASS_TO_PASS `t::old` is not_run on the base",
            ),
            (
                &[(Probe, "p::new", Passed)],
                0,
                "probe `p::new` passes on the base",
            ),
            (
                &[(Probe, "p::guard", Failed)],
                0,
                "probe `p::guard` is marked checks_base_behaviour",
            ),
            (
                &[(F2P, "t::new", Outcome::Flaky)],
                0,
                "`t::new` is flaky on the base (it passed only on a rerun)",
            ),
        ];
        for (base, check, words) in table {
            let found = problems(base, &[ALL_PASS], Verdict::Unresolved);
            assert!(
                found[*check].iter().any(|p| p.contains(words)),
                "{words}: {found:?}"
            );
        }
    }

    #[test]
    fn a_failing_or_flaky_reference_and_a_resolved_null_patch_are_caught() {
        let failing: &[(Expectation, &str, Outcome)] =
            &[(F2P, "t::new", Failed), (Probe, "p::new", Passed)];
        let found = problems(GOOD_BASE, &[ALL_PASS, failing], Verdict::Resolved);
        assert!(
            found[1]
                .iter()
                .any(|p| p.contains("run 2: `t::new` is failed")),
            "{found:?}"
        );
        assert!(
            found[2]
                .iter()
                .any(|p| p.contains("`t::new` is passed in run 1 and failed in run 2")),
            "{found:?}"
        );
        assert_eq!(
            found[3],
            vec!["an empty change is graded resolved".to_owned()]
        );
    }

    #[test]
    #[rustfmt::skip]
    fn a_reference_that_flakes_quarantines_the_task() {
        use Outcome::Flaky;
        let refs = |runs: &[Tests]| -> Vec<RunSummary> {
            let mut all = vec![run("base", Verdict::Unresolved, GOOD_BASE)];
            all.extend(runs.iter().enumerate().map(|(i, t)| run(&format!("reference-{}", i + 1), Verdict::Resolved, t)));
            all.push(run("null-patch", Verdict::Unresolved, GOOD_BASE));
            all
        };
        let flaky_probe: Tests = &[(F2P, "t::new", Passed), (Probe, "p::new", Flaky)];
        let failing: Tests = &[(F2P, "t::new", Failed), (Probe, "p::new", Passed)];
        let always_failing: Tests = &[(F2P, "t::new", Failed), (Probe, "p::new", Passed)];
        // runs of the reference, the reason (None: not quarantined)
        let rows: Vec<(Vec<Tests>, Option<&str>)> = vec![
            (vec![ALL_PASS, ALL_PASS, ALL_PASS], None),
            // Broken the same way every time: the checks fail, but it is not a flake.
            (vec![always_failing, always_failing], None),
            (vec![ALL_PASS, flaky_probe],
             Some("the reference is flaky: `p::new` passed only on a rerun in reference-2")),
            (vec![ALL_PASS, failing],
             Some("the reference is flaky: `t::new` passed in some reference runs and not in others")),
        ];
        for (runs, want) in rows {
            assert_eq!(quarantine(&refs(&runs)).as_deref(), want, "{runs:?}");
        }
        // A flaky base or null patch is not the reference's flake.
        let mut all = refs(&[ALL_PASS]);
        all[0].tests[0].2 = Flaky;
        assert_eq!(quarantine(&all), None);
    }

    #[test]
    #[rustfmt::skip]
    fn a_wrong_patch_must_fail_every_probe_it_names() {
        use Outcome::Flaky;
        let name = "reject collective_duplicated at pkg/dist.py:12";
        let expected = vec![(name.to_owned(), vec!["p::traffic".to_owned(), "p::state".to_owned()])];
        let both_fail: Tests = &[(P2P, "t::old", Passed), (Probe, "p::traffic", Failed), (Probe, "p::state", Failed)];
        let one_passes: Tests = &[(Probe, "p::traffic", Failed), (Probe, "p::state", Passed)];
        let flaky: Tests = &[(Probe, "p::traffic", Flaky), (Probe, "p::state", Failed)];
        let missing: Tests = &[(Probe, "p::state", Failed)];
        let not_run: Tests = &[(Probe, "p::traffic", NotRun), (Probe, "p::state", Failed)];
        // (verdict, tests, the problems)
        let rows: Vec<(Verdict, Tests, Vec<String>)> = vec![
            (Verdict::Unresolved, both_fail, vec![]),
            (Verdict::Unresolved, one_passes, vec![format!("{name}: probe `p::state` is passed")]),
            (Verdict::Unresolved, flaky, vec![format!("{name}: probe `p::traffic` is flaky")]),
            (Verdict::Unresolved, missing, vec![format!("{name}: probe `p::traffic` has no result")]),
            (Verdict::Unresolved, not_run, vec![format!("{name}: probe `p::traffic` is not_run")]),
            (Verdict::Resolved, ALL_PASS, vec![
                format!("{name}: graded resolved"),
                format!("{name}: probe `p::traffic` has no result"),
                format!("{name}: probe `p::state` has no result"),
            ]),
            // An infrastructure error is not evidence either way.
            (Verdict::Error, both_fail, vec![format!("{name}: could not be graded: because")]),
        ];
        for (verdict, tests, want) in rows {
            let got = judge_rejects(&expected, &[run(name, verdict, tests)], Vec::new());
            assert_eq!(got.problems, want, "{verdict:?} {tests:?}");
            assert_eq!(got.ok, want.is_empty());
        }
        // Not graded: said once, whether or not making the patch already failed.
        let got = judge_rejects(&expected, &[], Vec::new());
        assert_eq!(got.problems, vec![format!("{name}: not graded")]);
        let made = vec![format!("{name}: no `collective_duplicated` mutation at line 12")];
        assert_eq!(judge_rejects(&expected, &[], made.clone()).problems, made);
    }
}

#[cfg(test)]
mod follow_up_tests {
    use super::{git, with_follow_ups};

    fn commit(repo: &std::path::Path, file: &str, text: &str, message: &str) -> String {
        std::fs::write(repo.join(file), text).unwrap();
        git(repo, &["add", "-A"]).unwrap();
        git(repo, &["commit", "-q", "-m", message]).unwrap();
        git(repo, &["rev-parse", "HEAD"]).unwrap().trim().to_owned()
    }

    #[test]
    fn fixes_apply_on_top_of_the_reference_and_conflicts_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path();
        git(repo, &["init", "-q"]).unwrap();
        commit(repo, "a.py", "def f():\n    return 1\n", "base");
        let reference = commit(
            repo,
            "a.py",
            "def f():\n    return get_device()\n",
            "the PR",
        );
        // Unrelated later work, then the fix of the PR's code.
        commit(repo, "b.py", "other = 1\n", "later");
        let fix = commit(
            repo,
            "a.py",
            "def f():\n    return device_name()\n",
            "the fix",
        );

        let fixed = with_follow_ups(repo, &reference, std::slice::from_ref(&fix)).unwrap();
        let show = |rev: &str, path: &str| git(repo, &["show", &format!("{rev}:{path}")]);
        assert_eq!(
            show(&fixed, "a.py").unwrap().trim_end(),
            "def f():\n    return device_name()"
        );
        assert!(
            show(&fixed, "b.py").is_err(),
            "only the fix is applied, not later work"
        );
        assert_eq!(
            git(repo, &["rev-parse", &format!("{fixed}^")])
                .unwrap()
                .trim(),
            reference
        );
        // The same fixes always make the same commit.
        assert_eq!(
            with_follow_ups(repo, &reference, std::slice::from_ref(&fix)).unwrap(),
            fixed
        );
        assert_eq!(with_follow_ups(repo, &reference, &[]).unwrap(), reference);

        // A fix that does not apply on the reference is named.
        let clash = commit(repo, "a.py", "def f():\n    return 3\n", "clash");
        let base = git(repo, &["rev-list", "--max-parents=0", "HEAD"]).unwrap();
        let err = with_follow_ups(repo, base.trim(), std::slice::from_ref(&clash)).unwrap_err();
        assert!(
            format!("{err:#}").contains(&format!("{clash} does not apply cleanly")),
            "{err:#}"
        );
    }
}

#[cfg(test)]
mod follow_up_release_tests {
    use super::{commit_sdist, git, with_release_follow_up};
    use crate::task::{FollowUpRelease, Release};
    use std::path::Path;

    fn release(version: &str) -> Release {
        Release {
            name: "pkg".into(),
            version: version.into(),
            sha256: "0".repeat(64),
        }
    }

    /// An sdist as PyPI ships it: one top folder holding the tree.
    fn sdist(dir: &Path, version: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        let top = dir.join(format!("pkg-{version}"));
        for (path, text) in files {
            let file = top.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        let out = dir.join(format!("pkg-{version}.tar.gz"));
        let status = std::process::Command::new("tar")
            .arg("-czf")
            .arg(&out)
            .arg("-C")
            .arg(dir)
            .arg(format!("pkg-{version}"))
            .status()
            .unwrap();
        assert!(status.success());
        out
    }

    #[test]
    fn only_the_named_files_come_from_the_fix_release() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q"]).unwrap();
        let base = sdist(dir.path(), "1.0", &[("pkg/lru.py", "old\n")]);
        let reference = sdist(
            dir.path(),
            "1.1",
            &[("pkg/lru.py", "buggy\n"), ("pkg/other.py", "1.1\n")],
        );
        // The fix release also changed other files, and ships a deeper file of the same name.
        let later = sdist(
            dir.path(),
            "2.0",
            &[
                ("pkg/lru.py", "fixed\n"),
                ("pkg/other.py", "2.0\n"),
                ("vendored/pkg/lru.py", "not this one\n"),
            ],
        );
        let base_sha = commit_sdist(&repo, &base, &release("1.0"), None).unwrap();
        let reference_sha =
            commit_sdist(&repo, &reference, &release("1.1"), Some(&base_sha)).unwrap();
        let fix = FollowUpRelease {
            release: release("2.0"),
            paths: vec!["pkg/lru.py".into()],
            note: None,
        };
        let fixed = with_release_follow_up(&repo, &reference_sha, &later, &fix).unwrap();
        let show = |path: &str| git(&repo, &["show", &format!("{fixed}:{path}")]);
        assert_eq!(show("pkg/lru.py").unwrap(), "fixed");
        assert_eq!(show("pkg/other.py").unwrap(), "1.1", "only the named file");
        assert!(show("vendored/pkg/lru.py").is_err());
        assert_eq!(
            git(&repo, &["rev-parse", &format!("{fixed}^")]).unwrap(),
            reference_sha
        );
        // Deterministic: the same fix makes the same commit.
        assert_eq!(
            with_release_follow_up(&repo, &reference_sha, &later, &fix).unwrap(),
            fixed
        );

        // A path the fix release does not ship is named.
        let missing = FollowUpRelease {
            paths: vec!["pkg/gone.py".into()],
            ..fix
        };
        let err = with_release_follow_up(&repo, &reference_sha, &later, &missing).unwrap_err();
        assert!(
            format!("{err:#}").contains("pkg==2.0 ships no file pkg/gone.py"),
            "{err:#}"
        );
    }
}
