//! `infradev run`: arguments, the printed summary, and the exit code.

use std::path::PathBuf;

use crate::analysis::run::{RunError, RunOptions, report::render_report_summary, run};
use crate::cli::common::{CliError, SandboxArgs};
use crate::cli::exit;

/// Grade many submissions as one benchmark run and write its report.
///
/// The submissions file has one JSON object per line:
///
///   {"task": "<task id>", "repo": "<git checkout>", "rev": "<revision>", "agent": "<label>"}
///
/// with `patch` (a file with a unified diff against the task's base) or `diff` (the diff
/// itself) instead of `rev`, and the optional labels `model` and `account` and name `id`.
/// Relative paths are relative to the file's folder. See docs/benchmark-runs.md.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The submissions file (JSON Lines).
    #[arg(long)]
    pub submissions: PathBuf,
    /// The run's name: its folder is `<out>/<run-id>`.
    #[arg(long)]
    pub run_id: String,
    /// Grades at the same time.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub jobs: u16,
    /// Finish an earlier run: skip every submission with a verdict of its own (infra errors
    /// are graded again).
    #[arg(long)]
    pub resume: bool,
    /// Where runs are written.
    #[arg(long, default_value = "runs")]
    pub out: PathBuf,
    /// Also write the run report's JSON here (`-`: standard output; the summary then goes to
    /// standard error).
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Exit 0 when every submission has a verdict of its own, 3 when some are infra errors (run
/// again with `--resume`), 2 for bad input.
pub async fn run_command(root: &std::path::Path, args: RunArgs) -> Result<u8, CliError> {
    let opts = RunOptions {
        root: root.to_path_buf(),
        submissions: args.submissions,
        run_id: args.run_id,
        out: args.out,
        jobs: usize::from(args.jobs),
        resume: args.resume,
        executor: args.sandbox.choice(),
        retries: args.sandbox.retries,
        unvalidated: args.sandbox.unvalidated(),
    };
    let result = run(&opts).await.map_err(|e| match e {
        RunError::Usage(msg) => CliError {
            code: exit::USAGE_OR_TASK,
            error: anyhow::anyhow!(msg),
        },
        RunError::Infra(error) => CliError {
            code: exit::INFRA,
            error,
        },
    })?;
    let summary = render_report_summary(&result.report, &result.dir.display().to_string());
    let to_stdout = args.json.as_deref() == Some(std::path::Path::new("-"));
    if to_stdout {
        eprint!("{summary}");
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&result.report).unwrap_or_default()
        );
    } else {
        crate::out!("{summary}");
        if let Some(path) = &args.json {
            let json = serde_json::to_vec_pretty(&result.report).unwrap_or_default();
            std::fs::write(path, json).map_err(|e| CliError {
                code: exit::INFRA,
                error: anyhow::anyhow!("cannot write {}: {e}", path.display()),
            })?;
        }
    }
    Ok(if result.report.infra_errors.is_empty() {
        exit::RESOLVED
    } else {
        exit::INFRA
    })
}
