//! `infradev job run`: grade one dispatched job on a remote node (a Slurm batch job, a GitHub
//! Actions runner) and hand the result back to the server's result endpoint with the
//! dispatch's token. The grade is the same `grade_submission` every entry point uses; this
//! command only adds the hand-back: the result is posted with retries (the server may be
//! restarting), and the bundle it was given is removed afterwards.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use secrecy::{ExposeSecret, SecretString};

use crate::cli::common::SandboxArgs;
use crate::cli::exit;
use crate::grade::{ExecutorChoice, GradeError, GradeRequest, grade_submission};
use crate::service::backend::ResultBody;
use crate::task::Registry;

#[derive(Debug, clap::Args)]
pub struct JobRunArgs {
    /// The task id.
    #[arg(long)]
    pub task: String,
    /// The git repository holding the head and the task's commits (never modified).
    #[arg(long)]
    pub repo: PathBuf,
    /// The head commit to grade.
    #[arg(long)]
    pub head: String,
    /// The server's job id.
    #[arg(long)]
    pub job_id: i64,
    /// The dispatch number the token was minted for.
    #[arg(long)]
    pub dispatch: u32,
    /// Where to post the result (`https://grader/jobs/<id>/result`).
    #[arg(long)]
    pub result_url: String,
    /// A file holding the result token; else `$INFRADEV_RESULT_TOKEN`.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Remove this directory (the dispatch's bundle) when done, whatever happened.
    #[arg(long)]
    pub remove_bundle: Option<PathBuf>,
    /// Seconds to keep retrying the post while the server is unreachable or failing.
    #[arg(long, default_value_t = 600)]
    pub post_timeout_s: u64,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Runs the job; the exit code says whether the result reached the server (0) or not (3,
/// infra: the server then treats the run as lost), or the arguments were bad (2).
pub async fn run(root: &Path, args: JobRunArgs) -> u8 {
    let token = match read_token(args.token_file.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e:#}");
            remove_bundle(args.remove_bundle.as_deref());
            return exit::USAGE_OR_TASK;
        }
    };
    let body = grade(root, &args).await;
    match &body {
        ResultBody {
            report: Some(r), ..
        } => eprintln!(
            "infradev job run: job {} graded: {}",
            args.job_id,
            r.grade.verdict.as_str()
        ),
        ResultBody { error, .. } => eprintln!(
            "infradev job run: job {} could not be graded: {}",
            args.job_id,
            error.as_deref().unwrap_or("?")
        ),
    }
    let posted = post(
        &args.result_url,
        &token,
        &body,
        Duration::from_secs(args.post_timeout_s),
    )
    .await;
    remove_bundle(args.remove_bundle.as_deref());
    match posted {
        Ok(answer) => {
            crate::outln!("{answer}");
            exit::RESOLVED
        }
        Err(e) => {
            eprintln!("error: the result did not reach the server: {e:#}");
            exit::INFRA
        }
    }
}

fn read_token(file: Option<&Path>) -> anyhow::Result<SecretString> {
    let raw = match file {
        Some(f) => std::fs::read_to_string(f)
            .with_context(|| format!("cannot read the token file {}", f.display()))?,
        None => std::env::var("INFRADEV_RESULT_TOKEN")
            .context("no result token: pass --token-file or set $INFRADEV_RESULT_TOKEN")?,
    };
    let token = raw.trim().to_owned();
    if token.is_empty() {
        bail!("the result token is empty");
    }
    Ok(SecretString::from(token))
}

/// The grade as a result body: the report, or why it could not run (worded as the local
/// worker words it, so the server tells our faults from the task's).
async fn grade(root: &Path, args: &JobRunArgs) -> ResultBody {
    let mut body = ResultBody {
        job_id: args.job_id,
        dispatch: args.dispatch,
        report: None,
        error: None,
    };
    // As root, the local executor runs the phases as `nobody`, which cannot read the bundle
    // (mode 0700, the service user's): grade from a copy `nobody` can traverse. The local
    // executor gives no filesystem isolation anyway (see its limitations in the report).
    let staged = match (args.sandbox.choice(), running_as_root()) {
        (ExecutorChoice::Local { .. }, true) => match stage(root) {
            Ok(dir) => Some(dir),
            Err(e) => {
                body.error = Some(format!("infrastructure error: {e:#}"));
                return body;
            }
        },
        _ => None,
    };
    let root = staged.as_ref().map_or(root, |d| d.path());
    let task = match Registry::resolve(root, &args.task, None) {
        Ok(t) => t,
        Err(e) => {
            body.error = Some(format!("task error: {e}"));
            return body;
        }
    };
    let request = GradeRequest {
        task,
        repo: args.repo.clone(),
        head: args.head.clone(),
        lib: root.join("runners/python"),
        executor: args.sandbox.choice(),
        keep_workdir: false,
        retries: crate::grade::DEFAULT_RETRIES,
        unvalidated: args.sandbox.unvalidated(),
    };
    match grade_submission(&request, &|_| {}).await {
        Ok(report) => body.report = Some(report),
        Err(GradeError::Task(e) | GradeError::Usage(e)) => {
            body.error = Some(format!("task error: {e:#}"))
        }
        Err(GradeError::Infra(e)) => body.error = Some(format!("infrastructure error: {e:#}")),
    }
    body
}

/// Posts the result until the server answers 200, or refuses it for good (401, 400), or
/// `patience` runs out.
async fn post(
    url: &str,
    token: &SecretString,
    body: &ResultBody,
    patience: Duration,
) -> anyhow::Result<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .context("cannot build the HTTP client")?;
    let started = std::time::Instant::now();
    let mut wait = Duration::from_millis(500);
    loop {
        let sent = client
            .post(url)
            .bearer_auth(token.expose_secret())
            .json(body)
            .send()
            .await;
        let retry_because = match sent {
            Ok(reply) if reply.status().is_success() => {
                return reply.text().await.context("reading the server's answer");
            }
            Ok(reply) if reply.status().is_server_error() => format!("{}", reply.status()),
            Ok(reply) => {
                let status = reply.status();
                let text = reply.text().await.unwrap_or_default();
                bail!("the server refused the result: {status} {text}");
            }
            Err(e) => format!("{e}"),
        };
        if started.elapsed() + wait > patience {
            bail!("gave up after {:?}: {retry_because}", started.elapsed());
        }
        eprintln!(
            "infradev job run: posting the result failed ({retry_because}); retrying in {wait:?}"
        );
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(30));
    }
}

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A copy of `root` (task, probes, plugin) that every user may traverse and read.
fn stage(root: &Path) -> anyhow::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("infradev-job-")
        .tempdir()
        .context("cannot create a staging directory")?;
    crate::service::app::bundle::copy_tree(root, dir.path())?;
    fn open_up(path: &Path) -> std::io::Result<()> {
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o755))?;
                open_up(&entry.path())?;
            } else if kind.is_file() {
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o644))?;
            }
        }
        Ok(())
    }
    open_up(dir.path()).context("cannot open up the staged copy")?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
    Ok(dir)
}

fn remove_bundle(bundle: Option<&Path>) {
    if let Some(dir) = bundle
        && let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        eprintln!("warning: cannot remove the bundle {}: {e}", dir.display());
    }
}
