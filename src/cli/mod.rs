//! The command line: parsing, dispatch, live progress, and named exit codes.

pub mod action;
pub mod app_manifest;
pub mod demo;
pub mod doctor;
pub mod exit;
pub mod grade;
pub mod job_run;
pub mod logging;
pub mod run;
pub mod serve;
pub mod skill;
pub mod source;
pub mod stats;
pub mod tasks_new;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use crate::suite::fetch::{Cache, fetch_sdist, fetch_wheels};
use crate::grade::{ExecutorChoice, GradeError};
use crate::suite::lint::lint_task;
use crate::task::{Registry, UpstreamSource};
use crate::suite::validate::{ValidateOptions, validate_task};

pub use crate::cli::grade::{exit_code, grade_with_progress};

#[derive(Debug, Parser)]
#[command(
    name = "infradev",
    version,
    about = "Grades AI-written pull requests with official tests and hidden probes"
)]
pub struct Cli {
    /// The directory holding tasks/, probes/ and runners/.
    #[arg(long, global = true, env = "INFRADEV_ROOT", default_value = ".")]
    pub root: PathBuf,
    /// How logs are written to standard error: `text`, or `json` (one object per line).
    /// Colour only on a terminal. `INFRADEV_LOG` filters (default `warn`).
    #[arg(
        long,
        global = true,
        env = "INFRADEV_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    pub log_format: crate::cli::logging::LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Grade a submission (a git repository at the PR head) against a task.
    Grade(GradeArgs),
    /// List, show and check tasks.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// Build the example repository and grade its three submissions side by side.
    Demo {
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// Run the GitHub App: webhook intake, job queue, grading, check runs and comments.
    Serve {
        /// The server's configuration (see infradev.example.toml).
        #[arg(long, default_value = "infradev.toml")]
        config: PathBuf,
    },
    /// GitHub App helpers.
    #[command(subcommand)]
    App(AppCommand),
    /// Grade the pull request of a GitHub Actions `pull_request` run (action.yml;
    /// docs/github-action.md).
    Action(crate::cli::action::ActionArgs),
    /// Remote grading (scale-out backends).
    #[command(subcommand)]
    Job(JobCommand),
    /// Grade many submissions as one benchmark run (docs/benchmark-runs.md).
    Run(crate::cli::run::RunArgs),
    /// Resolved rates, probe rejections and failure categories over a folder of reports.
    Stats(crate::cli::stats::StatsArgs),
    /// Agent skills built from the failure statistics (docs/skill.md).
    #[command(subcommand)]
    Skill(crate::cli::skill::SkillCommand),
    /// Check what grading needs, one line per check.
    Doctor(crate::cli::doctor::DoctorArgs),
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Grade a job dispatched by the server (a Slurm batch job, a GitHub Actions run) and post
    /// the result to the server with the dispatch's token (docs/scale-out.md).
    Run(crate::cli::job_run::JobRunArgs),
}

#[derive(Debug, Subcommand)]
pub enum AppCommand {
    /// Print the GitHub App manifest to register the App from (docs/github-app.md).
    Manifest {
        /// The App's name on GitHub.
        #[arg(long, default_value = "InfraDev")]
        name: String,
        /// The App's homepage.
        #[arg(long, default_value = "https://github.com/infradev")]
        url: String,
        /// Where GitHub sends webhooks: this server's `/webhook`.
        #[arg(long)]
        webhook_url: String,
        /// Also ask for what the github-actions backend needs (`actions: write`,
        /// `workflow_run`, `workflow_job`; docs/scale-out.md).
        #[arg(long)]
        actions_backend: bool,
    },
}

#[derive(Debug, clap::Args)]
pub struct GradeArgs {
    /// A task id, or the directory holding its task.toml.
    #[arg(long)]
    pub task: String,
    /// The submission's git repository; it is never modified.
    #[arg(long)]
    pub repo: PathBuf,
    /// The revision to grade.
    #[arg(long, default_value = "HEAD")]
    pub head: String,
    /// The task's probe directory, when not `<root>/probes/<task-id>`.
    #[arg(long)]
    pub probes: Option<PathBuf>,
    /// Write the report as JSON (docs/grade-json.md); `-` writes it to standard output and
    /// the summary to standard error.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the report as JUnit XML.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Keep the private work dir for debugging.
    #[arg(long)]
    pub keep_workdir: bool,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// Where each phase runs.
    #[arg(long, value_enum, default_value_t = ExecutorKind::Docker)]
    pub executor: ExecutorKind,
    /// Wheel cache for tasks that install packages (Docker executor).
    #[arg(long, env = "INFRADEV_WHEELS")]
    pub wheels: Option<PathBuf>,
    /// The interpreter of the local executor; it needs pytest.
    #[arg(long, env = "INFRADEV_PYTHON", default_value = "/usr/bin/python3")]
    pub python: PathBuf,
    /// Reruns of a failing official test or probe, each in a fresh sandbox phase, unless the
    /// task sets its own; a result that changes across attempts is `flaky` (never a pass).
    #[arg(long, env = "INFRADEV_RETRIES", default_value_t = crate::grade::DEFAULT_RETRIES,
          value_parser = clap::value_parser!(u32).range(0..=crate::task::MAX_RETRIES as i64))]
    pub retries: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExecutorKind {
    /// A locked-down container per phase (bollard).
    Docker,
    /// A process group with rlimits; see the report for what it cannot guarantee.
    Local,
}

impl SandboxArgs {
    pub fn choice(&self) -> ExecutorChoice {
        match self.executor {
            ExecutorKind::Docker => ExecutorChoice::Docker {
                wheels: self.wheels.clone(),
            },
            ExecutorKind::Local => ExecutorChoice::Local {
                python: self.python.clone(),
            },
        }
    }
}

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

#[derive(Debug, Clone, clap::Args)]
pub struct TaskSelection {
    /// Task ids (or task directories).
    pub ids: Vec<String>,
    /// Every task.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct HostArgs {
    /// Download cache (wheels, sdists, upstream clones).
    #[arg(long, env = "INFRADEV_CACHE")]
    pub cache: Option<PathBuf>,
    /// The host Python whose pip downloads wheels; it must have the task's Python version.
    #[arg(long, default_value = "python3")]
    pub python: PathBuf,
}

impl Cli {
    /// The log level when `INFRADEV_LOG` says nothing: `info` for the server, whose log is
    /// its record, `warn` for the commands, whose output is the report.
    pub fn default_log_level(&self) -> &'static str {
        match self.command {
            Command::Serve { .. } => "info",
            _ => "warn",
        }
    }
}

/// Runs the CLI and returns the process exit code.
pub async fn run(mut cli: Cli) -> u8 {
    // Every path handed to a sandbox must be absolute; resolve the root once, here.
    if let Ok(root) = std::fs::canonicalize(&cli.root) {
        cli.root = root;
    }
    let log_format = cli.log_format;
    let result = match cli.command {
        Command::Grade(args) => crate::cli::grade::grade_command(&cli.root, args).await,
        Command::Tasks(cmd) => tasks_command(&cli.root, cmd).await,
        Command::Demo { sandbox } => demo::run(&cli.root, &sandbox.choice()).await,
        Command::Serve { config } => crate::cli::serve::serve(&config, log_format).await,
        Command::Action(args) => Ok(crate::cli::action::run(&cli.root, args).await),
        Command::Job(JobCommand::Run(args)) => Ok(crate::cli::job_run::run(&cli.root, args).await),
        Command::Run(args) => crate::cli::run::run_command(&cli.root, args).await,
        Command::Stats(args) => crate::cli::stats::stats_command(args).await,
        Command::Skill(cmd) => crate::cli::skill::skill_command(&cli.root, cmd).await,
        Command::Doctor(args) => Ok(crate::cli::doctor::doctor_command(&cli.root, args).await),
        Command::App(AppCommand::Manifest {
            name,
            url,
            webhook_url,
            actions_backend,
        }) => {
            let mut manifest = crate::cli::app_manifest::app_manifest(&name, &url, &webhook_url);
            if actions_backend {
                manifest = crate::cli::app_manifest::with_actions_backend(manifest);
            }
            println!(
                "{}",
                serde_json::to_string_pretty(&manifest).unwrap_or_default()
            );
            Ok(exit::RESOLVED)
        }
    };
    match result {
        Ok(code) => code,
        // In JSON, the error that ends the process is one more object on its own line.
        Err(CliError { code, error }) if log_format == crate::cli::logging::LogFormat::Json => {
            tracing::error!(error = %format!("{error:#}"), exit_code = code, "exiting");
            code
        }
        Err(CliError { code, error }) => {
            eprintln!("error: {error:#}");
            code
        }
    }
}

/// An error with the exit code it maps to.
pub struct CliError {
    pub code: u8,
    pub error: anyhow::Error,
}

impl CliError {
    /// A wrong argument or a task that cannot be used as written (exit 2).
    pub fn task(error: impl Into<anyhow::Error>) -> Self {
        CliError {
            code: exit::USAGE_OR_TASK,
            error: error.into(),
        }
    }

    /// Our side failed: Docker, the file system, a download (exit 3).
    pub fn infra(error: impl Into<anyhow::Error>) -> Self {
        CliError {
            code: exit::INFRA,
            error: error.into(),
        }
    }
}

impl From<GradeError> for CliError {
    fn from(e: GradeError) -> Self {
        let code = match e {
            GradeError::Usage(_) | GradeError::Task(_) => exit::USAGE_OR_TASK,
            GradeError::Infra(_) => exit::INFRA,
        };
        CliError {
            code,
            error: e.into(),
        }
    }
}

async fn tasks_command(root: &Path, cmd: TasksCommand) -> Result<u8, CliError> {
    match cmd {
        TasksCommand::List => {
            let registry = Registry::load(root)
                .context("cannot read the tasks directory")
                .map_err(CliError::task)?;
            for task in &registry.tasks {
                match task {
                    Ok(t) => println!(
                        "{:<32} {:<24} #{:<6} {}{}",
                        t.id,
                        t.repository,
                        t.pr,
                        t.summary,
                        crate::suite::validate::quarantined(t)
                            .map(|why| format!(" [quarantined: {why}]"))
                            .unwrap_or_default()
                    ),
                    Err(e) => println!("{:<32} (invalid: {e})", "?"),
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
            print!("{}", crate::suite::table::render(&rows));
            Ok(exit::RESOLVED)
        }
        TasksCommand::Show { id } => {
            let t = Registry::resolve(root, &id, None).map_err(CliError::task)?;
            println!("{}: {}\n", t.id, t.title);
            println!("upstream    {} #{}", t.repository, t.pr);
            println!(
                "base        {}\nreference   {}",
                t.base_commit, t.reference_commit
            );
            println!(
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
                UpstreamSource::Git => println!("validated   from git (the commits above)"),
                UpstreamSource::Release { base, reference } => {
                    println!("validated   from release sdists {base} → {reference}")
                }
            }
            println!(
                "tests       {} FAIL_TO_PASS, {} PASS_TO_PASS",
                t.tests.fail_to_pass.len(),
                t.tests.pass_to_pass.len()
            );
            println!(
                "resources   {:?} GPUs, {} MiB, {} CPUs, {} pids, timeouts {}s/{}s",
                t.resources.gpus,
                t.resources.memory_mb,
                t.resources.cpus,
                t.resources.pids,
                t.resources.timeouts.tests_s,
                t.resources.timeouts.probes_s
            );
            println!("\nprobes (requirements only; the source stays hidden):");
            for p in &t.probes.probes {
                println!("  [{}] {}: {}", p.category, p.id, p.requirement);
            }
            let prompt = std::fs::read_to_string(t.prompt_path()).unwrap_or_default();
            println!("\nprompt:\n{prompt}");
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
                        println!("{}: probe power not measured yet", t.id)
                    }
                    Ok(crate::suite::power::Assessment::Holds { kill_rate, .. }) => println!(
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
                println!("{p}");
            }
            let n = registry.tasks.len();
            if problems.is_empty() {
                println!("{n} task(s) checked, no problems");
                Ok(exit::RESOLVED)
            } else {
                println!("{n} task(s) checked, {} problem(s)", problems.len());
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
                        println!("{}: {release} at {}", task.id, path.display());
                    }
                }
                println!("{}: wheels in {}", task.id, cache.wheels().display());
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
                    println!(
                        "{} {}: {}",
                        if c.ok { "ok  " } else { "FAIL" },
                        task.id,
                        c.name
                    );
                    for p in &c.problems {
                        println!("       {p}");
                    }
                }
                println!(
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
                let record =
                    crate::suite::power::run::power_task(&task, &opts)
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
                    println!("{}: {e}", task.id);
                }
                if report.vacuous() {
                    println!(
                        "{}: no probe uses an upstream symbol that lint can see (an import of \
                         {}, or a `.module(...)` call whose path is a literal or a string \
                         constant), so nothing ties the probes to {}",
                        task.id,
                        task.upstream.packages.join(", "),
                        report.prompt.display()
                    );
                }
                for u in &report.unnamed {
                    println!(
                        "{}:{}: {} `{}` is used by a probe but not named in {}",
                        u.file,
                        u.line,
                        u.kind,
                        u.symbol,
                        report.prompt.display()
                    );
                }
                println!(
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

impl TaskSelection {
    fn resolve(&self, root: &Path) -> Result<Vec<crate::task::Task>, CliError> {
        if self.all {
            let registry = Registry::load(root)
                .context("cannot read the tasks directory")
                .map_err(CliError::task)?;
            return registry
                .tasks
                .into_iter()
                .map(|t| t.map_err(CliError::task))
                .collect();
        }
        if self.ids.is_empty() {
            return Err(CliError::task(anyhow::anyhow!(
                "name one or more tasks, or pass --all"
            )));
        }
        self.ids
            .iter()
            .map(|id| Registry::resolve(root, id, None).map_err(CliError::task))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap's own consistency checks over every command (unique argument names, valid
    /// defaults), which otherwise fire only when that command is first parsed.
    #[test]
    fn every_command_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
