//! The runs of `infradev tasks power`: the reference change's hunks, the mutation tool
//! (runners/tasks/mutate.py, on the host), one commit per candidate on top of the reference,
//! and the grades: every candidate goes through [`grade_submission`] in the task's one
//! environment image, `--jobs` at a time.
//!
//! A candidate is graded in steps, each a normal grade of a narrowed task: its official tests
//! first (a candidate that fails one is discarded, and its probes are not run), then its probes
//! on seed 0 (the real grades' workload), then, for a mutant no probe killed, its probes on
//! seed 1. The reference is graded the same way first; everything is judged against it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_util::StreamExt;

use super::{
    Candidate, Counts, Evidence, Kind, MutantRecord, Outcomes, PowerRecord, SEED_ENV, SEEDS, Site,
    Status, VariantRecord, VariantStatus, changed_ranges, judge_mutant, judge_variant, kill_rate,
    operator_counts, percent, probes_digest, read_probe_files, select,
};
use crate::grade::{ExecutorChoice, GradeRequest, grade_submission};
use crate::grading::{Expectation, Verdict};
use crate::suite::fetch::Cache;
use crate::suite::git::git;
use crate::suite::mutate::{commit_candidate, mutate};
use crate::suite::validate::{Source, VALIDATION_FILE, ValidateOptions, read_validation};
use crate::task::{PowerConfig, Scope, Task, load_power_config};

/// How to run the analysis.
#[derive(Debug, Clone)]
pub struct PowerOptions {
    /// The repository's runners/ folder.
    pub runners: PathBuf,
    pub cache: Cache,
    /// A local clone of the upstream repository (git-sourced tasks).
    pub git: Option<PathBuf>,
    /// The Python that runs runners/tasks/mutate.py.
    pub python: PathBuf,
    /// At most this many candidates per operator (mutants and variants each).
    pub cap_per_operator: usize,
    /// Grades at once.
    pub jobs: usize,
    /// Where `<task-id>.validation.json` goes instead of the task's validation.json.
    pub out_dir: Option<PathBuf>,
}

impl PowerOptions {
    pub fn record_path(&self, task: &Task) -> PathBuf {
        match &self.out_dir {
            Some(dir) => dir.join(format!("{}.{VALIDATION_FILE}", task.id)),
            None => task.dir.join(VALIDATION_FILE),
        }
    }
}

/// The candidates of a task's reference change, from runners/tasks/mutate.py.
pub fn generate(
    task: &Task,
    repo: &Path,
    base: &str,
    reference: &str,
    scope: &Scope,
    opts: &PowerOptions,
) -> anyhow::Result<Vec<Candidate>> {
    let diff = git(
        repo,
        &[
            "diff",
            "-U0",
            "--no-renames",
            "--no-color",
            base,
            reference,
            "--",
            "*.py",
        ],
    )?;
    let mut files = Vec::new();
    for (path, ranges) in changed_ranges(&diff) {
        if task.tests.files.contains(&path) {
            continue; // The official tests are restored from the reference in every grade.
        }
        if !scope.covers(&path) {
            continue; // Part of the upstream change the task does not ask for (power.toml).
        }
        let source = git(repo, &["show", &format!("{reference}:{path}")])?;
        files.push(serde_json::json!({ "path": path, "source": source + "\n", "changed": ranges }));
    }
    if files.is_empty() {
        bail!(
            "task `{}`: the reference change touches no Python file outside the official tests \
             and power.toml's scope (`out_of_scope`, `only`)",
            task.id
        );
    }
    mutate(&opts.python, &opts.runners, files)
}

/// Which part of a grade to run.
#[derive(Debug, Clone, Copy)]
enum Step {
    Official,
    Probes { seed: u32 },
}

/// The task narrowed to one step: only its official tests, or only its probes with a seed.
fn narrowed(task: &Task, step: Step) -> Task {
    let mut t = task.clone();
    match step {
        Step::Official => t.probes.probes.clear(),
        Step::Probes { seed } => {
            t.tests.fail_to_pass.clear();
            t.tests.pass_to_pass.clear();
            if seed != 0 {
                t.environment.env.insert(SEED_ENV.into(), seed.to_string());
            }
        }
    }
    t
}

/// Grades one step of one head; `Err` is a fault of ours (the verdict `error` included).
async fn grade_step(
    task: &Task,
    repo: &Path,
    head: &str,
    step: Step,
    opts: &PowerOptions,
) -> anyhow::Result<Outcomes> {
    let request = GradeRequest {
        task: narrowed(task, step),
        repo: repo.to_path_buf(),
        head: head.to_owned(),
        lib: opts.runners.join("python"),
        executor: ExecutorChoice::Docker {
            wheels: Some(opts.cache.wheels()),
        },
        keep_workdir: false,
        // A mutant is graded once: power counts kills, and a rerun per failure would
        // multiply the cost of every killed mutant.
        retries: 0,
        unvalidated: crate::grade::Unvalidated::Allow,
    };
    let report = grade_submission(&request, &|_| {}).await?;
    if report.grade.verdict == Verdict::Error {
        bail!("{}", report.grade.reason);
    }
    let want_probe = matches!(step, Step::Probes { .. });
    Ok(report
        .grade
        .tests
        .iter()
        .filter(|t| (t.expectation == Expectation::Probe) == want_probe)
        .map(|t| (t.evidence.id.clone(), t.evidence.outcome))
        .collect())
}

/// Grades the probes on one seed; a failure of only time-budgeted probes is graded again and
/// kept only when it reproduces (the machine may be loaded by other work).
async fn grade_probes(
    task: &Task,
    repo: &Path,
    head: &str,
    seed: u32,
    reference: &Outcomes,
    opts: &PowerOptions,
) -> anyhow::Result<Outcomes> {
    let first = grade_step(task, repo, head, Step::Probes { seed }, opts).await?;
    let budgeted: Vec<String> = task
        .probes
        .probes
        .iter()
        .filter(|p| p.budget.wall_time_s.is_some())
        .map(|p| p.test.clone())
        .collect();
    if !super::needs_confirmation(&first, reference, &budgeted) {
        return Ok(first);
    }
    let second = grade_step(task, repo, head, Step::Probes { seed }, opts).await?;
    Ok(super::reproduced(&first, &second))
}

/// The reference's outcomes: its official tests, and its probes on every seed.
struct Baseline {
    official: Outcomes,
    probes: Vec<(u32, Outcomes)>,
}

impl Baseline {
    fn probes_on(&self, seed: u32) -> &Outcomes {
        &self
            .probes
            .iter()
            .find(|(s, _)| *s == seed)
            .expect("the reference is graded on every seed")
            .1
    }
}

enum Graded {
    Mutant(MutantRecord),
    Variant(VariantRecord),
}

async fn grade_candidate(
    task: &Task,
    repo: &Path,
    head: &str,
    c: &Candidate,
    baseline: &Baseline,
    config: &PowerConfig,
    opts: &PowerOptions,
) -> Graded {
    let site = Site::of(c);
    let error = |e: anyhow::Error| format!("{e:#}");
    let official = match grade_step(task, repo, head, Step::Official, opts).await {
        Ok(o) => o,
        Err(e) => return errored(c.kind, site, error(e)),
    };
    match c.kind {
        Kind::Variant => {
            let probes = if super::differing(&official, &baseline.official).is_empty() {
                let reference = baseline.probes_on(SEEDS[0]);
                match grade_probes(task, repo, head, SEEDS[0], reference, opts).await {
                    Ok(p) => p,
                    Err(e) => return errored(c.kind, site, error(e)),
                }
            } else {
                Outcomes::new()
            };
            let (status, failed) = judge_variant(
                &official,
                &probes,
                &baseline.official,
                baseline.probes_on(SEEDS[0]),
            );
            Graded::Variant(VariantRecord {
                site,
                status,
                failed,
                note: None,
            })
        }
        Kind::Mutant => {
            let mut probes = Vec::new();
            if super::differing(&official, &baseline.official).is_empty() {
                for seed in SEEDS {
                    let reference = baseline.probes_on(seed);
                    match grade_probes(task, repo, head, seed, reference, opts).await {
                        Ok(p) => {
                            let killed = !super::differing(&p, baseline.probes_on(seed)).is_empty();
                            probes.push((seed, p));
                            if killed && seed == SEEDS[0] {
                                break; // Killed on the real workload: no need for more.
                            }
                        }
                        Err(e) => return errored(c.kind, site, error(e)),
                    }
                }
            }
            let evidence = if c.bytecode_equal {
                Some(Evidence::Bytecode)
            } else {
                config
                    .equivalent
                    .iter()
                    .find(|a| a.mutant == c.id)
                    .map(|a| Evidence::Reviewed(a.reason.clone()))
            };
            let j = judge_mutant(
                &official,
                &probes,
                &baseline.official,
                &baseline.probes,
                evidence.as_ref(),
            );
            Graded::Mutant(MutantRecord::new(site, j))
        }
    }
}

fn errored(kind: Kind, site: Site, why: String) -> Graded {
    match kind {
        Kind::Mutant => Graded::Mutant(MutantRecord {
            site,
            status: Status::Error,
            official: "error".into(),
            probes: "not_run".into(),
            official_failed: Vec::new(),
            killed_by: Vec::new(),
            other_seed_kills: Vec::new(),
            note: Some(why),
        }),
        Kind::Variant => Graded::Variant(VariantRecord {
            site,
            status: VariantStatus::Error,
            failed: Vec::new(),
            note: Some(why),
        }),
    }
}

/// Runs the analysis for one task and writes its record into validation.json (the task's, or
/// `<out-dir>/<task-id>.validation.json`). Errors are faults of ours or a task that cannot be
/// analysed (no validation.json yet, a reference that does not pass).
pub async fn power_task(task: &Task, opts: &PowerOptions) -> anyhow::Result<PowerRecord> {
    let started = Instant::now();
    let config = load_power_config(task)?;
    let digest = probes_digest(
        &read_probe_files(&task.probes.dir)
            .with_context(|| format!("cannot read {}", task.probes.dir.display()))?,
    );
    let existing = read_validation(&opts.record_path(task))
        .or_else(|| read_validation(&task.dir.join(VALIDATION_FILE)))
        .with_context(|| {
            format!(
                "task `{}` has no validation.json: validate it first (`infradev tasks validate {}`)",
                task.id, task.id
            )
        })?;

    let validate_opts = ValidateOptions {
        runners: opts.runners.clone(),
        python: opts.python.clone(),
        cache: opts.cache.clone(),
        git: opts.git.clone(),
        reference_runs: 1,
        retries: 0,
        out_dir: None,
    };
    let source = Source::prepare(task, &validate_opts).await?;
    let mut graded_task = task.clone();
    graded_task.base_commit = source.base.clone();
    graded_task.reference_commit = source.reference.clone();

    let scope = config.scope();
    let candidates = generate(
        task,
        &source.repo,
        &source.base,
        &source.reference,
        &scope,
        opts,
    )?;
    let selected = select(&candidates, opts.cap_per_operator);
    let operators = operator_counts(&candidates, &selected);
    let (n_mutants, n_variants) = (
        selected.iter().filter(|c| c.kind == Kind::Mutant).count(),
        selected.iter().filter(|c| c.kind == Kind::Variant).count(),
    );
    eprintln!(
        "power {}: {} candidate(s) from the reference change; grading {n_mutants} mutant(s) and \
         {n_variants} variant(s) (at most {} per operator), {} at a time",
        task.id,
        candidates.len(),
        opts.cap_per_operator,
        opts.jobs.max(1)
    );

    eprintln!("power {}: grading the reference", task.id);
    let reference = source.reference.clone();
    let official = grade_step(&graded_task, &source.repo, &reference, Step::Official, opts)
        .await
        .context("grading the reference's official tests")?;
    let all_passed: Outcomes = task
        .probes
        .probes
        .iter()
        .map(|p| (p.test.clone(), crate::grading::Outcome::Passed))
        .collect();
    let mut probes = Vec::new();
    for seed in SEEDS {
        let p = grade_probes(
            &graded_task,
            &source.repo,
            &reference,
            seed,
            &all_passed,
            opts,
        )
        .await
        .with_context(|| format!("grading the reference's probes on seed {seed}"))?;
        probes.push((seed, p));
    }
    let not_passing: Vec<String> = std::iter::once(&official)
        .chain(probes.iter().map(|(_, p)| p))
        .flat_map(|o| o.iter())
        .filter(|(_, o)| **o != crate::grading::Outcome::Passed)
        .map(|(id, o)| format!("{id} ({})", o.as_str()))
        .collect();
    if !not_passing.is_empty() {
        bail!(
            "task `{}`: the reference does not pass everything on every seed ({}); a probe \
             that reads {SEED_ENV} must hold for the reference on every seed",
            task.id,
            not_passing.join(", ")
        );
    }
    let baseline = Baseline { official, probes };
    let reference_time = started.elapsed();

    let mut heads = Vec::with_capacity(selected.len());
    for c in &selected {
        heads.push(commit_candidate(&source.repo, &reference, c)?);
    }

    let total = selected.len();
    let grading = Instant::now();
    let mut mutants = Vec::new();
    let mut variants = Vec::new();
    let mut stream = futures_util::stream::iter(selected.iter().zip(&heads).map(|(c, head)| {
        let (task, repo, baseline, config) = (&graded_task, &source.repo, &baseline, &config);
        async move {
            let t0 = Instant::now();
            let g = grade_candidate(task, repo, head, c, baseline, config, opts).await;
            (c, g, t0.elapsed())
        }
    }))
    .buffer_unordered(opts.jobs.max(1));
    let mut done = 0usize;
    while let Some((c, graded, took)) = stream.next().await {
        done += 1;
        let what = match &graded {
            Graded::Mutant(m) => describe_mutant(m),
            Graded::Variant(v) => describe_variant(v),
        };
        let left = estimate(grading.elapsed(), done, total);
        eprintln!(
            "power {}: [{done}/{total}] {:?} {} {} {}:{} → {what} ({:.1} s; about {} left)",
            task.id,
            c.kind,
            c.id,
            c.operator,
            c.path,
            c.line,
            took.as_secs_f64(),
            clock(left)
        );
        match graded {
            Graded::Mutant(m) => mutants.push(m),
            Graded::Variant(v) => variants.push(v),
        }
    }
    drop(stream);
    let order = |s: &Site| {
        selected
            .iter()
            .position(|c| c.id == s.id)
            .unwrap_or(usize::MAX)
    };
    mutants.sort_by_key(|m| order(&m.site));
    variants.sort_by_key(|v| order(&v.site));

    let statuses: Vec<Status> = mutants.iter().map(|m| m.status).collect();
    let record = PowerRecord {
        computed_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        infradev_version: env!("CARGO_PKG_VERSION").to_owned(),
        probes_digest: digest,
        reference_commit: source.reference.clone(),
        threshold: config.threshold,
        cap_per_operator: opts.cap_per_operator,
        out_of_scope: scope.out_of_scope,
        only: scope.only,
        seeds: SEEDS.to_vec(),
        kill_rate: kill_rate(&statuses),
        counts: Counts::of(&mutants, &variants),
        operators,
        mutants,
        variants,
        duration_s: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    };
    write_record(task, opts, existing, &record)?;
    eprintln!(
        "power {}: reference graded in {:.0} s, candidates in {:.0} s",
        task.id,
        reference_time.as_secs_f64(),
        grading.elapsed().as_secs_f64()
    );
    Ok(record)
}

/// `tasks power --rejudge`: applies power.toml's reviewed equivalents to the recorded power
/// of a task without grading again (a survivor reviewed as equivalent after a long run), and
/// writes the record back. The record must have been computed against the probes as they are.
pub fn rejudge_task(task: &Task, opts: &PowerOptions) -> anyhow::Result<PowerRecord> {
    let config = load_power_config(task)?;
    let path = [opts.record_path(task), task.dir.join(VALIDATION_FILE)]
        .into_iter()
        .find(|p| read_validation(p).is_some_and(|v| v.power.is_some()))
        .with_context(|| {
            format!(
                "task `{}` has no power record to rejudge: run `infradev tasks power {}` first",
                task.id, task.id
            )
        })?;
    let mut validation = read_validation(&path).context("validation.json went away")?;
    let mut record = validation.power.take().context("no power record")?;
    let digest = probes_digest(
        &read_probe_files(&task.probes.dir)
            .with_context(|| format!("cannot read {}", task.probes.dir.display()))?,
    );
    if record.probes_digest != digest {
        bail!(
            "the power record of task `{}` was computed against other probes: run `infradev \
             tasks power {}` again (rejudging only re-reads power.toml's reviewed equivalents)",
            task.id,
            task.id
        );
    }
    let dropped = super::narrow_scope(&mut record, &config.scope()).map_err(|why| {
        anyhow::anyhow!(
            "task `{}`: {why}: run `infradev tasks power {}` again (rejudging can only leave \
             files out)",
            task.id,
            task.id
        )
    })?;
    if !dropped.is_empty() {
        eprintln!(
            "power {}: {} candidate(s) in files power.toml now leaves out dropped from the record",
            task.id,
            dropped.len()
        );
    }
    let reviewed = config
        .equivalent
        .iter()
        .map(|e| (e.mutant.clone(), e.reason.clone()))
        .collect();
    for id in super::rejudge(&mut record, &reviewed) {
        let m = record.mutants.iter().find(|m| m.site.id == id);
        eprintln!(
            "power {}: {id} is now {}",
            task.id,
            m.map_or_else(String::new, describe_mutant)
        );
    }
    write_record(task, opts, validation, &record)?;
    Ok(record)
}

/// Writes `validation` with `record` as its power record where `opts` says.
fn write_record(
    task: &Task,
    opts: &PowerOptions,
    mut validation: crate::suite::validate::Validation,
    record: &PowerRecord,
) -> anyhow::Result<()> {
    validation.power = Some(record.clone());
    let path = opts.record_path(task);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, serde_json::to_string_pretty(&validation)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))
}

fn describe_mutant(m: &MutantRecord) -> String {
    match m.status {
        Status::Killed => format!("killed by {}", m.killed_by.join(", ")),
        Status::Discarded => "discarded (an official test fails)".into(),
        Status::Survived => "SURVIVED".into(),
        Status::PossiblyEquivalent => "possibly equivalent".into(),
        Status::Error => format!("error: {}", m.note.as_deref().unwrap_or("")),
    }
}

fn describe_variant(v: &VariantRecord) -> String {
    match v.status {
        VariantStatus::Accepted => "accepted".into(),
        VariantStatus::Rejected => format!("REJECTED by {}", v.failed.join(", ")),
        VariantStatus::OfficialFailed => "an official test fails (not held against probes)".into(),
        VariantStatus::Error => format!("error: {}", v.note.as_deref().unwrap_or("")),
    }
}

/// The time left if the rest goes at the pace so far.
fn estimate(elapsed: Duration, done: usize, total: usize) -> Duration {
    if done == 0 {
        return Duration::ZERO;
    }
    elapsed.mul_f64((total - done) as f64 / done as f64)
}

fn clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}m{:02}s", s / 60, s % 60)
}

/// One line for the terminal: the figures of a record.
pub fn summary(task: &str, r: &PowerRecord) -> String {
    format!(
        "{task}: kill rate {} ({} killed, {} survived, {} possibly equivalent, {} discarded, {} \
         error(s)); variants {}/{} accepted",
        r.kill_rate.map_or("n/a".into(), percent),
        r.counts.killed,
        r.counts.survived,
        r.counts.possibly_equivalent,
        r.counts.discarded,
        r.counts.errors,
        r.counts.variants_accepted,
        r.counts.variants
    )
}

/// Prints a task's power figures, each survivor and each rejected variant; returns whether
/// the probes hold (kill rate at the threshold, no variant rejected).
pub fn print_outcome(task: &str, record: &PowerRecord) -> bool {
    crate::outln!("{}", summary(task, record));
    for m in record
        .mutants
        .iter()
        .filter(|m| m.status == super::Status::Survived)
    {
        crate::outln!(
            "  survived {} {} at {}: `{}` → `{}`",
            m.site.id,
            m.site.operator,
            m.site.location,
            m.site.original,
            m.site.replacement
        );
    }
    for v in record
        .variants
        .iter()
        .filter(|v| v.status == super::VariantStatus::Rejected)
    {
        crate::outln!(
            "  rejected variant {} {} at {} by {}",
            v.site.id,
            v.site.operator,
            v.site.location,
            v.failed.join(", ")
        );
    }
    record
        .kill_rate
        .is_some_and(|r| r + 1e-9 >= record.threshold)
        && record.counts.variants_rejected == 0
}

/// `tasks check`'s view of a task's probe power: its record against its probes as they are.
pub fn assess_task(task: &Task) -> Result<super::Assessment, crate::task::ManifestError> {
    let config = load_power_config(task)?;
    let digest = probes_digest(&read_probe_files(&task.probes.dir).map_err(|e| {
        crate::task::ManifestError::whole_file(&task.probes.dir, format!("cannot read: {e}"))
    })?);
    let record = read_validation(&task.dir.join(VALIDATION_FILE)).and_then(|v| v.power);
    Ok(super::assess(record.as_ref(), &digest, &config))
}
