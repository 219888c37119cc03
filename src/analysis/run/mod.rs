//! `infradev run`: grade many submissions as one benchmark run.
//!
//! The submissions file is checked whole before anything runs (every bad line reported with
//! its file and line; unknown tasks with the close ids; repositories that are not git
//! checkouts; revisions that do not exist). Then each task's environment is prepared once,
//! one image at a time, and the submissions are graded `--jobs` at a time through
//! [`grade_submission`], the one grading flow. Each result is written atomically to
//! `runs/<id>/submissions/<key>.json` as it finishes; `--resume` skips every submission with
//! a verdict of its own (an infra error is graded again). At the end the records become the
//! run report ([`report`]), whose tables come from [`crate::analysis::stats`].

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::grade::{
    ExecutorChoice, GradeRequest, grade_submission, prepare_environment, report_unapplied,
};
use crate::task::{Registry, Task};

pub mod flakes;
pub mod record;
pub mod report;
pub mod submissions;

use record::{Outcome, Record, write_atomically};
use report::{Environment, RunMeta, RunReport};
use submissions::{Change, Submission};

/// What `infradev run` was asked.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The directory holding tasks/, probes/ and runners/.
    pub root: PathBuf,
    pub submissions: PathBuf,
    pub run_id: String,
    /// Where runs live: the run's folder is `<out>/<run_id>`.
    pub out: PathBuf,
    pub jobs: usize,
    pub resume: bool,
    pub executor: ExecutorChoice,
    /// Reruns of a failing test or probe unless a task sets its own (flake handling).
    pub retries: u32,
    /// What a grade does with a task that is not what was validated.
    pub unvalidated: crate::grade::Unvalidated,
}

/// Why a run did not start: bad input (usage, exit 2) or our side (infra, exit 3).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Usage(String),
    #[error("{0:#}")]
    Infra(anyhow::Error),
}

/// A finished run: its report and where it was written.
pub struct RunResult {
    pub report: RunReport,
    pub dir: PathBuf,
}

/// Checks the submissions file and everything it names; every problem at once.
pub fn load_submissions(
    root: &Path,
    file: &Path,
) -> Result<(Vec<Submission>, BTreeMap<String, Task>), RunError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| RunError::Usage(format!("cannot read {}: {e}", file.display())))?;
    let subs = submissions::parse(file, &text).map_err(|errors| {
        RunError::Usage(
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        )
    })?;
    if subs.is_empty() {
        return Err(RunError::Usage(format!(
            "{}: no submissions (one JSON object per line; see `infradev run --help`)",
            file.display()
        )));
    }
    let mut problems = Vec::new();
    let mut tasks = BTreeMap::new();
    let mut bad_tasks = BTreeSet::new();
    let at = |s: &Submission| format!("{}:{}", file.display(), s.line);
    for s in &subs {
        if tasks.contains_key(&s.task) || bad_tasks.contains(&s.task) {
            if bad_tasks.contains(&s.task) {
                problems.push(format!("{}: no task `{}`", at(s), s.task));
            }
            continue;
        }
        match Registry::resolve(root, &s.task, None) {
            Ok(t) => {
                tasks.insert(s.task.clone(), t);
            }
            Err(e) => {
                bad_tasks.insert(s.task.clone());
                problems.push(format!("{}: {}", at(s), missing_task(root, &s.task, &e)));
            }
        }
    }
    // Repositories and revisions, each checked once.
    let mut checked: BTreeMap<(PathBuf, String), Option<String>> = BTreeMap::new();
    for s in &subs {
        let mut check = |rev: &str, what: &str| {
            let result = checked
                .entry((s.repo.clone(), rev.to_owned()))
                .or_insert_with(|| check_rev(&s.repo, rev).err());
            if let Some(why) = result {
                problems.push(format!("{}: {what}: {why}", at(s)));
            }
        };
        match &s.change {
            Change::Rev(rev) => check(rev, "`rev`"),
            Change::PatchFile(_) | Change::Diff(_) => {}
        }
        if let Some(t) = tasks.get(&s.task) {
            check(&t.base_commit, "the task's base commit");
            check(&t.reference_commit, "the task's reference commit");
        }
        if let Change::PatchFile(p) = &s.change
            && !p.is_file()
        {
            problems.push(format!("{}: `patch`: no file {}", at(s), p.display()));
        }
    }
    // One message per distinct problem, in line order.
    let mut seen = BTreeSet::new();
    problems.retain(|p| seen.insert(p.clone()));
    if problems.is_empty() {
        Ok((subs, tasks))
    } else {
        Err(RunError::Usage(problems.join("\n")))
    }
}

/// "no task `x`", with the ids that are close to it; any other error (a task whose manifest
/// is invalid) as it is.
pub fn missing_task(root: &Path, id: &str, error: &impl std::fmt::Display) -> String {
    if !error.to_string().contains(&format!("no task `{id}`")) {
        return error.to_string();
    }
    let ids: Vec<String> = Registry::load(root)
        .map(|r| r.tasks.into_iter().flatten().map(|t| t.id).collect())
        .unwrap_or_default();
    let close = close_ids(id, &ids);
    if ids.is_empty() {
        format!("{error}")
    } else if close.is_empty() {
        format!(
            "no task `{id}` (`infradev tasks list` shows the {} there are)",
            ids.len()
        )
    } else {
        format!("no task `{id}`; did you mean {}?", close.join(", "))
    }
}

/// Ids within a small edit distance of `id`, or sharing a word with it; closest first.
pub fn close_ids(id: &str, ids: &[String]) -> Vec<String> {
    let words: BTreeSet<&str> = id.split(['-', '_']).filter(|w| w.len() > 2).collect();
    let mut scored: Vec<(usize, &String)> = ids
        .iter()
        .filter_map(|c| {
            let d = edit_distance(id, c);
            let shared = c.split(['-', '_']).any(|w| words.contains(w));
            (d <= 3.max(id.len() / 4) || shared).then_some((d, c))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(3)
        .map(|(_, c)| format!("`{c}`"))
        .collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != b[j]))
                .min(row[j] + 1)
                .min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Whether `rev` names a commit of the git checkout `repo`; the error says which is wrong.
pub fn check_rev(repo: &Path, rev: &str) -> Result<(), String> {
    if !repo.exists() {
        return Err(format!("{} does not exist", repo.display()));
    }
    let git_dir = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "--git-dir"])
        .output();
    if !git_dir.is_ok_and(|o| o.status.success()) {
        return Err(format!("{} is not a git checkout", repo.display()));
    }
    let ok = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err(format!("`{rev}` is not a commit in {}", repo.display()))
    }
}

/// The run's folder, its records folder, and the records already there.
fn records_dir(dir: &Path) -> PathBuf {
    dir.join("submissions")
}
/// A run grades only what was validated: every task's probes and record are checked before
/// any grade starts, and each one that differs is named (or `--allow-unvalidated`).
fn refuse_unvalidated(tasks: &BTreeMap<String, Task>) -> Result<(), RunError> {
    let mut problems = Vec::new();
    for (id, task) in tasks {
        let checked = crate::grade::validated(task).map_err(|e| match e {
            crate::grade::GradeError::Infra(e) => RunError::Infra(e),
            other => RunError::Usage(format!("task `{id}`: {other}")),
        })?;
        problems.extend(checked.problems.iter().map(|p| format!("task `{id}`: {p}")));
    }
    match problems.is_empty() {
        true => Ok(()),
        false => Err(RunError::Usage(format!(
            "{}
these tasks are not graded as they were validated: validate them again \
             (`infradev tasks validate`), or pass --allow-unvalidated",
            problems.join("\n")
        ))),
    }
}

fn record_path(dir: &Path, key: &str) -> PathBuf {
    records_dir(dir).join(format!("{key}.json"))
}

/// Runs the benchmark and writes its report.
pub async fn run(opts: &RunOptions) -> Result<RunResult, RunError> {
    let started = Instant::now();
    let (subs, tasks) = load_submissions(&opts.root, &opts.submissions)?;
    if !valid_run_id(&opts.run_id) {
        return Err(RunError::Usage(format!(
            "--run-id {:?}: use 1-100 letters, digits, `.`, `_` or `-`",
            opts.run_id
        )));
    }
    if opts.unvalidated == crate::grade::Unvalidated::Refuse {
        refuse_unvalidated(&tasks)?;
    }
    let dir = opts.out.join(&opts.run_id);
    let infra = |e: anyhow::Error| RunError::Infra(e);
    if records_dir(&dir).exists() && !opts.resume {
        return Err(RunError::Usage(format!(
            "run `{}` already exists in {}: pass --resume to finish it, or choose another --run-id",
            opts.run_id,
            dir.display()
        )));
    }
    std::fs::create_dir_all(records_dir(&dir))
        .with_context(|| format!("cannot create {}", records_dir(&dir).display()))
        .map_err(infra)?;

    let pending: Vec<&Submission> = subs
        .iter()
        .filter(|s| {
            !(opts.resume && Record::read(&record_path(&dir, &s.key)).is_ok_and(|r| r.is_done()))
        })
        .collect();
    let display = RunDisplay::new(subs.len(), pending.len());
    display.line(format!(
        "run {}: {} submission(s), {} done already, {} to grade, {} at a time",
        opts.run_id,
        subs.len(),
        subs.len() - pending.len(),
        pending.len(),
        opts.jobs
    ));

    // Environment images: once per task, one at a time, before any grade needs them.
    let lib = opts.root.join("runners/python");
    let needed: BTreeSet<&str> = pending.iter().map(|s| s.task.as_str()).collect();
    for id in needed {
        display.status(format!("preparing the environment of {id}"));
        if let Err(e) = prepare_environment(&opts.executor, &tasks[id], &lib).await {
            // Each grade of the task meets the same fault and records it as infra.
            display.line(format!("{id}: environment not ready: {e}"));
        }
    }

    let semaphore = Arc::new(tokio::sync::Semaphore::new(opts.jobs.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for s in pending.iter().map(|s| (*s).clone()) {
        let task = tasks[&s.task].clone();
        let (semaphore, display, dir, lib, executor, retries) = (
            semaphore.clone(),
            display.clone(),
            dir.clone(),
            lib.clone(),
            opts.executor.clone(),
            (opts.retries, opts.unvalidated),
        );
        set.spawn(async move {
            let _permit = semaphore.acquire_owned().await;
            display.started();
            let t0 = Instant::now();
            let outcome = grade_one(&s, &task, &lib, &executor, retries).await;
            let record = Record::new(&s, &task.repository, t0.elapsed().as_secs_f64(), outcome);
            let written = record.write(&record_path(&dir, &s.key));
            display.finished(&record);
            written
        });
    }
    let mut failures = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("{e:#}")),
            Err(e) => failures.push(format!("a grade panicked: {e}")),
        }
    }
    display.finish();
    if !failures.is_empty() {
        return Err(RunError::Infra(anyhow::anyhow!(
            "records could not be written: {}",
            failures.join("; ")
        )));
    }

    let mut records = Vec::new();
    for s in &subs {
        records.push(Record::read(&record_path(&dir, &s.key)).map_err(infra)?);
    }
    let meta = RunMeta {
        run_id: opts.run_id.clone(),
        environment: Environment {
            executor: match opts.executor {
                ExecutorChoice::Docker { .. } => "docker".into(),
                ExecutorChoice::Local { .. } => "local".into(),
            },
            os: std::env::consts::OS.into(),
            arch: std::env::consts::ARCH.into(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            jobs: opts.jobs,
        },
        submissions_file: opts.submissions.display().to_string(),
        graded_now: pending.len(),
        wall_s: started.elapsed().as_secs_f64(),
        finished_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    };
    let flakes = flakes::build(&meta.run_id, &records);
    let report = report::build(meta, &records);
    let flakes = serde_json::to_vec_pretty(&flakes)
        .context("cannot serialise the flake record")
        .map_err(infra)?;
    write_atomically(&dir.join("flakes.json"), &flakes).map_err(infra)?;
    let json = serde_json::to_vec_pretty(&report)
        .context("cannot serialise the run report")
        .map_err(infra)?;
    write_atomically(&dir.join("report.json"), &json).map_err(infra)?;
    write_atomically(
        &dir.join("report.md"),
        report::render_report_markdown(&report).as_bytes(),
    )
    .map_err(infra)?;
    Ok(RunResult { report, dir })
}

fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 100
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Grades one submission; a fault of ours becomes an infra outcome, never a verdict.
async fn grade_one(
    s: &Submission,
    task: &Task,
    lib: &Path,
    executor: &ExecutorChoice,
    (retries, unvalidated): (u32, crate::grade::Unvalidated),
) -> Outcome {
    let repo_label = s.repo.display().to_string();
    let prepared = match &s.change {
        Change::Rev(rev) => Ok(Prepared {
            repo: s.repo.clone(),
            head: rev.clone(),
            _scratch: None,
        }),
        Change::PatchFile(p) => match std::fs::read(p) {
            Ok(diff) => apply_diff(&s.repo, &task.base_commit, &diff),
            Err(e) => Err(ApplyFailure::Infra(format!(
                "cannot read {}: {e}",
                p.display()
            ))),
        },
        Change::Diff(d) => apply_diff(&s.repo, &task.base_commit, d.as_bytes()),
    };
    let prepared = match prepared {
        Ok(p) => p,
        Err(ApplyFailure::DoesNotApply) => {
            return Outcome::Graded {
                report: Box::new(report_unapplied(
                    task,
                    &repo_label,
                    executor,
                    "the diff does not apply to the task's base commit".into(),
                )),
            };
        }
        Err(ApplyFailure::Infra(error)) => return Outcome::Infra { error },
    };
    let request = GradeRequest {
        task: task.clone(),
        repo: prepared.repo.clone(),
        head: prepared.head.clone(),
        lib: lib.to_path_buf(),
        executor: executor.clone(),
        keep_workdir: false,
        retries,
        unvalidated,
    };
    match grade_submission(&request, &|_| {}).await {
        Ok(mut report) => {
            report.submission.repo = crate::grade::report::safe_path(&repo_label);
            Outcome::Graded {
                report: Box::new(report),
            }
        }
        // Inputs were checked before the run: whatever stops a grade now is our side's.
        Err(e) => Outcome::Infra {
            error: format!("{e:#}"),
        },
    }
}

/// The repository and head to grade; a diff is committed on the base in a scratch clone.
struct Prepared {
    repo: PathBuf,
    head: String,
    _scratch: Option<tempfile::TempDir>,
}

enum ApplyFailure {
    /// The submission's fault: graded as an apply error.
    DoesNotApply,
    Infra(String),
}

fn apply_diff(repo: &Path, base: &str, diff: &[u8]) -> Result<Prepared, ApplyFailure> {
    let infra = |what: &str, e: &dyn std::fmt::Display| ApplyFailure::Infra(format!("{what}: {e}"));
    let scratch = tempfile::Builder::new()
        .prefix("infradev-patch-")
        .tempdir()
        .map_err(|e| infra("cannot create a scratch dir", &e))?;
    let clone = scratch.path().join("repo");
    // Hermetic git: no user hooks, identity or signing.
    let git = |args: &[&str]| {
        let mut c = Command::new("git");
        c.arg("-C")
            .arg(&clone)
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "commit.gpgsign=false",
            ])
            .args([
                "-c",
                "user.name=InfraDev",
                "-c",
                "user.email=run@infradev.invalid",
            ])
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null");
        c
    };
    let out = Command::new("git")
        .args(["clone", "--quiet", "--shared", "--no-checkout"])
        .arg(repo)
        .arg(&clone)
        .output()
        .map_err(|e| infra("cannot run git", &e))?;
    if !out.status.success() {
        return Err(ApplyFailure::Infra(format!(
            "git clone of {} failed: {}",
            repo.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let run = |mut c: Command, what: &str| -> Result<bool, ApplyFailure> {
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .map_err(|e| infra(what, &e))
    };
    if !run(
        git(&[
            "-c",
            "advice.detachedHead=false",
            "checkout",
            "--quiet",
            "--detach",
            base,
        ]),
        "git checkout",
    )? {
        return Err(ApplyFailure::Infra(format!(
            "cannot check out the base {base}"
        )));
    }
    let mut apply = git(&["apply", "--whitespace=nowarn", "-"]);
    apply
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let applied = (|| -> std::io::Result<bool> {
        use std::io::Write;
        let mut child = apply.spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            // A diff git rejects early closes the pipe: that is "does not apply", not ours.
            let _ = stdin.write_all(diff);
        }
        Ok(child.wait()?.success())
    })()
    .map_err(|e| infra("cannot run git apply", &e))?;
    if !applied || diff.iter().all(u8::is_ascii_whitespace) {
        return Err(ApplyFailure::DoesNotApply);
    }
    if !run(git(&["add", "-A"]), "git add")?
        || !run(
            git(&[
                "commit",
                "--quiet",
                "--no-verify",
                "--allow-empty",
                "-m",
                "submission",
            ]),
            "git commit",
        )?
    {
        return Err(ApplyFailure::Infra("cannot commit the applied diff".into()));
    }
    Ok(Prepared {
        repo: clone,
        head: "HEAD".into(),
        _scratch: Some(scratch),
    })
}

/// The run's one progress display: a bar with done / running / queued and an ETA on a
/// terminal, plain lines otherwise.
#[derive(Clone)]
struct RunDisplay {
    inner: Arc<DisplayInner>,
}

struct DisplayInner {
    bar: Option<indicatif::ProgressBar>,
    counts: Mutex<(usize, usize, usize)>, // done, running, queued
    total: usize,
    started: Instant,
}

impl RunDisplay {
    fn new(_all: usize, pending: usize) -> RunDisplay {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(pending as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:30} {pos}/{len} done · {msg} · {elapsed} elapsed{prefix}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        let d = RunDisplay {
            inner: Arc::new(DisplayInner {
                bar,
                counts: Mutex::new((0, 0, pending)),
                total: pending,
                started: Instant::now(),
            }),
        };
        d.refresh();
        d
    }

    fn line(&self, text: String) {
        match &self.inner.bar {
            Some(bar) => bar.println(text),
            None => eprintln!("{text}"),
        }
    }

    fn status(&self, text: String) {
        match &self.inner.bar {
            Some(bar) => bar.set_message(text),
            None => eprintln!("{text}"),
        }
    }

    fn refresh(&self) {
        if let (Some(bar), Ok(c)) = (&self.inner.bar, self.inner.counts.lock()) {
            bar.set_position(c.0 as u64);
            bar.set_message(format!("{} running · {} queued", c.1, c.2));
            // indicatif's own ETA says 0s before the first result: none until one is in.
            bar.set_prefix(match c.0 {
                0 => String::new(),
                _ => format!(", ETA {}", indicatif::HumanDuration(bar.eta())),
            });
        }
    }

    fn started(&self) {
        if let Ok(mut c) = self.inner.counts.lock() {
            c.1 += 1;
            c.2 = c.2.saturating_sub(1);
        }
        self.refresh();
    }

    fn finished(&self, r: &Record) {
        let (done, running, queued) = match self.inner.counts.lock() {
            Ok(mut c) => {
                c.0 += 1;
                c.1 = c.1.saturating_sub(1);
                *c
            }
            Err(_) => (0, 0, 0),
        };
        let eta = if done > 0 && done < self.inner.total {
            let per = self.inner.started.elapsed().as_secs_f64() / done as f64;
            format!(", ETA {:.0}s", per * (self.inner.total - done) as f64)
        } else {
            String::new()
        };
        let mut text = format!(
            "[{done}/{}] {} {} ({}): {} in {:.1}s",
            self.inner.total,
            r.task,
            r.key,
            r.labels
                .agent_key()
                .chars()
                .filter(|c| !c.is_control())
                .collect::<String>(),
            r.outcome_name(),
            r.duration_s
        );
        if self.inner.bar.is_none() {
            text.push_str(&format!(" · {running} running, {queued} queued{eta}"));
        }
        self.line(text);
        self.refresh();
    }

    fn finish(&self) {
        if let Some(bar) = &self.inner.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_ids_suggest_neighbours_and_shared_words() {
        let ids: Vec<String> = [
            "example-block-allocator",
            "vllm-kv-offload-lru",
            "megatron-prefix-cache-lru",
            "verl-ckpt-retention",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            close_ids("example-block-alocator", &ids),
            ["`example-block-allocator`"]
        );
        assert_eq!(
            close_ids("prefix-cache", &ids),
            ["`megatron-prefix-cache-lru`"]
        );
        assert!(close_ids("zzz", &ids).is_empty());
    }

    #[test]
    fn edit_distances() {
        for (a, b, d) in [
            ("", "", 0),
            ("abc", "abc", 0),
            ("abc", "abd", 1),
            ("ab", "abc", 1),
            ("kitten", "sitting", 3),
        ] {
            assert_eq!(edit_distance(a, b), d, "{a} {b}");
        }
    }
}
