//! The grading flow: materialise → guard → official tests → probes → classify → report.
//! Every grade, from the CLI or (later) the server and the Actions step, goes through
//! [`grade_submission`]; there is no second pipeline.

pub mod canary;
pub mod guard;
pub mod redact;
pub mod report;
pub mod results;
pub mod sandbox;
pub mod shadow;
pub mod terminal;
pub mod tree;
pub mod workspace;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::grade::canary::Canaries;
use crate::grade::redact::Redactor;
use crate::grade::report::{PhaseReport, Report, SCHEMA_VERSION, SubmissionRef, TaskRef};
use crate::grade::results::{Expected, PhaseResults, SandboxEnd, evidence};
use crate::grade::sandbox::docker::{DockerExecutor, EnvImage};
use crate::grade::sandbox::local::LocalExecutor;
use crate::grade::sandbox::{Executor, Limits, PhaseRun, PhaseSpec};
use crate::grade::workspace::Workspace;
use crate::grading::{
    Expectation, Outcome, Phase, PhaseEvidence, Retries, TestEvidence, combine_attempts, grade,
    needs_rerun, rerun_candidates,
};
use crate::task::Task;
use guard::GuardFlag;

/// Bytes of sandbox output kept per phase.
const OUTPUT_CAP: usize = 256 * 1024;
/// Size of the scratch tmpfs of each sandbox.
const SCRATCH_MB: u64 = 256;
/// Reruns of a failing test or probe when neither the task nor the configuration says.
pub const DEFAULT_RETRIES: u32 = 2;
/// How often live progress re-reads the results file.
const PROGRESS_POLL: Duration = Duration::from_millis(200);

/// Which executor to grade with.
#[derive(Debug, Clone)]
pub enum ExecutorChoice {
    Docker { wheels: Option<PathBuf> },
    Local { python: PathBuf },
}

/// One grade to run.
#[derive(Debug, Clone)]
pub struct GradeRequest {
    pub task: Task,
    /// The submission's git repository (never written to).
    pub repo: PathBuf,
    /// The head revision to grade.
    pub head: String,
    /// `runners/python`: the pytest plugin and config mounted into every sandbox.
    pub lib: PathBuf,
    pub executor: ExecutorChoice,
    /// Keep the private work dir for debugging instead of removing it.
    pub keep_workdir: bool,
    /// Reruns of a failing test or probe (flake handling) unless the task's manifests set
    /// their own (`[tests] retries`, `retries` in probes.toml).
    pub retries: u32,
    /// What to do when the task is not what its validation.json validated.
    pub unvalidated: Unvalidated,
}

/// What a grade does with a task that is not what validation validated (other probes, other
/// an edited task.toml, quarantined, never validated): the report says so either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unvalidated {
    /// Refuse to grade (a task error, never the submission's): `serve`, `run`, `action`.
    Refuse,
    /// Grade, and say so in the report: `grade`, and the suite's own tools.
    Allow,
}

impl GradeRequest {
    /// The reruns this grade allows per phase: the task's, else the request's default.
    pub fn retries(&self) -> Retries {
        Retries {
            tests: self.task.tests.retries.unwrap_or(self.retries),
            probes: self.task.probes.retries.unwrap_or(self.retries),
        }
    }
}

/// Live progress, for a terminal or a log.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    Preparing(&'static str),
    PhaseStarted {
        phase: Phase,
        total: usize,
    },
    PhaseTick {
        phase: Phase,
        done: usize,
    },
    PhaseFinished {
        phase: Phase,
        duration: Duration,
    },
    /// A fresh sandbox phase for the tests that failed: attempt 2 and on.
    Rerun {
        phase: Phase,
        attempt: u32,
        total: usize,
    },
}

/// Errors that stop a grade before anything about the submission is known.
#[derive(Debug, thiserror::Error)]
pub enum GradeError {
    /// The request itself is wrong (no such revision, not a repository).
    #[error("{0:#}")]
    Usage(anyhow::Error),
    /// The task cannot be graded as written (its reference commit is unknown, …).
    #[error("{0:#}")]
    Task(anyhow::Error),
    /// Our side failed (git, the file system) before a sandbox ran.
    #[error("{0:#}")]
    Infra(anyhow::Error),
}

/// Grades one submission and returns the redacted report.
pub async fn grade_submission(
    req: &GradeRequest,
    on_progress: &(dyn Fn(Progress) + Sync),
) -> Result<Report, GradeError> {
    let task = &req.task;
    on_progress(Progress::Preparing("materialising the submission"));
    let (ws, refused) = materialize(req)?;
    tracing::debug!("materialised");
    let prepared = match refused {
        // Nothing of a refused tree is written: it is graded as not applying.
        Some(reason) => PreparedTree {
            apply_error: Some(reason),
            changed_files: Vec::new(),
            flags: Vec::new(),
        },
        None => prepare_tree(&ws, task)?,
    };
    tracing::debug!("tree prepared");

    // What the task's public prompt says is no secret (an unreadable prompt: redact it all).
    let prompt = std::fs::read_to_string(task.prompt_path()).unwrap_or_default();
    let redactor = Redactor::from_sources(
        &task
            .probes
            .sources()
            .context("cannot read the probe sources")
            .map_err(GradeError::Infra)?,
    )
    .with_public(&prompt);
    let Validated {
        probes_digest,
        problems: unvalidated,
    } = validated(task)?;
    refuse_unvalidated(req, &unvalidated)?;
    let mut phases = Vec::new();
    let mut tests = Vec::new();
    let mut limitations = Vec::new();
    let mut executor_name = executor_label(&req.executor);
    let mut images = Vec::new();
    let mut run = None;
    if prepared.apply_error.is_none() {
        on_progress(Progress::Preparing("preparing the sandbox"));
        let executor = prepare_executor(&req.executor, task, &req.lib).await;
        tracing::debug!("executor ready");
        if let Ok(e) = &executor {
            limitations = e.limitations();
            executor_name = e.name();
            images = e.images();
        }
        let run_id: &str = run.insert(new_run_id());
        // A grade dropped half way (cancelled, superseded) removes its sandboxes at once.
        let reaper = executor.as_ref().ok().and_then(|e| e.run_reaper(run_id));
        for phase in [Phase::Tests, Phase::Probes] {
            let expected = expected_tests(task, phase);
            if expected.is_empty() {
                continue; // A probe-only task (the overhead benchmark) has no test phase.
            }
            on_progress(Progress::PhaseStarted {
                phase,
                total: expected.len(),
            });
            let (reports, mut phase_tests) = match &executor {
                Ok(executor) => {
                    let ctx = PhaseContext {
                        executor,
                        req,
                        ws: &ws,
                        run_id,
                        redactor: &redactor,
                    };
                    run_attempts(&ctx, phase, &expected, on_progress)
                        .await
                        .map_err(GradeError::Infra)?
                }
                Err(infra) => {
                    let (report, tests) = not_run(phase, &expected, infra);
                    (vec![report], tests)
                }
            };
            on_progress(Progress::PhaseFinished {
                phase,
                duration: Duration::from_secs_f64(reports.iter().map(|r| r.duration_s).sum()),
            });
            phases.extend(reports);
            tests.append(&mut phase_tests);
        }
        if let Some(reaper) = reaper {
            reaper.disarm();
        }
    } else {
        // The change does not apply: nothing runs, and every expected test is reported not run.
        for phase in [Phase::Tests, Phase::Probes] {
            tests.extend(
                expected_tests(task, phase)
                    .into_iter()
                    .map(|(x, e)| (x, e.not_run(phase))),
            );
        }
    }

    let evidence: Vec<PhaseEvidence> = phases
        .iter()
        .map(|p: &PhaseReport| p.evidence.clone())
        .collect();
    let mut grade = grade(prepared.apply_error.as_deref(), &evidence, tests);
    // Messages came from inside a sandbox: they served classification and are never shown.
    // A report carries only what we compose (ids, categories, requirements, allow-listed
    // exception names, budget figures).
    for test in &mut grade.tests {
        test.evidence.message = None;
    }
    let mut report = Report {
        schema_version: SCHEMA_VERSION,
        task: TaskRef::of(task),
        submission: SubmissionRef {
            repo: req.repo.display().to_string(),
            head: ws.head.clone(),
            changed_files: prepared
                .changed_files
                .iter()
                .map(|p| crate::grade::report::safe_path(p))
                .collect(),
        },
        executor: executor_name.to_owned(),
        executor_limits: limitations,
        flags: prepared
            .flags
            .into_iter()
            .map(|f| crate::grade::report::GuardFlag {
                path: crate::grade::report::safe_path(&f.path),
                reason: crate::grade::report::safe_path(&f.reason),
            })
            .collect(),
        apply_error: prepared.apply_error,
        phases,
        grade,
        probe_requirements: task
            .probes
            .probes
            .iter()
            .map(|p| (p.test.clone(), p.requirement.clone()))
            .collect(),
        images: images
            .into_iter()
            .map(|(tag, id)| crate::grade::report::ImageRef { tag, id })
            .collect(),
        run_id: run,
        provenance: Some(crate::grade::report::Provenance {
            probes_digest,
            unvalidated,
        }),
    };
    redactor.redact_report(&mut report);
    if req.keep_workdir {
        let kept = ws.keep();
        tracing::info!(workdir = %kept.display(), "kept the work dir");
    }
    Ok(report)
}

/// A task's probes against its validation.json, before anything is graded.
pub struct Validated {
    /// The digest of the probe files on disk.
    pub probes_digest: String,
    /// Why grading the task now would not be grading what was validated; empty when it would.
    pub problems: Vec<String>,
}

/// Reads the task's probes, task.toml and validation.json: whether it would be graded as
/// validated.
pub fn validated(task: &Task) -> Result<Validated, GradeError> {
    let probes_digest = crate::task::probes_digest(
        &crate::task::read_probe_files(&task.probes.dir)
            .with_context(|| format!("cannot read {}", task.probes.dir.display()))
            .map_err(GradeError::Infra)?,
    );
    let stamp = crate::task::read_stamp(task).map_err(|e| GradeError::Task(anyhow::anyhow!(e)))?;
    let power = crate::task::load_power_config(task).map_err(|e| GradeError::Task(e.into()))?;
    let manifest = std::fs::read(task.manifest_path())
        .with_context(|| format!("cannot read {}", task.manifest_path().display()))
        .map_err(GradeError::Task)?;
    let problems = crate::task::stamp_problems(
        stamp.as_ref(),
        &probes_digest,
        &crate::task::manifest_digest(&manifest),
        &power,
    );
    Ok(Validated {
        probes_digest,
        problems,
    })
}

/// Stops a grade of a task that is not what was validated, unless the request allows it.
fn refuse_unvalidated(req: &GradeRequest, problems: &[String]) -> Result<(), GradeError> {
    if req.unvalidated == Unvalidated::Allow || problems.is_empty() {
        return Ok(());
    }
    Err(GradeError::Task(anyhow::anyhow!(
        "task `{}` is not graded as it was validated: {} (validate it again, or allow \
         unvalidated tasks: --allow-unvalidated, or `allow_unvalidated = true` in [worker])",
        req.task.id,
        problems.join("; ")
    )))
}

/// What pytest is given to run the tests `ids` (node ids): their files, each once, in order.
/// Files, not node ids: a node id in a file that fails to import makes pytest stop before
/// running anything. Every printed command that runs the official tests uses this too.
pub fn test_targets<'a>(ids: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut targets: Vec<String> = Vec::new();
    for id in ids {
        let file = id.split("::").next().unwrap_or(id);
        if !targets.iter().any(|t| t == file) {
            targets.push(file.to_owned());
        }
    }
    targets
}

/// A grade's sandbox run id: every container and network it makes is labelled with it.
fn new_run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// What the official phase ran in a task's test files, judged by nothing.
#[derive(Debug, Clone, Default)]
pub struct TestFileRun {
    /// Every test that reported, by node id.
    pub outcomes: BTreeMap<String, Outcome>,
    /// Test files that could not be collected (imported).
    pub collect_errors: Vec<String>,
}

/// Runs every test of the task's test files (restored from the reference, as in every
/// grade) at `req.head` and returns each outcome, without expecting or judging any: what
/// `infradev tasks new` proposes FAIL_TO_PASS and PASS_TO_PASS from. For upstream commits
/// only; a grade of a submission goes through [`grade_submission`].
pub async fn run_test_files(req: &GradeRequest) -> Result<TestFileRun, GradeError> {
    let task = &req.task;
    let (ws, refused) = materialize(req)?;
    if let Some(reason) = refused {
        return Err(GradeError::Usage(anyhow::anyhow!(reason)));
    }
    let prepared = prepare_tree(&ws, task)?;
    if let Some(e) = prepared.apply_error {
        return Err(GradeError::Usage(anyhow::anyhow!(e)));
    }
    let executor = prepare_executor(&req.executor, task, &req.lib)
        .await
        .map_err(|e| GradeError::Infra(anyhow::anyhow!(e)))?;
    let redactor = Redactor::from_sources(&[]);
    let run_id = new_run_id();
    let ctx = PhaseContext {
        executor: &executor,
        req,
        ws: &ws,
        run_id: &run_id,
        redactor: &redactor,
    };
    let (run, canaries) = run_sandbox(&ctx, Phase::Tests, 1, task.tests.files.clone(), &|_| {})
        .await
        .map_err(GradeError::Infra)?;
    if let Some(e) = run.end.infra_error {
        return Err(GradeError::Infra(anyhow::anyhow!(e)));
    }
    let (mut outcomes, collect_errors) = run.results.outcomes();
    if let Some(c) = canaries {
        outcomes.retain(|id, _| !id.starts_with(&c.file));
    }
    Ok(TestFileRun {
        outcomes,
        collect_errors,
    })
}

/// Builds (or finds) what a task's grades run in, once, before many grades of it start at
/// the same time (`infradev run`): the environment image for Docker. An error is our side's.
pub async fn prepare_environment(
    choice: &ExecutorChoice,
    task: &Task,
    lib: &Path,
) -> Result<(), String> {
    prepare_executor(choice, task, lib).await.map(|_| ())
}

/// The report of a submission whose diff does not apply to the task's base commit: nothing
/// ran, every expected test is `not_run`, and the verdict is the submission's (`unresolved`,
/// `build`). `reason` is text we compose, never the diff tool's output.
pub fn report_unapplied(
    task: &Task,
    repo: &str,
    choice: &ExecutorChoice,
    reason: String,
) -> Report {
    let mut tests = Vec::new();
    for phase in [Phase::Tests, Phase::Probes] {
        tests.extend(
            expected_tests(task, phase)
                .into_iter()
                .map(|(x, e)| (x, e.not_run(phase))),
        );
    }
    let mut grade = grade(Some(&reason), &[], tests);
    for test in &mut grade.tests {
        test.evidence.message = None;
    }
    Report {
        schema_version: SCHEMA_VERSION,
        task: TaskRef::of(task),
        submission: SubmissionRef {
            repo: repo.to_owned(),
            head: task.base_commit.clone(),
            changed_files: Vec::new(),
        },
        executor: executor_label(choice).to_owned(),
        executor_limits: Vec::new(),
        flags: Vec::new(),
        apply_error: Some(reason),
        phases: Vec::new(),
        grade,
        probe_requirements: task
            .probes
            .probes
            .iter()
            .map(|p| (p.test.clone(), p.requirement.clone()))
            .collect(),
        images: Vec::new(),
        run_id: None,
        provenance: None,
    }
}

fn executor_label(choice: &ExecutorChoice) -> &'static str {
    match choice {
        ExecutorChoice::Docker { .. } => "docker",
        ExecutorChoice::Local { .. } => "local",
    }
}

/// The submission tree after the guard, ready to mount.
struct PreparedTree {
    apply_error: Option<String>,
    changed_files: Vec<String>,
    flags: Vec<GuardFlag>,
}

/// The submission cloned into a private work dir, and its tree written there only if
/// `tree::check_tree` accepts it (judged from git's objects first); else why it is refused,
/// the submission's own fault.
fn materialize(req: &GradeRequest) -> Result<(Workspace, Option<String>), GradeError> {
    let ws = Workspace::clone_of(&req.repo, &req.head).map_err(GradeError::Usage)?;
    let tree_of = |rev: &str| ws.tree(rev).map_err(GradeError::Infra);
    let head = tree_of(&ws.head)?.unwrap_or_default();
    let base = tree_of(&req.task.base_commit)?.unwrap_or_default();
    let written: Vec<&str> = req.task.tests.files.iter().map(String::as_str).collect();
    let refused = tree::check_tree(&head, &base, &written);
    if refused.is_none() {
        ws.checkout().map_err(GradeError::Infra)?;
    }
    Ok((ws, refused))
}

/// Neutralises test-infrastructure changes and restores the official tests from the reference.
fn prepare_tree(ws: &Workspace, task: &Task) -> Result<PreparedTree, GradeError> {
    let changes = match ws
        .changes_since(&task.base_commit)
        .map_err(GradeError::Infra)?
    {
        Ok(changes) => changes,
        Err(e) => {
            return Ok(PreparedTree {
                apply_error: Some(e.0),
                changed_files: Vec::new(),
                flags: Vec::new(),
            });
        }
    };
    if !ws.has_commit(&task.reference_commit) {
        return Err(GradeError::Task(anyhow::anyhow!(
            "task `{}`: its reference commit {} is not in the submission repository; fetch it from {} first",
            task.id,
            task.reference_commit,
            task.repository
        )));
    }
    let mut flags = Vec::new();
    // Where the repository is on sys.path: its root, and (pytest's `prepend` import mode)
    // every folder holding an official test file.
    let mut sys_path_dirs: Vec<&str> = vec![""];
    sys_path_dirs.extend(
        task.tests
            .files
            .iter()
            .map(|f| f.rsplit_once('/').map_or("", |(d, _)| d)),
    );
    for change in &changes {
        if task.tests.files.contains(&change.path) {
            continue; // Restored from the reference below.
        }
        if ws.read_at(&task.base_commit, &change.path).is_none()
            && let Some(flag) = guard::shadowing(change, &sys_path_dirs)
        {
            // Not upstream's: removed, like any file that could steer the run.
            ws.reset_path(&task.reference_commit, &change.path)
                .map_err(GradeError::Infra)?;
            flags.push(flag);
            continue;
        }
        let path = ws.repo.join(&change.path);
        let head = crate::grade::workspace::read_tree_file(&path);
        let reference = ws.read_at(&task.reference_commit, &change.path);
        if head == reference && (head.is_some() || path.symlink_metadata().is_err()) {
            continue; // The upstream change itself made this edit (or deletion).
        }
        let base = ws.read_at(&task.base_commit, &change.path);
        if let Some(flag) = guard::inspect(change, base.as_deref(), head.as_deref()) {
            // Test infrastructure is the reference's, like the official tests: the base's
            // version unless the upstream change itself edited it.
            ws.reset_path(&task.reference_commit, &change.path)
                .map_err(GradeError::Infra)?;
            flags.push(flag);
        }
    }
    for file in &task.tests.files {
        ws.reset_path(&task.reference_commit, file)
            .map_err(GradeError::Infra)?;
    }
    Ok(PreparedTree {
        apply_error: None,
        changed_files: changes.into_iter().map(|c| c.path).collect(),
        flags,
    })
}

async fn prepare_executor(
    choice: &ExecutorChoice,
    task: &Task,
    lib: &Path,
) -> Result<Executor, String> {
    match choice {
        ExecutorChoice::Local { python } => {
            // Our side: an interpreter that cannot import pytest would make every official test
            // "crashed" and blame the submission.
            let ok = tokio::process::Command::new(python)
                .args(["-c", "import pytest"])
                .output()
                .await
                .is_ok_and(|o| o.status.success());
            if !ok {
                return Err(format!(
                    "the local executor's Python ({}) cannot import pytest (apt-get install \
                     python3-pytest, or --python another interpreter)",
                    python.display()
                ));
            }
            Ok(Executor::Local(LocalExecutor::new(python.clone())))
        }
        ExecutorChoice::Docker { wheels } => {
            let docker = DockerExecutor::connect()
                .await
                .map_err(|e| format!("{e:#}"))?;
            match DockerExecutor::reap_orphans(&docker).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(containers = n, "removed orphaned sandbox containers"),
                Err(e) => tracing::warn!(error = %e, "could not list orphaned sandbox containers"),
            }
            let runners = lib.parent().unwrap_or(lib);
            let image = EnvImage::ensure(&docker, task, runners, wheels.as_deref())
                .await
                .map_err(|e| format!("{e:#}"))?;
            Ok(Executor::Docker(DockerExecutor::new(docker, image)))
        }
    }
}

/// The tests a phase must report, with why each is expected and its declared category.
fn expected_tests(task: &Task, phase: Phase) -> Vec<(Expectation, Expected)> {
    let official = |ids: &[String], x: Expectation| -> Vec<(Expectation, Expected)> {
        ids.iter()
            .map(|id| {
                (
                    x,
                    Expected {
                        id: id.clone(),
                        declared: Some(task.tests.default_category),
                    },
                )
            })
            .collect()
    };
    match phase {
        Phase::Tests => {
            let mut all = official(&task.tests.fail_to_pass, Expectation::FailToPass);
            all.extend(official(&task.tests.pass_to_pass, Expectation::PassToPass));
            all
        }
        Phase::Probes => task
            .probes
            .probes
            .iter()
            .map(|p| {
                (
                    Expectation::Probe,
                    Expected {
                        id: p.test.clone(),
                        declared: Some(p.category),
                    },
                )
            })
            .collect(),
    }
}

/// The official phase's spec file: the per-test timeout only. Which tests count is decided
/// on the host from the results; the sandbox never sees the list.
#[derive(Serialize)]
struct SpecFile {
    phase: Phase,
    test_timeout_s: u64,
}

/// What every phase of one grade shares.
struct PhaseContext<'a> {
    executor: &'a Executor,
    req: &'a GradeRequest,
    ws: &'a Workspace,
    run_id: &'a str,
    redactor: &'a Redactor,
}

/// Slack beyond a phase's own wall clock before the grade gives up on our side.
const PHASE_GRACE: Duration = Duration::from_secs(180);

/// A phase and its reruns: the first attempt runs every expected test; each rerun is a fresh
/// sandbox phase (its own directory, scratch, canaries and run of the executor) for the tests
/// that still fail, until they pass or the phase's retries are spent. Which tests are rerun
/// and what their attempts add up to is decided here, on the host, from the evidence
/// (`grading::needs_rerun`, `grading::combine_attempts`); the sandbox is never told.
async fn run_attempts(
    ctx: &PhaseContext<'_>,
    phase: Phase,
    expected: &[(Expectation, Expected)],
    on_progress: &(dyn Fn(Progress) + Sync),
) -> anyhow::Result<(Vec<PhaseReport>, Vec<(Expectation, TestEvidence)>)> {
    let (first, tests) = run_phase(ctx, phase, 1, expected, on_progress).await?;
    let firsts: Vec<TestEvidence> = tests.iter().map(|(_, t)| t.clone()).collect();
    let mut pending = rerun_candidates(&first.evidence, &firsts);
    let mut reports = vec![first];
    let mut reruns: Vec<Vec<TestEvidence>> = vec![Vec::new(); tests.len()];
    for attempt in 2..=ctx.req.retries().for_phase(phase) + 1 {
        if pending.is_empty() {
            break;
        }
        on_progress(Progress::Rerun {
            phase,
            attempt,
            total: pending.len(),
        });
        let subset: Vec<(Expectation, Expected)> =
            pending.iter().map(|&i| expected[i].clone()).collect();
        let (report, got) = run_phase(ctx, phase, attempt, &subset, on_progress).await?;
        for (&i, (_, evidence)) in pending.iter().zip(got) {
            reruns[i].push(evidence);
        }
        pending.retain(|&i| {
            reruns[i]
                .last()
                .is_some_and(|last| needs_rerun(&report.evidence, last))
        });
        reports.push(report);
    }
    let tests = tests
        .into_iter()
        .zip(reruns)
        .map(|((x, first), reruns)| (x, combine_attempts(first, &reruns)))
        .collect();
    Ok((reports, tests))
}

async fn run_phase(
    ctx: &PhaseContext<'_>,
    phase: Phase,
    attempt: u32,
    expected: &[(Expectation, Expected)],
    on_progress: &(dyn Fn(Progress) + Sync),
) -> anyhow::Result<(PhaseReport, Vec<(Expectation, TestEvidence)>)> {
    // Files, not node ids: a node id in a file that fails to import makes pytest stop before
    // running anything ("not found"), which would hide every other file's results. A rerun
    // names the failing ids: it never reruns an import failure (`build`), and a file that
    // fails to import only now leaves its ids failing, which they were already.
    let ids = expected.iter().map(|(_, e)| e.id.as_str());
    let targets: Vec<String> = match attempt {
        1 => test_targets(ids),
        _ => {
            let mut targets: Vec<String> = Vec::new();
            for id in ids {
                if !targets.iter().any(|t| t == id) {
                    targets.push(id.to_owned());
                }
            }
            targets
        }
    };
    let (run, canaries) = run_sandbox(ctx, phase, attempt, targets, on_progress).await?;
    let (mut phase_evidence, tests) = judge(phase, expected, &run.results, &run.end);
    if let Some(c) = &canaries
        && phase_evidence.infra_error.is_none()
    {
        phase_evidence.tampered = c.check(&run.results, &run.end);
    }
    Ok((
        PhaseReport {
            evidence: phase_evidence,
            duration_s: run.duration.as_secs_f64(),
            attempt,
        },
        tests,
    ))
}

/// Runs one phase's sandbox over `targets` (test files; the probe files for the judge) and
/// returns how it ended with everything it reported, and the official phase's canaries.
async fn run_sandbox(
    ctx: &PhaseContext<'_>,
    phase: Phase,
    attempt: u32,
    mut targets: Vec<String>,
    on_progress: &(dyn Fn(Progress) + Sync),
) -> anyhow::Result<(PhaseRun, Option<Canaries>)> {
    let PhaseContext {
        executor,
        req,
        ws,
        run_id,
        redactor,
    } = *ctx;
    let task = &req.task;
    let dir = match attempt {
        1 => ws.dir().join(phase.as_str()),
        n => ws.dir().join(format!("{}-{n}", phase.as_str())),
    };
    let scratch = dir.join("tmp");
    for d in [&dir, &scratch] {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    // The sandbox user is not us: scratch must be writable by it, the rest only traversable.
    set_mode(&scratch, 0o1777)?;
    set_mode(&dir, 0o711)?;
    set_mode(ws.dir(), 0o711)?;
    let budgets = match phase {
        Phase::Probes => task
            .probes
            .probes
            .iter()
            .filter(|p| !p.budget.is_empty())
            .map(|p| (p.test.clone(), p.budget.clone()))
            .collect(),
        Phase::Tests => Vec::new(),
    };
    let spec_file = dir.join("spec.json");
    let spec_json = serde_json::to_vec_pretty(&SpecFile {
        phase,
        test_timeout_s: task.resources.test_timeout_s,
    })?;
    std::fs::write(&spec_file, spec_json)
        .with_context(|| format!("cannot write {}", spec_file.display()))?;
    set_mode(&spec_file, 0o644)?;

    // The official phase gets this run's canaries, first, so they report before anything
    // the submission does can end the phase.
    let canaries = match phase {
        Phase::Tests => {
            let first_file = targets[0].split("::").next().unwrap_or(&targets[0]);
            // The module as restored from the reference (never read through the work tree).
            let module = ws
                .read_at(&task.reference_commit, first_file)
                .unwrap_or_default();
            let c = Canaries::new(uuid::Uuid::new_v4().as_u128(), first_file, &module);
            ws.plant_file(&c.file, &c.source, 0o644)?;
            targets.insert(0, c.file.clone());
            Some(c)
        }
        Phase::Probes => None,
    };
    let wall = Duration::from_secs(match phase {
        Phase::Tests => task.resources.timeouts.tests_s,
        Phase::Probes => task.resources.timeouts.probes_s,
    });
    let spec = PhaseSpec {
        phase,
        run_id: run_id.to_owned(),
        repo: ws.repo.clone(),
        probes: (phase == Phase::Probes).then(|| task.probes.dir.clone()),
        lib: req.lib.clone(),
        spec_file,
        dir: dir.clone(),
        scratch,
        targets,
        limits: Limits {
            memory_mb: task.resources.memory_mb,
            cpus: task.resources.cpus,
            pids: task.resources.pids,
            wall,
            output_bytes: OUTPUT_CAP,
            scratch_mb: SCRATCH_MB,
        },
        gpus: task.resources.gpus.clone(),
        plugins: task.environment.pytest_plugins.clone(),
        env: task
            .environment
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        test_timeout_s: task.resources.test_timeout_s,
        budgets,
    };
    let progress = Arc::new(AtomicUsize::new(0));
    let run: Option<PhaseRun> = {
        // Every phase ends with a verdict: past its wall clock and a grace, our side has hung.
        let run = tokio::time::timeout(
            wall * 2 + PHASE_GRACE,
            executor.run(&spec, progress.clone()),
        );
        tokio::pin!(run);
        let mut tick = tokio::time::interval(PROGRESS_POLL);
        loop {
            tokio::select! {
                r = &mut run => break r.ok(),
                _ = tick.tick() => {
                    on_progress(Progress::PhaseTick { phase, done: progress.load(Ordering::Relaxed) });
                }
            }
        }
    };
    if let Some(c) = &canaries {
        let _ = std::fs::remove_file(ws.repo.join(&c.file));
    }
    let run = run.unwrap_or_else(|| PhaseRun {
        end: SandboxEnd {
            exit_code: None,
            kill: None,
            infra_error: Some(
                "the phase did not end within its deadline (the grader's side hung)".to_owned(),
            ),
        },
        results: Default::default(),
        output: String::new(),
        duration: wall * 2 + PHASE_GRACE,
    });
    tracing::debug!(phase = ?phase, output = %redactor.redact(&run.output), "sandbox output");
    Ok((run, canaries))
}

/// Evidence for each expected test of a phase, each with why it is expected.
fn judge(
    phase: Phase,
    expected: &[(Expectation, Expected)],
    results: &PhaseResults,
    end: &SandboxEnd,
) -> (PhaseEvidence, Vec<(Expectation, TestEvidence)>) {
    let bare: Vec<Expected> = expected.iter().map(|(_, e)| e.clone()).collect();
    let (phase_evidence, tests) = evidence(phase, &bare, results, end);
    (
        phase_evidence,
        expected.iter().map(|(x, _)| *x).zip(tests).collect(),
    )
}

/// A phase that could not run because our side failed before it.
fn not_run(
    phase: Phase,
    expected: &[(Expectation, Expected)],
    infra: &str,
) -> (PhaseReport, Vec<(Expectation, TestEvidence)>) {
    let end = SandboxEnd {
        exit_code: None,
        kill: None,
        infra_error: Some(infra.to_owned()),
    };
    let (phase_evidence, tests) = judge(phase, expected, &PhaseResults::default(), &end);
    (
        PhaseReport {
            evidence: phase_evidence,
            duration_s: 0.0,
            attempt: 1,
        },
        tests,
    )
}

fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", path.display()))
}
