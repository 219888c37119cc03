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

mod judge;
mod source;

pub use judge::{RunSummary, judge, judge_rejects, quarantine};
pub(crate) use source::Source;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::grade::report::Report;
use crate::grade::sandbox::docker::{DockerExecutor, EnvImage};
use crate::grade::{ExecutorChoice, GradeRequest, grade_submission};
use crate::grading::Outcome;
use crate::suite::fetch::Cache;
use crate::suite::git::git;
use crate::task::{Reject, Task};

/// The file written beside task.toml.
pub use crate::task::VALIDATION_FILE;
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
    /// The digest of the probes graded (`task::probes_digest`): a grade with other probes is
    /// not grading what was validated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes_digest: Option<String>,
    /// SHA-256 of task.toml as validated: a grade of an edited task is not of what was validated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_sha256: Option<String>,
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
            unvalidated: crate::grade::Unvalidated::Allow,
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
    let probes_digest = crate::task::probes_digest(
        &crate::task::read_probe_files(&task.probes.dir)
            .with_context(|| format!("cannot read {}", task.probes.dir.display()))?,
    );
    let validation = Validation {
        schema_version: SCHEMA_VERSION,
        task: task.id.clone(),
        infradev_version: env!("CARGO_PKG_VERSION").to_owned(),
        validated_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ok: checks.iter().all(|c| c.ok),
        probes_digest: Some(probes_digest),
        task_sha256: std::fs::read(task.manifest_path())
            .ok()
            .map(|b| crate::task::manifest_digest(&b)),
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
    let candidates = crate::suite::mutate::mutate(&opts.python, &opts.runners, vec![file])?;
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
    crate::suite::mutate::commit_candidate(&source.repo, &source.reference, mutant)
}
