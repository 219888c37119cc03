//! `infradev tasks`: list, show, table, check, fetch, validate, power, new and lint.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;

use crate::cli::common::{CliError, HostArgs, TaskSelection};
use crate::cli::exit;
use crate::suite::fetch::{Cache, fetch_sdist, fetch_wheels};
use crate::suite::lint::lint_task;
use crate::suite::validate::{ValidateOptions, validate_task};
use crate::task::{Registry, UpstreamSource};

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// One line per task.
    List,
    /// A task's manifest, prompt and probe requirements (never the probe source).
    Show { id: String },
    /// The README's task table (Markdown): repository, area, ranks, probe categories and the
    /// kill rate of every task.
    Table,
    /// Check every manifest; with --repo, also that the commits exist there.
    Check {
        #[arg(long)]
        repo: Option<PathBuf>,
    },
    /// Download what validating and grading a task needs offline: the wheels of its
    /// environment and the release sdists standing in for its commits.
    Fetch {
        #[command(flatten)]
        select: TaskSelection,
        #[command(flatten)]
        host: HostArgs,
    },
    /// Grade the base, the reference (several times) and a null patch with every official
    /// test and probe, check the outcomes, and write validation.json beside task.toml.
    Validate {
        #[command(flatten)]
        select: TaskSelection,
        #[command(flatten)]
        host: HostArgs,
        /// A local clone of the upstream repository, for tasks validated from git
        /// (default: <cache>/upstream/<owner>+<name>.git).
        #[arg(long)]
        git: Option<PathBuf>,
        /// How many times the reference is graded.
        #[arg(long, default_value_t = 3)]
        reference_runs: usize,
        /// Reruns of a failing test or probe in every run, unless the task sets its own; a
        /// reference that passes only on a rerun is flaky, and the task is quarantined.
        #[arg(long, default_value_t = crate::grade::DEFAULT_RETRIES,
              value_parser = clap::value_parser!(u32).range(0..=crate::task::MAX_RETRIES as i64))]
        retries: u32,
        /// Write `<task-id>.validation.json` here instead of validation.json beside task.toml.
        #[arg(long)]
        out_dir: Option<PathBuf>,
        /// Then measure the probes' power of each valid task (as `tasks power`).
        #[arg(long)]
        power: bool,
        /// With --power: grades at once.
        #[arg(long, default_value_t = 2, requires = "power")]
        jobs: usize,
        /// With --power: at most this many mutants (and variants) per operator.
        #[arg(long, default_value_t = 6, requires = "power")]
        cap: usize,
    },
    /// Probe power: grade mutants of the reference change (the probes must reject them) and
    /// behaviour-preserving variants (the probes must accept them); the figures go into
    /// validation.json as its `power` record (docs/tasks.md, "Probe power").
    Power {
        #[command(flatten)]
        select: TaskSelection,
        #[command(flatten)]
        host: HostArgs,
        /// A local clone of the upstream repository, for tasks validated from git.
        #[arg(long)]
        git: Option<PathBuf>,
        /// Grades at once.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// At most this many mutants (and variants) per operator.
        #[arg(long, default_value_t = 6)]
        cap: usize,
        /// Write `<task-id>.validation.json` here instead of the task's validation.json.
        #[arg(long)]
        out_dir: Option<PathBuf>,
        /// Grade nothing: apply power.toml's reviewed equivalents to the recorded mutants
        /// (after reviewing a survivor) and write the record back.
        #[arg(long)]
        rejudge: bool,
    },
    /// Scaffold a task from a merged pull request of a local clone: task.toml with the
    /// changed test files, FAIL_TO_PASS / PASS_TO_PASS proposed from runs on the base and
    /// the reference, prompt.md and probe skeletons, and what is left to write.
    New(crate::cli::tasks_new::NewArgs),
    /// Check that prompt.md names every upstream symbol the task's probes use.
    Lint {
        #[command(flatten)]
        select: TaskSelection,
        /// The Python that reads the probes' syntax trees.
        #[arg(long, default_value = "python3")]
        python: PathBuf,
    },
}

pub async fn tasks_command(root: &Path, cmd: TasksCommand) -> Result<u8, CliError> {
    match cmd {
        TasksCommand::List => {
            let registry = Registry::load(root)
                .context("cannot read the tasks directory")
                .map_err(CliError::task)?;
            if registry.tasks.is_empty() {
                return Err(CliError::task(anyhow::anyhow!(
                    "no task under {} (pass --root DIR: the folder holding tasks/ and probes/)",
                    root.join("tasks").display()
                )));
            }
            for task in &registry.tasks {
                match task {
                    Ok(t) => crate::outln!(
                        "{:<32} {:<24} #{:<6} {}{}",
                        t.id,
                        t.repository,
                        t.pr,
                        t.summary,
                        crate::suite::validate::quarantined(t)
                            .map(|why| format!(" [quarantined: {why}]"))
                            .unwrap_or_default()
                    ),
                    Err(e) => crate::outln!("{:<32} (invalid: {e})", "?"),
                }
            }
            Ok(exit::RESOLVED)
        }
        TasksCommand::Table => {
            let registry = Registry::load(root)
                .context("cannot read the tasks directory")
                .map_err(CliError::task)?;
            let mut tasks: Vec<&crate::task::Task> = Vec::new();
            for t in &registry.tasks {
                tasks.push(
                    t.as_ref()
                        .map_err(|e| CliError::task(anyhow::anyhow!("{e}")))?,
                );
            }
            tasks.sort_by_cached_key(|t| (t.repository.to_lowercase(), t.id.clone()));
            let powers = tasks
                .iter()
                .map(|t| crate::suite::power::run::assess_task(t))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| CliError::task(anyhow::anyhow!("{e}")))?;
            let rows: Vec<crate::suite::table::Row<'_>> = tasks
                .iter()
                .zip(&powers)
                .map(|(task, power)| crate::suite::table::Row { task, power })
                .collect();
            crate::out!("{}", crate::suite::table::render(&rows));
            Ok(exit::RESOLVED)
        }
        TasksCommand::Show { id } => {
            let t = Registry::resolve(root, &id, None).map_err(CliError::task)?;
            crate::outln!("{}: {}\n", t.id, t.title);
            crate::outln!("upstream    {} #{}", t.repository, t.pr);
            crate::outln!(
                "base        {}\nreference   {}",
                t.base_commit,
                t.reference_commit
            );
            crate::outln!(
                "image       FROM {}{} (Python {}, {} packages)",
                t.environment.base_image,
                t.environment
                    .layer
                    .as_ref()
                    .map(|l| format!(" + layer {l}"))
                    .unwrap_or_default(),
                t.environment.python,
                t.environment.packages.len()
            );
            match &t.upstream.source {
                UpstreamSource::Git => crate::outln!("validated   from git (the commits above)"),
                UpstreamSource::Release { base, reference } => {
                    crate::outln!("validated   from release sdists {base} → {reference}")
                }
            }
            crate::outln!(
                "tests       {} FAIL_TO_PASS, {} PASS_TO_PASS",
                t.tests.fail_to_pass.len(),
                t.tests.pass_to_pass.len()
            );
            crate::outln!(
                "resources   {}, {} MiB, {} CPUs, {} pids, timeouts {}s/{}s",
                t.resources.gpus,
                t.resources.memory_mb,
                t.resources.cpus,
                t.resources.pids,
                t.resources.timeouts.tests_s,
                t.resources.timeouts.probes_s
            );
            crate::outln!("\nprobes (requirements only; the source stays hidden):");
            for p in &t.probes.probes {
                crate::outln!("  [{}] {}: {}", p.category, p.id, p.requirement);
            }
            let prompt = std::fs::read_to_string(t.prompt_path()).unwrap_or_default();
            crate::outln!("\nprompt:\n{prompt}");
            Ok(exit::RESOLVED)
        }
        TasksCommand::Check { repo } => {
            let registry = Registry::load(root)
                .context("cannot read the tasks directory")
                .map_err(CliError::task)?;
            let mut problems: Vec<String> =
                registry.check().iter().map(ToString::to_string).collect();
            if let Some(repo) = &repo {
                for t in registry.tasks.iter().flatten() {
                    for (field, sha) in [
                        ("base_commit", &t.base_commit),
                        ("reference_commit", &t.reference_commit),
                    ] {
                        let ok = std::process::Command::new("git")
                            .arg("-C")
                            .arg(repo)
                            .args(["cat-file", "-e", &format!("{sha}^{{commit}}")])
                            .status()
                            .is_ok_and(|s| s.success());
                        if !ok {
                            problems.push(format!(
                                "{}: field `{field}`: commit {sha} is not in {}",
                                t.manifest_path().display(),
                                repo.display()
                            ));
                        }
                    }
                }
            }
            for t in registry.tasks.iter().flatten() {
                if let Some(why) = crate::suite::validate::quarantined(t) {
                    problems.push(format!("{}: quarantined: {why}", t.id));
                }
                match crate::suite::power::run::assess_task(t) {
                    Ok(crate::suite::power::Assessment::NotMeasured) => {
                        crate::outln!("{}: probe power not measured yet", t.id)
                    }
                    Ok(crate::suite::power::Assessment::Holds { kill_rate, .. }) => crate::outln!(
                        "{}: probe power holds (kill rate {})",
                        t.id,
                        kill_rate.map_or("n/a".into(), crate::suite::power::percent)
                    ),
                    Ok(crate::suite::power::Assessment::Fails(found)) => problems.extend(
                        found
                            .into_iter()
                            .map(|p| format!("{}: probe power: {p}", t.id)),
                    ),
                    Err(e) => problems.push(e.to_string()),
                }
            }
            for p in &problems {
                crate::outln!("{p}");
            }
            let n = registry.tasks.len();
            if problems.is_empty() {
                crate::outln!("{n} task(s) checked, no problems");
                Ok(exit::RESOLVED)
            } else {
                crate::outln!("{n} task(s) checked, {} problem(s)", problems.len());
                Ok(exit::USAGE_OR_TASK)
            }
        }
        TasksCommand::Fetch { select, host } => {
            let cache = Cache::locate(host.cache);
            for task in select.resolve(root)? {
                let infra = |error: anyhow::Error| CliError {
                    code: exit::INFRA,
                    error: error.context(format!("fetching for task `{}`", task.id)),
                };
                fetch_wheels(&host.python, &task, &root.join("runners"), &cache).map_err(infra)?;
                if let UpstreamSource::Release { base, reference } = &task.upstream.source {
                    let fixes = task.upstream.follow_up_releases.iter().map(|f| &f.release);
                    for release in [base, reference].into_iter().chain(fixes) {
                        let path = fetch_sdist(release, &cache).await.map_err(infra)?;
                        crate::outln!("{}: {release} at {}", task.id, path.display());
                    }
                }
                crate::outln!("{}: wheels in {}", task.id, cache.wheels().display());
            }
            Ok(exit::RESOLVED)
        }
        TasksCommand::Validate {
            select,
            host,
            git,
            reference_runs,
            retries,
            out_dir,
            power,
            jobs,
            cap,
        } => {
            let power_opts = crate::suite::power::run::PowerOptions {
                runners: root.join("runners"),
                cache: Cache::locate(host.cache.clone()),
                git: git.clone(),
                python: host.python.clone(),
                cap_per_operator: cap,
                jobs,
                out_dir: out_dir.clone(),
            };
            let mut weak = Vec::new();
            let opts = ValidateOptions {
                runners: root.join("runners"),
                python: host.python.clone(),
                cache: Cache::locate(host.cache),
                git,
                reference_runs,
                retries,
                out_dir,
            };
            // Every task is tried; one that cannot be validated (no clone, a failed
            // download) does not stop the others.
            let (mut invalid, mut unchecked) = (Vec::new(), Vec::new());
            for task in select.resolve(root)? {
                let validated = match fetch_wheels(&host.python, &task, &opts.runners, &opts.cache)
                {
                    Ok(()) => validate_task(&task, &opts).await,
                    Err(e) => Err(e),
                };
                let v = match validated {
                    Ok(v) => v,
                    Err(error) => {
                        eprintln!("error: validating task `{}`: {error:#}", task.id);
                        unchecked.push(task.id.clone());
                        continue;
                    }
                };
                for c in &v.checks {
                    crate::outln!(
                        "{} {}: {}",
                        if c.ok { "ok  " } else { "FAIL" },
                        task.id,
                        c.name
                    );
                    for p in &c.problems {
                        crate::outln!("       {p}");
                    }
                }
                crate::outln!(
                    "{}: {} — {}",
                    task.id,
                    if v.ok { "valid" } else { "NOT valid" },
                    opts.record_path(&task).display()
                );
                if !v.ok {
                    invalid.push(task.id.clone());
                } else if power {
                    match crate::suite::power::run::power_task(&task, &power_opts).await {
                        Ok(record) => {
                            if !crate::suite::power::run::print_outcome(&task.id, &record) {
                                weak.push(task.id.clone());
                            }
                        }
                        Err(error) => {
                            eprintln!("error: probe power of task `{}`: {error:#}", task.id);
                            unchecked.push(task.id.clone());
                        }
                    }
                }
            }
            if !weak.is_empty() {
                invalid.push(format!(
                    "probe power under the threshold, or variants rejected: {}",
                    weak.join(", ")
                ));
            }
            match (unchecked.is_empty(), invalid.is_empty()) {
                (true, true) => Ok(exit::RESOLVED),
                (false, _) => Err(CliError {
                    code: exit::INFRA,
                    error: anyhow::anyhow!(
                        "could not validate: {}{}",
                        unchecked.join(", "),
                        if invalid.is_empty() {
                            String::new()
                        } else {
                            format!("; not valid: {}", invalid.join(", "))
                        }
                    ),
                }),
                (true, false) => Err(CliError::task(anyhow::anyhow!(
                    "not valid: {}",
                    invalid.join(", ")
                ))),
            }
        }
        TasksCommand::Power {
            select,
            host,
            git,
            jobs,
            cap,
            out_dir,
            rejudge,
        } => {
            let opts = crate::suite::power::run::PowerOptions {
                runners: root.join("runners"),
                cache: Cache::locate(host.cache),
                git,
                python: host.python.clone(),
                cap_per_operator: cap,
                jobs,
                out_dir,
            };
            let mut weak = Vec::new();
            for task in select.resolve(root)? {
                if rejudge {
                    let record =
                        crate::suite::power::run::rejudge_task(&task, &opts).map_err(|error| {
                            CliError::task(error.context(format!("rejudging task `{}`", task.id)))
                        })?;
                    if !crate::suite::power::run::print_outcome(&task.id, &record) {
                        weak.push(task.id.clone());
                    }
                    continue;
                }
                fetch_wheels(&host.python, &task, &opts.runners, &opts.cache)
                    .and(Ok(()))
                    .map_err(|error| CliError {
                        code: exit::INFRA,
                        error: error.context(format!("fetching for task `{}`", task.id)),
                    })?;
                let record = crate::suite::power::run::power_task(&task, &opts)
                    .await
                    .map_err(|error| CliError {
                        code: exit::INFRA,
                        error: error.context(format!("probe power of task `{}`", task.id)),
                    })?;
                if !crate::suite::power::run::print_outcome(&task.id, &record) {
                    weak.push(task.id.clone());
                }
            }
            if weak.is_empty() {
                Ok(exit::RESOLVED)
            } else {
                Err(CliError::task(anyhow::anyhow!(
                    "probe power under the threshold, or variants rejected: {}",
                    weak.join(", ")
                )))
            }
        }
        TasksCommand::New(args) => crate::cli::tasks_new::new_command(root, args).await,
        TasksCommand::Lint { select, python } => {
            let mut bad = 0;
            let tasks = select.resolve(root)?;
            for task in &tasks {
                let report =
                    lint_task(task, &root.join("runners"), &python).map_err(CliError::task)?;
                for e in &report.errors {
                    crate::outln!("{}: {e}", task.id);
                }
                if report.vacuous() {
                    crate::outln!(
                        "{}: no probe uses an upstream symbol that lint can see (an import of \
                         {}, or a `.module(...)` call whose path is a literal or a string \
                         constant), so nothing ties the probes to {}",
                        task.id,
                        task.upstream.packages.join(", "),
                        report.prompt.display()
                    );
                }
                for u in &report.unnamed {
                    crate::outln!(
                        "{}:{}: {} `{}` is used by a probe but not named in {}",
                        u.file,
                        u.line,
                        u.kind,
                        u.symbol,
                        report.prompt.display()
                    );
                }
                crate::outln!(
                    "{}: {} upstream symbol(s) checked, {} not named",
                    task.id,
                    report.checked,
                    report.unnamed.len()
                );
                bad += usize::from(!report.ok());
            }
            if bad == 0 {
                Ok(exit::RESOLVED)
            } else {
                Err(CliError::task(anyhow::anyhow!(
                    "{bad} of {} task(s) fail lint",
                    tasks.len()
                )))
            }
        }
    }
}
