//! The Slurm backend: each dispatch becomes one batch job whose script runs
//! `infradev job run …` on the node; the server follows it with `scontrol`/`sacct -c`, finds it
//! again by name with `squeue`, and cancels it with `scancel`.
//!
//! Everything goes through Slurm's command-line tools, optionally behind a `command_prefix`
//! (`docker exec -i <ctl>` for the test cluster, `ssh login-node` for a real one), so the server
//! needs neither a Slurm client library nor slurmrestd. The argv of every call is a few fixed,
//! shell-safe words (ids are digits, names are checked); the batch script travels on stdin.
//!
//! What is pure lives in [`script`] (the batch script) and [`parse`] (scontrol and sacct output,
//! the state mapping, error classification); this module only runs the commands, each under
//! `call_timeout_s`, because a Slurm client whose controller is gone hangs 20–30 s before it
//! fails (measured on Slurm 22.05.8 from Debian 12 with the controller gone: `sbatch` gave up
//! after 29 s, `squeue` after 26 s, `scancel` after 19 s).

pub mod parse;
pub mod script;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::io::AsyncWriteExt;

pub use parse::{
    CompRun, LiveJob, classify_failure, exit_words, is_unknown_job, parse_sacct_runs,
    parse_scontrol_job, remote_state,
};
pub use script::{constraint, render_script, sbatch_quote, sh_quote, time_limit_minutes};

use super::{BackendError, RemoteState, Submission};

/// `[backends.slurm]` in the server's `infradev.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmConfig {
    /// Words put before every Slurm command (`sbatch`, `squeue`, `scontrol`, `sacct`,
    /// `scancel`): `["docker", "exec", "-i", "infradev-slurm-ctl"]` for the test cluster,
    /// `["ssh", "login1"]` for a cluster the server cannot reach directly. The batch script is
    /// sent on stdin, so a `docker exec` prefix needs `-i`. Empty: the commands run here.
    #[serde(default)]
    pub command_prefix: Vec<String>,
    /// Partition for every job (`--partition`); none: the cluster's default partition.
    #[serde(default)]
    pub partition: Option<String>,
    /// Turn the task's labels other than `gpu` into `--constraint=a&b` (node features).
    /// Off for clusters whose nodes carry no such features.
    #[serde(default = "default_true")]
    pub constraint_from_labels: bool,
    /// Where the server writes each dispatch's bundle (repository, token, task files). Must be
    /// on a filesystem the nodes share, since the job reads the bundle there and Slurm writes
    /// `slurm-<id>.out` into it.
    pub bundle_dir: PathBuf,
    /// `bundle_dir` as the nodes see it, when the shared filesystem is mounted elsewhere there.
    /// Default: the same path.
    #[serde(default)]
    pub node_bundle_dir: Option<PathBuf>,
    /// The `infradev` binary on the nodes (absolute path), which the batch script `exec`s.
    pub node_infradev: PathBuf,
    /// The executor `infradev job run` uses on the node: `docker` (a container per phase) or
    /// `local` (process groups; for nodes without Docker).
    #[serde(default = "default_node_executor")]
    pub node_executor: String,
    /// A wheel cache on the nodes for building task environments offline (`--wheels`).
    #[serde(default)]
    pub node_wheels: Option<PathBuf>,
    /// Let the nodes grade tasks that are not what their validation.json validated
    /// (`infradev job run --allow-unvalidated`; like `[worker] allow_unvalidated`). Off: such a
    /// job ends as our error, never the agent's.
    #[serde(default)]
    pub allow_unvalidated: bool,
    /// Seconds each Slurm command may take before it is abandoned as a transient failure.
    /// Clients hang 20–30 s when the controller is gone.
    #[serde(default = "default_call_timeout_s")]
    pub call_timeout_s: u64,
    /// Seconds added to the grade's own time limit for Slurm's `--time`, so the grader's clock
    /// (which reports a timeout as a result) always runs out before Slurm kills the job.
    #[serde(default = "default_time_slack_s")]
    pub time_slack_s: u64,
    /// Further sbatch options, written as one `#SBATCH` line after ours (`["--account", "ml"]`,
    /// `["--qos=grading"]`); sbatch lets a later option override an earlier one.
    #[serde(default)]
    pub extra_args: Vec<String>,
}

fn default_true() -> bool {
    true
}

fn default_node_executor() -> String {
    "docker".to_owned()
}

fn default_call_timeout_s() -> u64 {
    30
}

fn default_time_slack_s() -> u64 {
    300
}

impl SlurmConfig {
    /// `node_bundle_dir`, or `bundle_dir` when the nodes mount it at the same path.
    pub fn node_bundle_dir(&self) -> &Path {
        self.node_bundle_dir.as_deref().unwrap_or(&self.bundle_dir)
    }

    /// Checks what serde cannot: the executor's name, absolute paths, a timeout above zero.
    /// Meant for configuration loading, so a bad value stops the server at start-up rather than
    /// rejecting every submission.
    pub fn validate(&self) -> Result<(), String> {
        self.check_executor().map_err(|e| e.to_string())?;
        script::check_node_bundle_path("backends.slurm.node_bundle_dir", self.node_bundle_dir())
            .map_err(|e| e.to_string())?;
        for (what, path) in [
            ("backends.slurm.bundle_dir", Some(&self.bundle_dir)),
            ("backends.slurm.node_infradev", Some(&self.node_infradev)),
            ("backends.slurm.node_wheels", self.node_wheels.as_ref()),
        ] {
            if let Some(path) = path
                && !path.is_absolute()
            {
                return Err(format!(
                    "{what} must be an absolute path, got {}",
                    path.display()
                ));
            }
        }
        if self.call_timeout_s == 0 {
            return Err("backends.slurm.call_timeout_s must be at least 1".into());
        }
        Ok(())
    }

    pub(crate) fn check_executor(&self) -> Result<(), BackendError> {
        match self.node_executor.as_str() {
            "docker" | "local" => Ok(()),
            other => Err(BackendError::Rejected(format!(
                "backends.slurm.node_executor must be \"docker\" or \"local\", got {other:?}"
            ))),
        }
    }
}

/// The environment Slurm commands run with: only what finding and reaching the cluster needs.
/// sbatch copies its environment into the job (`--export=ALL` is the default), so passing the
/// server's whole environment would hand its secrets to the code being graded.
const PASSED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "TZ",
    "SLURM_CONF",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CONTEXT",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "XDG_RUNTIME_DIR",
    "SSH_AUTH_SOCK",
];

/// What one finished command printed.
#[derive(Debug)]
struct Called {
    /// The command line as run, for messages.
    command: String,
    /// Exit status; `None` when a signal ended it.
    rc: Option<i32>,
    stdout: String,
    stderr: String,
}

/// A Slurm cluster reached through its command-line tools.
#[derive(Debug, Clone)]
pub struct Slurm {
    cfg: SlurmConfig,
}

impl Slurm {
    pub fn new(cfg: SlurmConfig) -> Self {
        Slurm { cfg }
    }

    pub fn config(&self) -> &SlurmConfig {
        &self.cfg
    }

    /// The path the nodes use for `server_path`, a bundle under `bundle_dir`: the same place
    /// under `node_bundle_dir`. A path outside `bundle_dir` is returned unchanged.
    pub fn bundle_on_node(&self, server_path: &Path) -> PathBuf {
        match server_path.strip_prefix(&self.cfg.bundle_dir) {
            Ok(rest) if rest.as_os_str().is_empty() => self.cfg.node_bundle_dir().to_path_buf(),
            Ok(rest) => self.cfg.node_bundle_dir().join(rest),
            Err(_) => server_path.to_path_buf(),
        }
    }

    /// Submits one dispatch (`sbatch --parsable`, the script of [`render_script`] on stdin) and
    /// returns Slurm's job id.
    ///
    /// A [`BackendError::Transient`] does not prove that nothing was submitted (sbatch may
    /// time out after the controller accepted the job): look for `sub.name()` with
    /// [`Slurm::find`] before submitting again.
    pub async fn submit(
        &self,
        sub: &Submission,
        bundle_on_node: &Path,
    ) -> Result<String, BackendError> {
        let script = render_script(sub, bundle_on_node, &self.cfg)?;
        let out = self.call(&["sbatch", "--parsable"], Some(&script)).await?;
        if out.rc != Some(0) {
            return Err(classify_failure(&out.command, out.rc, &out.stderr, true));
        }
        // `--parsable` prints `<id>` or `<id>;<cluster>`.
        let id = out
            .stdout
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .and_then(|l| l.split(';').next())
            .filter(|id| is_job_id(id))
            .ok_or_else(|| {
                BackendError::Transient(format!(
                    "`{}` succeeded but printed no job id (stdout {:?}, stderr {:?}); the job \
                     may exist: find it by the name {}",
                    out.command,
                    out.stdout,
                    out.stderr.trim(),
                    sub.name()
                ))
            })?;
        tracing::info!(
            job = sub.job_id,
            dispatch = sub.dispatch,
            slurm_id = id,
            "submitted to Slurm"
        );
        Ok(id.to_owned())
    }

    /// The newest Slurm job named `name` (a [`Submission::name`]), finished ones included, or
    /// `None`. It sees what `squeue -t all` sees: finished jobs only until the controller
    /// purges them (`MinJobAge` after they end).
    pub async fn find(&self, name: &str) -> Result<Option<String>, BackendError> {
        let plain = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !plain {
            return Err(BackendError::Rejected(format!(
                "cannot look up the Slurm job name {name:?}: only letters, digits, _ . - are allowed"
            )));
        }
        let out = self
            .call(&["squeue", "-h", "-t", "all", "-n", name, "-o", "%i"], None)
            .await?;
        if out.rc != Some(0) {
            return Err(classify_failure(&out.command, out.rc, &out.stderr, false));
        }
        // Job ids grow within one controller's life; array or het ids (`12_3`, `12+1`) are
        // not ours.
        Ok(out
            .stdout
            .lines()
            .filter_map(|l| l.trim().parse::<u64>().ok())
            .max()
            .map(|id| id.to_string()))
    }

    /// The live record of job `id` (`scontrol show job -o`); `None` when the controller does
    /// not know it (purged after `MinJobAge`, or never submitted here).
    pub async fn show(&self, id: &str) -> Result<Option<LiveJob>, BackendError> {
        check_job_id(id)?;
        let out = self
            .call(&["scontrol", "show", "job", "-o", id], None)
            .await?;
        if out.rc != Some(0) {
            if is_unknown_job(&out.stderr) {
                return Ok(None);
            }
            return Err(classify_failure(&out.command, out.rc, &out.stderr, false));
        }
        parse_scontrol_job(&out.stdout, id)
            .map(Some)
            .map_err(|e| BackendError::Transient(format!("`{}`: {e}", out.command)))
    }

    /// The runs of job `id` in the job-completion log (`sacct -c`, which reads the controller's
    /// `jobcomp/filetxt` file: the prefix must reach the controller host). Oldest first.
    pub async fn runs(&self, id: &str) -> Result<Vec<CompRun>, BackendError> {
        self.sacct_runs(id, &["-c"]).await
    }

    async fn sacct_runs(&self, id: &str, source: &[&str]) -> Result<Vec<CompRun>, BackendError> {
        check_job_id(id)?;
        let mut args = vec!["sacct"];
        args.extend_from_slice(source);
        args.extend([
            "-j",
            id,
            "-P",
            "-n",
            "--format=JobID,State,ExitCode,NodeList",
        ]);
        let out = self.call(&args, None).await?;
        if out.rc != Some(0) {
            return Err(classify_failure(&out.command, out.rc, &out.stderr, false));
        }
        Ok(parse_sacct_runs(&out.stdout, id))
    }

    /// Slurm's view of job `id`: the live record, plus the job-completion log when the live
    /// record cannot say enough (why a job was requeued; how a purged job ended). See
    /// [`remote_state`] for the mapping.
    pub async fn state(&self, id: &str) -> Result<RemoteState, BackendError> {
        let live = self.show(id).await?;
        let needs_log = match &live {
            None => true,
            Some(job) => {
                matches!(
                    job.state.as_str(),
                    "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "SPECIAL_EXIT"
                ) || (job.state == "PENDING" && job.restarts > 0)
            }
        };
        let mut runs = Vec::new();
        if needs_log {
            // The log only refines the answer: without it a requeue still reads as a requeue
            // and a purged job as Unknown, so its failure is logged, not returned.
            match self.runs(id).await {
                Ok(found) => runs = found,
                Err(e) => {
                    tracing::warn!(slurm_id = id, error = %e, "cannot read the job-completion log")
                }
            }
            if live.is_none() && runs.is_empty() {
                // Clusters with slurmdbd instead of jobcomp/filetxt: accounting has every run
                // (`-D`), and here all of them are over, so the last one decides.
                match self.sacct_runs(id, &["-D", "-X"]).await {
                    Ok(found) => runs = found,
                    Err(e) => tracing::debug!(slurm_id = id, error = %e, "no accounting record"),
                }
            }
        }
        Ok(remote_state(live, &runs))
    }

    /// Cancels job `id` (`scancel`). Cancelling a finished or unknown job succeeds: scancel
    /// says nothing and exits 0 for those.
    pub async fn cancel(&self, id: &str) -> Result<(), BackendError> {
        check_job_id(id)?;
        let out = self.call(&["scancel", id], None).await?;
        if out.rc != Some(0) {
            return Err(classify_failure(&out.command, out.rc, &out.stderr, false));
        }
        tracing::info!(slurm_id = id, "cancelled in Slurm");
        Ok(())
    }

    /// Runs one Slurm command behind the prefix, with the trimmed environment, stdin from
    /// `stdin` (or nothing), under `call_timeout_s`. Exits of any status come back as
    /// [`Called`]; a command that cannot start or does not finish in time is transient.
    async fn call(&self, args: &[&str], stdin: Option<&str>) -> Result<Called, BackendError> {
        let argv: Vec<&str> = self
            .cfg
            .command_prefix
            .iter()
            .map(String::as_str)
            .chain(args.iter().copied())
            .collect();
        let command = argv
            .iter()
            .map(|w| sh_quote(w))
            .collect::<Vec<_>>()
            .join(" ");
        let mut cmd = tokio::process::Command::new(argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .envs(
                PASSED_ENV
                    .iter()
                    .filter_map(|k| std::env::var_os(k).map(|v| (*k, v))),
            )
            // Messages we classify are English.
            .env("LC_ALL", "C")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let limit = Duration::from_secs(self.cfg.call_timeout_s.max(1));
        let started = Instant::now();
        let run = async {
            let mut child = cmd
                .spawn()
                .map_err(|e| BackendError::Transient(format!("cannot start `{command}`: {e}")))?;
            let input = child.stdin.take();
            let feed = async {
                match (input, stdin) {
                    (Some(mut pipe), Some(text)) => {
                        let written = pipe.write_all(text.as_bytes()).await;
                        drop(pipe); // EOF: sbatch reads the script to the end.
                        written
                    }
                    _ => Ok(()),
                }
            };
            let (fed, output) = tokio::join!(feed, child.wait_with_output());
            let output = output.map_err(|e| {
                BackendError::Transient(format!("lost `{command}` while it ran: {e}"))
            })?;
            let mut stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            if let Err(e) = fed
                && !output.status.success()
            {
                stderr.push_str(&format!("\n(writing the script to its stdin failed: {e})"));
            }
            Ok(Called {
                command: command.clone(),
                rc: output.status.code(),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr,
            })
        };
        let result = match tokio::time::timeout(limit, run).await {
            Ok(result) => result,
            Err(_) => Err(BackendError::Transient(format!(
                "`{command}` did not finish within {} s (call_timeout_s); is the Slurm \
                 controller reachable?",
                limit.as_secs()
            ))),
        };
        tracing::debug!(
            command,
            elapsed_ms = started.elapsed().as_millis() as u64,
            rc = result.as_ref().ok().and_then(|c| c.rc),
            "slurm call"
        );
        result
    }
}

/// Job ids we pass to Slurm are plain numbers: safe as a word for any shell behind the prefix.
fn is_job_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit())
}

fn check_job_id(id: &str) -> Result<(), BackendError> {
    if is_job_id(id) {
        Ok(())
    } else {
        Err(BackendError::Rejected(format!(
            "{id:?} is not a Slurm job id (digits only)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(toml_text: &str) -> Result<SlurmConfig, toml::de::Error> {
        toml::from_str(toml_text)
    }

    #[test]
    fn config_defaults_and_strictness() {
        let c = cfg("bundle_dir = \"/shared/b\"\nnode_infradev = \"/opt/infradev\"\n").unwrap();
        assert!(c.command_prefix.is_empty());
        assert!(c.constraint_from_labels);
        assert_eq!(c.node_executor, "docker");
        assert_eq!(c.call_timeout_s, 30);
        assert_eq!(c.time_slack_s, 300);
        assert_eq!(c.node_bundle_dir(), Path::new("/shared/b"));
        assert!(c.validate().is_ok());
        let err =
            cfg("bundle_dir = \"/b\"\nnode_infradev = \"/i\"\nbundle_dirs = 1\n").unwrap_err();
        assert!(err.to_string().contains("bundle_dirs"), "{err}");
        assert!(
            cfg("node_infradev = \"/i\"\n").is_err(),
            "bundle_dir is required"
        );
    }

    #[test]
    fn validate_table() {
        let base = "bundle_dir = \"/b\"\nnode_infradev = \"/i\"\n";
        let bad = [
            ("node_executor = \"podman\"", "node_executor"),
            ("node_bundle_dir = \"rel\"", "absolute"),
            ("node_bundle_dir = \"/x/%j\"", "%"),
            ("node_wheels = \"wheels\"", "node_wheels"),
            ("call_timeout_s = 0", "call_timeout_s"),
        ];
        for (line, want) in bad {
            let c = cfg(&format!("{base}{line}\n")).unwrap();
            let err = c.validate().unwrap_err();
            assert!(err.contains(want), "{line}: {err}");
        }
        let c =
            cfg("bundle_dir = \"b\"\nnode_infradev = \"/i\"\nnode_bundle_dir = \"/n\"\n").unwrap();
        assert!(c.validate().unwrap_err().contains("bundle_dir"));
    }

    #[test]
    fn bundle_paths_map_to_the_nodes_view() {
        let mut c = cfg("bundle_dir = \"/srv/bundles\"\nnode_infradev = \"/i\"\n").unwrap();
        let same = Slurm::new(c.clone());
        assert_eq!(
            same.bundle_on_node(Path::new("/srv/bundles/42-1")),
            Path::new("/srv/bundles/42-1")
        );
        c.node_bundle_dir = Some(PathBuf::from("/mnt/shared/bundles"));
        let moved = Slurm::new(c);
        assert_eq!(
            moved.bundle_on_node(Path::new("/srv/bundles/42-1")),
            Path::new("/mnt/shared/bundles/42-1")
        );
        assert_eq!(
            moved.bundle_on_node(Path::new("/srv/bundles")),
            Path::new("/mnt/shared/bundles")
        );
        // Component-wise: /srv/bundles2 is not under /srv/bundles.
        assert_eq!(
            moved.bundle_on_node(Path::new("/srv/bundles2/x")),
            Path::new("/srv/bundles2/x")
        );
    }

    #[test]
    fn job_ids() {
        for ok in ["1", "123456"] {
            assert!(is_job_id(ok), "{ok}");
        }
        for bad in ["", "12_3", "1;rm", "-1", "1 2", "123456789012345678901"] {
            assert!(!is_job_id(bad), "{bad}");
        }
    }

    /// The command runner with a stand-in for the Slurm tools: `sh -c` as the prefix.
    fn fake(script: &str, timeout_s: u64) -> Slurm {
        let mut c = cfg("bundle_dir = \"/b\"\nnode_infradev = \"/i\"\n").unwrap();
        c.command_prefix = vec!["sh".into(), "-c".into(), script.into(), "fake".into()];
        c.call_timeout_s = timeout_s;
        Slurm::new(c)
    }

    #[tokio::test]
    async fn calls_time_out_and_fail_to_spawn_as_transient() {
        let slow = fake("sleep 5", 1);
        let started = Instant::now();
        let err = slow.cancel("5").await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "timeout honoured"
        );
        assert!(
            matches!(&err, BackendError::Transient(m) if m.contains("within 1 s") && m.contains("scancel")),
            "{err:?}"
        );
        let mut c = cfg("bundle_dir = \"/b\"\nnode_infradev = \"/i\"\n").unwrap();
        c.command_prefix = vec!["/nonexistent/docker".into()];
        let err = Slurm::new(c).find("infradev-1-1").await.unwrap_err();
        assert!(
            matches!(&err, BackendError::Transient(m) if m.contains("cannot start") && m.contains("/nonexistent/docker")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn runner_passes_args_stdin_and_a_trimmed_environment() {
        // cargo sets CARGO_PKG_NAME for the test process; the runner must not pass it on.
        assert!(
            std::env::var_os("CARGO_PKG_NAME").is_some(),
            "run under cargo test"
        );
        let s = fake(
            r#"case "$1" in
                 sbatch) grep -q '^#SBATCH --job-name="infradev-1-1"$' || { echo "no script on stdin" >&2; exit 4; }
                         if env | grep -q '^CARGO_PKG_NAME='; then echo "environment leaked" >&2; exit 3; fi
                         [ "$LC_ALL" = C ] || { echo "LC_ALL not C" >&2; exit 5; }
                         echo "77;infradev" ;;
                 squeue) printf '3\n12\n9\n' ;;
                 scancel) echo "scancel: error: Kill job error on job id $2: Access/permission denied" >&2; exit 1 ;;
               esac"#,
            10,
        );
        let sub = crate::service::backend::Submission {
            job_id: 1,
            dispatch: 1,
            task_id: "t".into(),
            repo: "o/r".into(),
            number: 1,
            head_sha: "abc".into(),
            placement: crate::service::backend::Placement {
                gpus: 0,
                memory_mb: 100,
                cpus: 1,
                time_limit: Duration::from_secs(60),
                labels: vec![],
            },
            result_url: "http://h/r".into(),
        };
        assert_eq!(s.submit(&sub, Path::new("/b/1-1")).await.unwrap(), "77");
        assert_eq!(s.find("infradev-1-1").await.unwrap().as_deref(), Some("12"));
        let err = s.cancel("5").await.unwrap_err();
        assert!(matches!(err, BackendError::Rejected(_)), "{err:?}");
        assert!(err.to_string().contains("exited 1"), "{err}");
        assert!(s.find("bad name").await.is_err());
        assert!(s.cancel("5;reboot").await.is_err());
    }
}
