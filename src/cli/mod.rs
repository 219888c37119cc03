//! The command line: one file per command, and this dispatcher. `mod.rs` parses the
//! arguments and calls the command; what commands share (`CliError`, the sandbox, host and
//! task-selection arguments) is in `common.rs`, the exit codes in `exit.rs`, logging in
//! `logging.rs`. No command imports this file.

pub mod action;
pub mod app_manifest;
pub mod common;
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
pub mod tasks;
pub mod tasks_new;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use common::{CliError, ExecutorKind, HostArgs, SandboxArgs, TaskSelection};
pub use grade::{GradeArgs, exit_code, grade_with_progress};
pub use tasks::TasksCommand;

#[derive(Debug, Parser)]
#[command(
    name = "infradev",
    version,
    about = "Grades AI-written pull requests with official tests and hidden probes"
)]
pub struct Cli {
    /// The directory holding tasks/, probes/ and runners/. Default: the nearest folder holding
    /// tasks/ and probes/ from the current one up, else from the binary's own folder up.
    #[arg(long, global = true, env = "INFRADEV_ROOT")]
    pub root: Option<PathBuf>,
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

/// The task root: the one given (`--root`, `INFRADEV_ROOT`), else the nearest folder holding
/// `tasks/` and `probes/` from the current folder up, else from the binary's folder up (a
/// clone's `target/release/infradev`, or an installation beside its data). Absolute, so that
/// every path handed to a sandbox or printed in a command works from anywhere.
pub fn find_root(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(root) = given {
        return Ok(std::fs::canonicalize(&root).unwrap_or(root));
    }
    let is_root = |dir: &std::path::Path| dir.join("tasks").is_dir() && dir.join("probes").is_dir();
    let cwd = std::env::current_dir().ok();
    let exe = std::env::current_exe()
        .ok()
        .and_then(|e| std::fs::canonicalize(e).ok());
    for start in [
        cwd.as_deref(),
        exe.as_deref().and_then(std::path::Path::parent),
    ]
    .into_iter()
    .flatten()
    {
        if let Some(found) = start.ancestors().find(|d| is_root(d)) {
            return Ok(std::fs::canonicalize(found).unwrap_or_else(|_| found.to_path_buf()));
        }
    }
    anyhow::bail!(
        "no task root found: no folder holding tasks/ and probes/ above {} or above the \
         infradev binary; pass --root DIR or set INFRADEV_ROOT",
        cwd.as_deref()
            .map_or("the current folder".to_owned(), |d| d.display().to_string())
    )
}

/// Runs the CLI and returns the process exit code.
pub async fn run(mut cli: Cli) -> u8 {
    // Every path handed to a sandbox or printed must be absolute: the root is found once, here.
    let root = match (&cli.command, find_root(cli.root.take())) {
        (_, Ok(root)) => root,
        // These read no task: a config, a store or nothing names what they need.
        (Command::Stats(_) | Command::Serve { .. } | Command::App(_), Err(_)) => PathBuf::new(),
        (_, Err(e)) => {
            eprintln!("error: {e:#}");
            return exit::USAGE_OR_TASK;
        }
    };
    let log_format = cli.log_format;
    let result = match cli.command {
        Command::Grade(args) => crate::cli::grade::grade_command(&root, args).await,
        Command::Tasks(cmd) => tasks::tasks_command(&root, cmd).await,
        Command::Demo { sandbox } => demo::run(&root, &sandbox.choice()).await,
        Command::Serve { config } => crate::cli::serve::serve(&config, log_format).await,
        Command::Action(args) => Ok(crate::cli::action::run(&root, args).await),
        Command::Job(JobCommand::Run(args)) => Ok(crate::cli::job_run::run(&root, args).await),
        Command::Run(args) => crate::cli::run::run_command(&root, args).await,
        Command::Stats(args) => crate::cli::stats::stats_command(args).await,
        Command::Skill(cmd) => crate::cli::skill::skill_command(&root, cmd).await,
        Command::Doctor(args) => Ok(crate::cli::doctor::doctor_command(&root, args).await),
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
            crate::outln!(
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
