//! `infradev action`: grade the pull request of a GitHub Actions `pull_request` run, inside the
//! workflow (`action.yml`, docs/github-action.md).
//!
//! It reads the run's environment (`GITHUB_EVENT_PATH`, `GITHUB_WORKSPACE`, …), finds the task
//! exactly as the App does ([`crate::service::app::matching::match_task`]), grades the PR head with
//! [`grade_submission`] (the one grading flow), and reports through the workflow: a Markdown
//! step summary, workflow-command annotations on stdout, step outputs, the JSON report, and —
//! when the token may write — the `InfraDev` check run and the sticky PR comment, rendered by
//! [`crate::grade::report::github`] like the App's. The token is only ever used here for API calls;
//! the sandbox never sees it (its environment is built from scratch).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::Utc;
use clap::ValueEnum;
use secrecy::SecretString;

use crate::cli::common::{CliError, SandboxArgs};
use crate::cli::exit;
use crate::cli::grade::grade_with_progress;
use crate::grade::GradeRequest;
use crate::grade::report::github::{self as render, AnnotationLevel, StepAnnotation};
use crate::grade::report::{Report, render_json};
use crate::grading::{Category, Verdict};
use crate::service::app::matching::{TaskMatch, match_task};
use crate::service::app::outbox::convert;
use crate::service::github::{CheckRunCreate, Conclusion, GitHubError, RepoClient, Status};
use crate::service::webhook::{Event, PullRequest, Repo};
use crate::task::{Gpus, Registry, Task};

/// The only event the step grades.
const PULL_REQUEST: &str = "pull_request";
/// The only event the step grades: the base branch's workflow, with the pull request as data.
const PULL_REQUEST_TARGET: &str = "pull_request_target";
/// Default API URL when `GITHUB_API_URL` is unset.
const DEFAULT_API_URL: &str = "https://api.github.com";
/// Most annotations printed; GitHub shows only the first few of a step anyway.
const MAX_ANNOTATIONS: usize = 50;

#[derive(Debug, clap::Args)]
pub struct ActionArgs {
    /// A task id or task directory; default: the task the PR names (base branch
    /// `infradev/<id>`, a description line `InfraDev-Task: <id>`, or a label `task:<id>`).
    #[arg(long, env = "INFRADEV_TASK")]
    pub task: Option<String>,
    /// The hidden probe directory on the runner, fetched before this step into a directory the
    /// PR cannot modify; default `<root>/probes/<task-id>`.
    #[arg(long, env = "INFRADEV_PROBES")]
    pub probes: Option<PathBuf>,
    /// GPU device ids for the sandbox (`0,1`), replacing the task's own choice when it asks for
    /// GPUs.
    #[arg(long, env = "INFRADEV_GPUS")]
    pub gpus: Option<String>,
    /// When the step fails (exits non-zero); see docs/github-action.md.
    #[arg(long, value_enum, env = "INFRADEV_FAIL_ON", default_value_t = FailOn::Unresolved)]
    pub fail_on: FailOn,
    /// A token for the check run and the sticky comment (prefer the environment variable).
    #[arg(long, env = "INFRADEV_GITHUB_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Where to write the JSON report; default `$RUNNER_TEMP/infradev-report.json`.
    #[arg(long, env = "INFRADEV_REPORT_PATH")]
    pub report_path: Option<PathBuf>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Which outcomes fail the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    /// Exit with the grade's code: 1 unresolved, 2 usage or task error, 3 infrastructure error.
    Unresolved,
    /// Only errors fail the step (2 usage or task error, 3 infrastructure); unresolved exits 0.
    Error,
    /// Always exit 0; read the `verdict` output instead.
    Never,
}

impl FailOn {
    /// The process exit code for a natural code (0–3) under this setting.
    pub fn filter(self, code: u8) -> u8 {
        match (self, code) {
            (FailOn::Never, _) => exit::RESOLVED,
            (FailOn::Error, exit::UNRESOLVED) => exit::RESOLVED,
            (_, code) => code,
        }
    }
}

/// The run's environment, as GitHub Actions sets it.
#[derive(Debug, Clone, Default)]
pub struct ActionEnv {
    pub event_name: Option<String>,
    pub event_path: Option<PathBuf>,
    pub repository: Option<String>,
    pub api_url: String,
    pub workspace: Option<PathBuf>,
    pub step_summary: Option<PathBuf>,
    pub output: Option<PathBuf>,
    pub runner_temp: Option<PathBuf>,
    /// `GITHUB_WORKFLOW_REF`: `owner/repo/.github/workflows/x.yml@<ref>`, the ref the running
    /// workflow file was taken from.
    pub workflow_ref: Option<String>,
    /// `GITHUB_SERVER_URL/GITHUB_REPOSITORY/actions/runs/GITHUB_RUN_ID`, when all are set.
    pub run_url: Option<String>,
}

impl ActionEnv {
    pub fn from_env() -> ActionEnv {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let path = |name: &str| var(name).map(PathBuf::from);
        let run_url = match (
            var("GITHUB_SERVER_URL"),
            var("GITHUB_REPOSITORY"),
            var("GITHUB_RUN_ID"),
        ) {
            (Some(server), Some(repo), Some(id)) => Some(format!(
                "{}/{repo}/actions/runs/{id}",
                server.trim_end_matches('/')
            )),
            _ => None,
        };
        ActionEnv {
            event_name: var("GITHUB_EVENT_NAME"),
            event_path: path("GITHUB_EVENT_PATH"),
            repository: var("GITHUB_REPOSITORY"),
            api_url: var("GITHUB_API_URL").unwrap_or_else(|| DEFAULT_API_URL.to_owned()),
            workspace: path("GITHUB_WORKSPACE"),
            step_summary: path("GITHUB_STEP_SUMMARY"),
            output: path("GITHUB_OUTPUT"),
            runner_temp: path("RUNNER_TEMP"),
            workflow_ref: var("GITHUB_WORKFLOW_REF"),
            run_url,
        }
    }
}

/// What the step found.
enum Found {
    Graded(Box<Report>),
    /// Nothing to grade: no task named, an unknown task, or an action we do not grade.
    NotATask {
        title: String,
        summary: String,
        /// The neutral check to post, when there is a head to post it on.
        check: Option<render::CheckOutput>,
    },
    /// No grade: a usage or task error (2) or an infrastructure error (3).
    Failed {
        code: u8,
        error: anyhow::Error,
    },
}

/// Where the GitHub writes go, or why they do not.
enum Writes {
    To(RepoClient),
    Skipped(String),
}

/// The pull request being graded.
struct PrContext {
    repo: Repo,
    pr: PullRequest,
}

/// Runs the step; returns the exit code (after `--fail-on`).
pub async fn run(root: &Path, args: ActionArgs) -> u8 {
    run_with(root, args, &ActionEnv::from_env()).await
}

pub async fn run_with(root: &Path, args: ActionArgs, env: &ActionEnv) -> u8 {
    let mut notes: Vec<String> = Vec::new();
    let (found, pr) = find_and_grade(root, &args, env).await;

    let report_path = args.report_path.clone().unwrap_or_else(|| {
        env.runner_temp
            .clone()
            .unwrap_or_else(std::env::temp_dir)
            .join("infradev-report.json")
    });
    let mut report_written = false;
    if let Found::Graded(report) = &found {
        match std::fs::write(&report_path, render_json(report)) {
            Ok(()) => report_written = true,
            Err(e) => notes.push(format!(
                "Could not write the JSON report to `{}`: {e}.",
                report_path.display()
            )),
        }
    }

    if let Some(ctx) = &pr {
        match writes(&args, env, ctx) {
            Writes::To(client) => {
                if let Err(note) = post(&client, ctx, &found, env).await {
                    notes.push(note);
                }
            }
            Writes::Skipped(why) => {
                eprintln!("infradev: {why}");
                notes.push(why);
            }
        }
    }

    let (verdict, natural) = match &found {
        Found::Graded(report) => (
            report.grade.verdict.as_str(),
            crate::cli::grade::exit_code(report.grade.verdict),
        ),
        Found::NotATask { .. } => ("not-a-task", exit::RESOLVED),
        Found::Failed { code, .. } => ("error", *code),
    };

    // Annotations (stdout) and the summary.
    let mut stdout = String::new();
    let mut summary = String::new();
    match &found {
        Found::Graded(report) => {
            for a in render::step_annotations(report)
                .iter()
                .take(MAX_ANNOTATIONS)
            {
                stdout.push_str(&workflow_command(a));
            }
            summary.push_str(&step_summary(report));
        }
        Found::NotATask {
            title,
            summary: text,
            ..
        } => {
            stdout.push_str(&workflow_command(&StepAnnotation {
                level: AnnotationLevel::Notice,
                file: None,
                line: None,
                title: "InfraDev: not a task".to_owned(),
                message: title.clone(),
            }));
            let _ = write!(summary, "## InfraDev: {title}\n\n{text}\n");
        }
        Found::Failed { code, error } => {
            let message = format!("{error:#}");
            let title = if *code == exit::INFRA {
                "InfraDev: infrastructure error (not the pull request's fault)"
            } else {
                "InfraDev: cannot grade (usage or task error)"
            };
            stdout.push_str(&workflow_command(&StepAnnotation {
                level: AnnotationLevel::Failure,
                file: None,
                line: None,
                title: title.to_owned(),
                message: message.clone(),
            }));
            let _ = write!(summary, "## {title}\n\n```\n{message}\n```\n");
        }
    }
    if !notes.is_empty() {
        summary.push_str("\n### Reporting to GitHub\n\n");
        for note in &notes {
            let _ = writeln!(summary, "- {note}");
        }
    }
    crate::out!("{stdout}");
    let _ = std::io::stdout().flush();

    let mut problems = Vec::new();
    if let Some(path) = &env.step_summary
        && let Err(e) = append(path, &summary)
    {
        problems.push(format!("cannot write the step summary: {e:#}"));
    }
    let categories = match &found {
        Found::Graded(report) => categories(report),
        _ => String::new(),
    };
    let score = match &found {
        Found::Graded(report) => score(report),
        _ => String::new(),
    };
    let report_output = if report_written {
        report_path.display().to_string()
    } else {
        String::new()
    };
    let outputs = [
        ("verdict", verdict.to_owned()),
        ("score", score),
        ("categories", categories),
        ("report-path", report_output),
    ];
    if let Some(path) = &env.output {
        let text: String = outputs.iter().map(|(k, v)| output_line(k, v)).collect();
        if let Err(e) = append(path, &text) {
            problems.push(format!("cannot write the step outputs: {e:#}"));
        }
    }
    if let Found::Failed { error, .. } = &found {
        eprintln!("error: {error:#}");
    }
    for p in &problems {
        eprintln!("error: {p}");
    }
    let natural = if problems.is_empty() || natural != exit::RESOLVED {
        natural
    } else {
        exit::INFRA
    };
    args.fail_on.filter(natural)
}

/// Whether this run can keep the hidden probes from the pull request (docs/github-action.md,
/// "Security rules"). Under `pull_request`, GitHub runs the pull request's own version of the
/// workflow, with the repository's secrets for a same-repository PR: whatever fetched the
/// probes before this step could have been rewritten to print them. Under
/// `pull_request_target` the workflow is the base branch's, which the PR cannot change; the
/// PR's code then runs only in the Docker sandbox (the local executor would run it on this
/// runner, beside the probes and the runner's own files).
fn safe_setup(args: &ActionArgs, env: &ActionEnv) -> anyhow::Result<()> {
    if env.event_name.as_deref() == Some(PULL_REQUEST) {
        anyhow::bail!(
            "`infradev action` does not run under `pull_request`: GitHub runs the pull \
             request's own version of the workflow there (with the repository's secrets for a \
             same-repository pull request), so the hidden probes are not hidden from it. Trigger \
             the workflow on `pull_request_target`, which runs the base branch's workflow, and \
             never run the pull request's code outside this step (docs/github-action.md)"
        );
    }
    if let Some(workflow) = &env.workflow_ref
        && workflow.contains("@refs/pull/")
    {
        anyhow::bail!(
            "this workflow was taken from a pull request ref ({}), which the pull request can \
             change: run InfraDev from a workflow of the base branch (`pull_request_target`)",
            crate::grade::report::safe_path(workflow)
        );
    }
    if args.sandbox.executor == crate::cli::common::ExecutorKind::Local {
        anyhow::bail!(
            "`infradev action` grades with the Docker executor only: the local executor would \
             run the pull request's code on this runner, beside the hidden probes and the \
             runner's own files"
        );
    }
    Ok(())
}

/// Reads the event, finds the task and grades. Returns the PR when there is one to report on.
async fn find_and_grade(
    root: &Path,
    args: &ActionArgs,
    env: &ActionEnv,
) -> (Found, Option<PrContext>) {
    let failed = |code: u8, error: anyhow::Error| Found::Failed { code, error };
    let usage = |error: anyhow::Error| failed(exit::USAGE_OR_TASK, error);
    if let Err(e) = safe_setup(args, env) {
        return (usage(e), None);
    }
    match env.event_name.as_deref() {
        Some(PULL_REQUEST_TARGET) => {}
        Some(other) => {
            return (
                usage(anyhow::anyhow!(
                    "`infradev action` grades `pull_request_target` events; this run is a \
                     `{other}` event"
                )),
                None,
            );
        }
        None => {
            return (
                usage(anyhow::anyhow!(
                    "GITHUB_EVENT_NAME is not set: `infradev action` runs inside a GitHub \
                     Actions workflow (use `infradev grade` elsewhere)"
                )),
                None,
            );
        }
    }
    let event = match read_event(env) {
        Ok(event) => event,
        Err(e) => return (usage(e), None),
    };
    let (repo, pr) = match event {
        Event::PullRequest {
            action, repo, pr, ..
        } if action != crate::service::webhook::PrAction::Closed => (repo, pr),
        other => {
            let what = other.action().unwrap_or("?").to_owned();
            let title = format!("nothing to grade for a `{what}` pull request event");
            return (
                Found::NotATask {
                    summary: format!(
                        "InfraDev grades a pull request when it is opened, reopened, pushed to, \
                         marked ready or labelled; this run is a `{what}` event."
                    ),
                    title,
                    check: None,
                },
                None,
            );
        }
    };
    let ctx = PrContext { repo, pr };
    let found = grade_pr(root, args, env, &ctx).await;
    (found, Some(ctx))
}

fn read_event(env: &ActionEnv) -> anyhow::Result<Event> {
    let path = env
        .event_path
        .as_ref()
        .context("GITHUB_EVENT_PATH is not set")?;
    let body =
        std::fs::read(path).with_context(|| format!("cannot read the event {}", path.display()))?;
    crate::service::webhook::parse(PULL_REQUEST, &body)
        .with_context(|| format!("cannot read the event {}", path.display()))
}

async fn grade_pr(root: &Path, args: &ActionArgs, env: &ActionEnv, ctx: &PrContext) -> Found {
    let usage = |error: anyhow::Error| Found::Failed {
        code: exit::USAGE_OR_TASK,
        error,
    };
    if let Some(probes) = &args.probes
        && !probes.is_dir()
    {
        return usage(anyhow::anyhow!(
            "the probe directory {} does not exist or is not a directory: fetch the hidden \
             probes before this step (docs/github-action.md)",
            probes.display()
        ));
    }
    let id = match &args.task {
        Some(task) => task.clone(),
        None => {
            let registry = match Registry::load(root) {
                Ok(r) => r,
                Err(e) => {
                    return usage(anyhow::anyhow!(
                        "cannot read the tasks directory under {}: {e}",
                        root.display()
                    ));
                }
            };
            let ids: Vec<String> = registry
                .tasks
                .iter()
                .flatten()
                .map(|t| t.id.clone())
                .collect();
            let known: Vec<&str> = ids.iter().map(String::as_str).collect();
            match match_task(&ctx.pr, &known) {
                TaskMatch::Known { id, .. } => id,
                TaskMatch::Unknown { id, .. } => {
                    let check = render::no_task_output_for(ctx.pr.number, Some(&id), &known);
                    return not_a_task(check);
                }
                TaskMatch::None => {
                    return not_a_task(render::no_task_output(ctx.pr.number, &known));
                }
            }
        }
    };
    let mut task = match Registry::resolve(root, &id, args.probes.as_deref()) {
        Ok(task) => task,
        Err(e) => return usage(e.into()),
    };
    apply_gpus(&mut task, args.gpus.as_deref());
    let Some(workspace) = env.workspace.clone() else {
        return usage(anyhow::anyhow!(
            "GITHUB_WORKSPACE is not set: check out the pull request first (actions/checkout)"
        ));
    };
    let request = GradeRequest {
        task,
        repo: workspace,
        head: ctx.pr.head_sha.clone(),
        lib: root.join("runners/python"),
        executor: args.sandbox.choice(),
        keep_workdir: false,
        retries: crate::grade::DEFAULT_RETRIES,
        unvalidated: args.sandbox.unvalidated(),
    };
    match grade_with_progress(&request).await {
        Ok(report) => Found::Graded(Box::new(report)),
        Err(CliError { code, error }) => Found::Failed { code, error },
    }
}

fn not_a_task(check: render::CheckOutput) -> Found {
    Found::NotATask {
        title: check.title.clone(),
        summary: check.summary.clone(),
        check: Some(check),
    }
}

/// `--gpus 0,1` pins the devices of a task that asks for GPUs.
fn apply_gpus(task: &mut Task, gpus: Option<&str>) {
    let ids: Vec<String> = gpus
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if ids.is_empty() {
        return;
    }
    if task.resources.gpus == Gpus::Count(0) {
        tracing::info!(task = %task.id, "the task asks for no GPUs; --gpus is ignored");
        return;
    }
    task.resources.gpus = Gpus::Ids(ids);
}

/// Whether the step may write to GitHub, and with which client.
fn writes(args: &ActionArgs, env: &ActionEnv, ctx: &PrContext) -> Writes {
    let Some(token) = args.token.as_deref().filter(|t| !t.is_empty()) else {
        return Writes::Skipped(
            "No GitHub token was given, so InfraDev posted no check run and no comment: this \
             summary is the report."
                .to_owned(),
        );
    };
    let full = env
        .repository
        .clone()
        .unwrap_or_else(|| ctx.repo.full_name());
    let Some((owner, name)) = full.split_once('/') else {
        return Writes::Skipped(format!(
            "GITHUB_REPOSITORY `{full}` is not owner/name, so nothing was posted."
        ));
    };
    match RepoClient::with_token(
        &env.api_url,
        SecretString::from(token.to_owned()),
        owner,
        name,
    ) {
        Ok(client) => Writes::To(client),
        Err(e) => Writes::Skipped(format!(
            "Could not reach the GitHub API at `{}` ({e:#}), so nothing was posted.",
            env.api_url
        )),
    }
}

/// Posts the completed check run and upserts the sticky comment. `Err` is a note for the
/// summary: the writes are best effort and never change the verdict.
async fn post(
    client: &RepoClient,
    ctx: &PrContext,
    found: &Found,
    env: &ActionEnv,
) -> Result<(), String> {
    let head = &ctx.pr.head_sha;
    let (conclusion, output, report) = match found {
        Found::Graded(report) => (
            conclusion(report.grade.verdict),
            render::check_run_output(report),
            Some(report.as_ref()),
        ),
        Found::NotATask { check: Some(c), .. } => (Conclusion::Neutral, c.clone(), None),
        Found::NotATask { check: None, .. } => return Ok(()),
        // The error itself is in the workflow's log; the check says only what kind of fault.
        Found::Failed { code, .. } if *code == exit::INFRA => (
            Conclusion::Neutral,
            render::infra_output(render::GradeFault::Infra),
            None,
        ),
        // A usage or task error is the workflow's, not the PR's: nothing to say on the PR.
        Found::Failed { .. } => return Ok(()),
    };
    let mut run = CheckRunCreate::queued(render::CHECK_NAME, head.clone());
    run.status = Status::Completed;
    run.conclusion = Some(conclusion);
    run.completed_at = Some(Utc::now());
    run.details_url = env.run_url.clone();
    run.output = Some(convert(output));
    client
        .create_check_run(&run)
        .await
        .map_err(|e| refused("the check run", &e))?;
    if let Some(report) = report {
        let status = match &env.run_url {
            Some(url) => format!("Graded by the InfraDev action in [this workflow run]({url})."),
            None => "Graded by the InfraDev action.".to_owned(),
        };
        let body = render::sticky_comment(head, Some(report), &status, &[]);
        upsert_sticky(client, ctx.pr.number, &body)
            .await
            .map_err(|e| refused("the sticky comment", &e))?;
    }
    Ok(())
}

async fn upsert_sticky(client: &RepoClient, number: u64, body: &str) -> Result<(), GitHubError> {
    match client
        .find_comment_with_marker(number, render::STICKY_MARKER)
        .await?
    {
        Some(id) => match client.update_comment(id, body).await {
            Err(e) if e.is_not_found() => client.create_comment(number, body).await.map(drop),
            other => other,
        },
        None => client.create_comment(number, body).await.map(drop),
    }
}

/// A note for the summary about a write GitHub did not take.
fn refused(what: &str, e: &GitHubError) -> String {
    let line = format!("{e}");
    eprintln!("infradev: could not post {what}: {line}");
    if e.status() == Some(403) {
        format!(
            "GitHub refused to let this workflow's token post {what} (403): the token lacks \
             `checks: write` / `pull-requests: write`, or is read-only. This is not the pull \
             request's failure; this summary is the report."
        )
    } else {
        format!(
            "Could not post {what}: {}. This is not the pull request's failure.",
            one_line(&line)
        )
    }
}

fn conclusion(verdict: Verdict) -> Conclusion {
    match render::conclusion_for(verdict) {
        "success" => Conclusion::Success,
        "failure" => Conclusion::Failure,
        _ => Conclusion::Neutral,
    }
}

/// The step summary for a graded head: the check run's title, summary (with the category
/// table) and details, as the App posts them.
fn step_summary(report: &Report) -> String {
    let output = render::check_run_output(report);
    let mut s = format!("## InfraDev\n\n{}\n", output.summary);
    if let Some(text) = &output.text {
        let _ = write!(s, "\n{text}\n");
    }
    s
}

/// `passed/total` over every expected test and probe.
fn score(report: &Report) -> String {
    let tests = &report.grade.tests;
    let passed = tests.iter().filter(|t| t.passed()).count();
    format!("{passed}/{}", tests.len())
}

/// The failure categories, comma-separated in [`Category::ALL`] order.
fn categories(report: &Report) -> String {
    let counts = &report.grade.counts.total;
    Category::ALL
        .into_iter()
        .filter(|&c| counts.get(c) > 0)
        .map(Category::as_str)
        .collect::<Vec<_>>()
        .join(",")
}

fn one_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().trim().to_owned()
}

fn append(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

// ---- workflow commands (pure) ---------------------------------------------------------------

/// Escapes a workflow command's message: `%`, CR and LF.
pub fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a workflow command's property value: as [`escape_data`], plus `:` and `,`.
pub fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// One annotation as a workflow command line (`::error file=…,line=…,title=…::message`).
pub fn workflow_command(a: &StepAnnotation) -> String {
    let command = match a.level {
        AnnotationLevel::Failure => "error",
        AnnotationLevel::Warning => "warning",
        AnnotationLevel::Notice => "notice",
    };
    let mut props = Vec::new();
    if let Some(file) = &a.file {
        props.push(format!("file={}", escape_property(file)));
        if let Some(line) = a.line {
            props.push(format!("line={line}"));
        }
    }
    if !a.title.is_empty() {
        props.push(format!("title={}", escape_property(&a.title)));
    }
    let props = if props.is_empty() {
        String::new()
    } else {
        format!(" {}", props.join(","))
    };
    format!("::{command}{props}::{}\n", escape_data(&a.message))
}

/// One `$GITHUB_OUTPUT` entry: `name=value`, or the delimiter form when the value spans lines.
pub fn output_line(name: &str, value: &str) -> String {
    if !value.contains(['\n', '\r']) {
        return format!("{name}={value}\n");
    }
    let mut delimiter = format!("ghadelimiter_{}", uuid::Uuid::new_v4().simple());
    while value.contains(&delimiter) {
        delimiter = format!("ghadelimiter_{}", uuid::Uuid::new_v4().simple());
    }
    format!("{name}<<{delimiter}\n{value}\n{delimiter}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotation(file: Option<&str>, line: Option<u32>, title: &str, msg: &str) -> StepAnnotation {
        StepAnnotation {
            level: AnnotationLevel::Failure,
            file: file.map(str::to_owned),
            line,
            title: title.to_owned(),
            message: msg.to_owned(),
        }
    }

    #[test]
    fn workflow_commands_escape_data_and_properties() {
        let a = annotation(
            Some("dir,a:b/conftest.py"),
            Some(1),
            "InfraDev memory: 100% over, twice",
            "line one\r\nline two: 50%\n::set-output name=x::y",
        );
        assert_eq!(
            workflow_command(&a),
            "::error file=dir%2Ca%3Ab/conftest.py,line=1,title=InfraDev memory%3A 100%25 over%2C \
             twice::line one%0D%0Aline two: 50%25%0A::set-output name=x::y\n"
        );
        // A message can never start a second command line.
        assert_eq!(workflow_command(&a).lines().count(), 1);
        let bare = StepAnnotation {
            level: AnnotationLevel::Notice,
            ..annotation(None, Some(3), "", "m")
        };
        assert_eq!(workflow_command(&bare), "::notice::m\n");
        let file_only = annotation(Some("tests/test_a.py"), None, "t", "m");
        assert_eq!(
            workflow_command(&file_only),
            "::error file=tests/test_a.py,title=t::m\n"
        );
    }

    #[test]
    fn outputs_use_the_delimiter_form_for_lines() {
        assert_eq!(output_line("verdict", "resolved"), "verdict=resolved\n");
        let multi = output_line("x", "a\nb");
        let lines: Vec<&str> = multi.lines().collect();
        assert_eq!(lines.len(), 4);
        let delimiter = lines[0].strip_prefix("x<<").unwrap();
        assert!(delimiter.starts_with("ghadelimiter_"));
        assert_eq!(&lines[1..3], &["a", "b"]);
        assert_eq!(lines[3], delimiter);
    }

    #[test]
    fn fail_on_filters_exit_codes() {
        let codes = [
            exit::RESOLVED,
            exit::UNRESOLVED,
            exit::USAGE_OR_TASK,
            exit::INFRA,
        ];
        let table = |f: FailOn| codes.map(|c| f.filter(c));
        assert_eq!(table(FailOn::Unresolved), [0, 1, 2, 3]);
        assert_eq!(table(FailOn::Error), [0, 0, 2, 3]);
        assert_eq!(table(FailOn::Never), [0, 0, 0, 0]);
    }
}
