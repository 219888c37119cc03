//! The local executor: the same phase as a process group with rlimits, a wall clock and a
//! scrubbed environment, for hosts without Docker (the Actions step on a bare runner).
//!
//! It cannot give every guarantee a container gives; `limitations` says which, in plain
//! words, and every report carries that list.

use std::path::PathBuf;
use std::process::Stdio;

use tokio::io::AsyncReadExt;

use super::{CappedOutput, Layout, PhaseSpec, pytest_argv, sandbox_env};
use crate::grading::Kill;
use crate::results::SandboxEnd;
use crate::task::Gpus;

/// The unprivileged user the sandbox drops to when the grader runs as root.
const NOBODY: libc::uid_t = 65534;

pub struct LocalExecutor {
    python: PathBuf,
    /// Running as root: the sandbox gets a private (empty) network namespace and drops to
    /// `nobody`, so it cannot write the probes or anything else of ours.
    privileged: bool,
}

impl LocalExecutor {
    pub fn new(python: PathBuf) -> Self {
        // SAFETY: geteuid has no preconditions.
        let privileged = unsafe { libc::geteuid() } == 0;
        LocalExecutor { python, privileged }
    }

    pub fn limitations(&self) -> Vec<String> {
        let mut out = vec![
            "no filesystem isolation: the code can read whatever its user can read".to_owned(),
            "memory is limited as address space (RLIMIT_AS): going over raises MemoryError rather than an OOM kill".to_owned(),
            "the CPU share is not limited".to_owned(),
            "processes that leave the process group are not killed when the phase ends".to_owned(),
        ];
        if !self.privileged {
            out.extend([
                "the network is not isolated (a private network namespace needs root)".to_owned(),
                "the code runs as the invoking user, so it could modify the probes and the results"
                    .to_owned(),
                "the process limit counts every process of the invoking user".to_owned(),
            ]);
        }
        out
    }

    pub(crate) async fn run(&self, spec: &PhaseSpec) -> (SandboxEnd, String) {
        let layout = Layout {
            repo: spec.repo.display().to_string(),
            probes: spec.probes.as_ref().map(|p| p.display().to_string()),
            lib: spec.lib.display().to_string(),
            spec: spec.spec_file.display().to_string(),
            out: spec.out.display().to_string(),
            scratch: spec.scratch.display().to_string(),
        };
        let argv = pytest_argv(
            &self.python.display().to_string(),
            &layout,
            spec.phase,
            &spec.plugins,
            &spec.targets,
        );
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .envs(sandbox_env(&layout, &spec.env))
            .current_dir(&spec.repo)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match &spec.gpus {
            Gpus::Count(n) => cmd.env(
                "CUDA_VISIBLE_DEVICES",
                (0..*n).map(|i| i.to_string()).collect::<Vec<_>>().join(","),
            ),
            Gpus::Ids(ids) => cmd.env("CUDA_VISIBLE_DEVICES", ids.join(",")),
        };
        let limits = RLimits {
            address_space: spec.limits.memory_mb * 1024 * 1024,
            processes: spec.limits.pids.max(1) as u64,
            file_size: spec.limits.scratch_mb * 1024 * 1024,
        };
        let privileged = self.privileged;
        // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
        // functions (setsid, setrlimit, unshare, setgroups, setgid, setuid).
        unsafe {
            cmd.pre_exec(move || confine(&limits, privileged));
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return (
                    infra(format!("cannot start {}: {e}", argv[0])),
                    String::new(),
                );
            }
        };
        let pgid = child.id().map(|p| p as libc::pid_t);
        let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
        let cap = spec.limits.output_bytes;
        let read_both = async {
            let (a, b) = tokio::join!(
                read_capped(stdout.as_mut(), cap),
                read_capped(stderr.as_mut(), cap)
            );
            format!("{a}{b}")
        };
        let waited = tokio::time::timeout(spec.limits.wall, async {
            tokio::join!(child.wait(), read_both)
        })
        .await;
        let kill_group = || {
            if let Some(pgid) = pgid {
                // SAFETY: killpg with a process group we created; errors (already gone) are fine.
                unsafe { libc::killpg(pgid, libc::SIGKILL) };
            }
        };
        kill_group();
        match waited {
            Err(_) => {
                let _ = child.wait().await;
                (
                    SandboxEnd {
                        exit_code: None,
                        kill: Some(Kill::TimedOut),
                        infra_error: None,
                    },
                    String::new(),
                )
            }
            Ok((Err(e), output)) => (infra(format!("lost the sandbox process: {e}")), output),
            Ok((Ok(status), output)) => {
                use std::os::unix::process::ExitStatusExt;
                let end = match (status.code(), status.signal()) {
                    (Some(code), _) => SandboxEnd {
                        exit_code: Some(i64::from(code)),
                        kill: None,
                        infra_error: None,
                    },
                    (None, _) => SandboxEnd {
                        exit_code: None,
                        kill: Some(Kill::Crashed),
                        infra_error: None,
                    },
                };
                (end, output)
            }
        }
    }
}

#[derive(Clone, Copy)]
struct RLimits {
    address_space: u64,
    processes: u64,
    file_size: u64,
}

fn confine(limits: &RLimits, privileged: bool) -> std::io::Result<()> {
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    let set = |resource, value: u64| {
        let lim = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: a valid resource and a pointer to a live rlimit.
        check(unsafe { libc::setrlimit(resource, &lim) })
    };
    // SAFETY: plain syscalls on the calling (child) process.
    unsafe {
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        set(libc::RLIMIT_AS, limits.address_space)?;
        set(libc::RLIMIT_NPROC, limits.processes)?;
        set(libc::RLIMIT_FSIZE, limits.file_size)?;
        set(libc::RLIMIT_CORE, 0)?;
        if privileged {
            check(libc::unshare(libc::CLONE_NEWNET))?;
            check(libc::setgroups(0, std::ptr::null()))?;
            check(libc::setgid(NOBODY))?;
            check(libc::setuid(NOBODY))?;
        }
    }
    Ok(())
}

async fn read_capped<R: tokio::io::AsyncRead + Unpin>(
    reader: Option<&mut R>,
    cap: usize,
) -> String {
    let mut out = CappedOutput::new(cap);
    if let Some(reader) = reader {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = reader.read(&mut buf).await {
            if n == 0 {
                break;
            }
            out.push(&buf[..n]);
        }
    }
    out.into_string()
}

fn infra(message: String) -> SandboxEnd {
    SandboxEnd {
        exit_code: None,
        kill: None,
        infra_error: Some(message),
    }
}
