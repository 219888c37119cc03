//! `infradev grade`: one task, one head; the summary, JSON and JUnit; the live progress every
//! single grade on a terminal shares (`demo`, `action`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::cli::common::{CliError, SandboxArgs};
use crate::cli::exit;
use crate::grade::report::{Report, render_json, render_junit, render_summary};
use crate::grade::{GradeRequest, Progress, grade_submission};
use crate::grading::Verdict;
use crate::task::Registry;

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

pub fn exit_code(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Resolved => exit::RESOLVED,
        Verdict::Unresolved => exit::UNRESOLVED,
        Verdict::Tampered => exit::TAMPERED,
        Verdict::Error => exit::INFRA,
    }
}

pub async fn grade_command(root: &Path, args: GradeArgs) -> Result<u8, CliError> {
    let task = Registry::resolve(root, &args.task, args.probes.as_deref()).map_err(|e| {
        CliError::task(anyhow::anyhow!(crate::analysis::run::missing_task(
            root, &args.task, &e
        )))
    })?;
    crate::analysis::run::check_rev(&args.repo, &args.head)
        .map_err(|why| CliError::task(anyhow::anyhow!("--repo/--head: {why}")))?;
    let request = GradeRequest {
        task,
        repo: args.repo,
        head: args.head,
        lib: root.join("runners/python"),
        executor: args.sandbox.choice(),
        keep_workdir: args.keep_workdir,
        retries: args.sandbox.retries,
        // A single grade is a developer's look: it runs, and its report says what differs.
        unvalidated: crate::grade::Unvalidated::Allow,
    };
    let report = grade_with_progress(&request).await?;
    // `--json -`: the JSON alone on standard output, the summary on standard error.
    let json_to_stdout = args.json.as_deref() == Some(Path::new("-"));
    if json_to_stdout {
        eprint!("{}", render_summary(&report));
        crate::out!("{}", render_json(&report));
    } else {
        crate::out!("{}", render_summary(&report));
    }
    let write = |path: &Path, text: String| {
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    if let Some(path) = args.json.as_ref().filter(|_| !json_to_stdout) {
        write(path, render_json(&report)).map_err(|error| CliError {
            code: exit::INFRA,
            error,
        })?;
    }
    if let Some(path) = &args.junit {
        write(path, render_junit(&report)).map_err(|error| CliError {
            code: exit::INFRA,
            error,
        })?;
    }
    Ok(exit_code(report.grade.verdict))
}

/// Grades with a live progress line on stderr (plain lines when it is not a terminal).
pub async fn grade_with_progress(request: &GradeRequest) -> Result<Report, CliError> {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {prefix:>14} {pos}/{len} {msg} [{elapsed}]",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let tty = std::io::stderr().is_terminal();
    let on_progress = |p: Progress| match p {
        Progress::Preparing(what) => {
            bar.set_prefix("preparing");
            bar.set_message(what);
        }
        Progress::PhaseStarted { phase, total } => {
            bar.set_prefix(phase_name(phase));
            bar.set_length(total as u64);
            bar.set_position(0);
            bar.set_message("running");
            if !tty {
                eprintln!("{}: running {total}", phase_name(phase));
            }
        }
        Progress::PhaseTick { done, .. } => bar.set_position(done as u64),
        Progress::Rerun {
            phase,
            attempt,
            total,
        } => {
            bar.set_prefix(phase_name(phase));
            bar.set_length(total as u64);
            bar.set_position(0);
            bar.set_message(format!("rerun {attempt}"));
            if !tty {
                eprintln!(
                    "{}: rerunning {total} that failed (attempt {attempt})",
                    phase_name(phase)
                );
            }
        }
        Progress::PhaseFinished { phase, duration } => {
            let line = format!(
                "{}: finished in {:.1}s",
                phase_name(phase),
                duration.as_secs_f64()
            );
            if tty {
                bar.println(line);
            } else {
                eprintln!("{line}");
            }
        }
    };
    let report = grade_submission(request, &on_progress).await;
    bar.finish_and_clear();
    Ok(report?)
}

fn phase_name(phase: crate::grading::Phase) -> &'static str {
    match phase {
        crate::grading::Phase::Tests => "official tests",
        crate::grading::Phase::Probes => "probes",
    }
}
