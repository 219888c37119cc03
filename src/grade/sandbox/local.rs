//! The local executor: the same phase as a process group with rlimits, a wall clock and a
//! scrubbed environment, for hosts without Docker (the Actions step on a bare runner).
//!
//! It cannot give every guarantee a container gives; `limitations` says which, in plain
//! words, and every report carries that list.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use tokio::io::AsyncReadExt;

use super::broker::{MemorySource, Meter, RankAddress, SubjectEnd, SubjectHost};
use super::{
    CappedOutput, Layout, PhaseSpec, Role, brokered, collected, judge_argv, official_argv,
    sandbox_env, subject_argv,
};
use crate::grade::results::{PhaseResults, SandboxEnd};
use crate::grading::Kill;
use crate::task::Gpus;

/// The unprivileged user the sandbox drops to when the grader runs as root.
const NOBODY: libc::uid_t = 65534;
/// The subject of the probe phase runs as another unprivileged user than the judge, so it can
/// neither trace nor signal the judge, nor read its memory through procfs.
const SUBJECT_USER: libc::uid_t = 65533;

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
            "the ranks of a multi-rank probe share one network namespace: per-rank traffic is not measured and per-rank traffic budgets are not enforced".to_owned(),
        ];
        if !self.privileged {
            out.extend([
                "the network is not isolated (a private network namespace needs root)".to_owned(),
                "the code runs as the invoking user, so it could modify the probes and the results"
                    .to_owned(),
                "the process limit counts every process of the invoking user".to_owned(),
                "the judge and the subject of the probe phase run as the same user: the subject could trace the judge".to_owned(),
            ]);
        } else {
            // RLIMIT_NPROC is per real uid, host-wide: Docker sandboxes run as 65534 too.
            out.push(format!(
                "the process limit counts every process of uid {NOBODY} on the host, another grade's sandboxes included"
            ));
        }
        out
    }

    fn layout(&self, spec: &PhaseSpec, socket_dir: &Path) -> Layout {
        Layout {
            repo: spec.repo.display().to_string(),
            probes: spec.probes.as_ref().map(|p| p.display().to_string()),
            lib: spec.lib.display().to_string(),
            subject_lib: spec.lib.join("subject").display().to_string(),
            spec: spec.spec_file.display().to_string(),
            socket_dir: socket_dir.display().to_string(),
            scratch: spec.scratch.display().to_string(),
        }
    }

    /// The official phase: pytest in a confined process group, results over the socket.
    pub(crate) async fn run_official(
        &self,
        spec: &PhaseSpec,
        progress: Arc<AtomicUsize>,
    ) -> (SandboxEnd, String, PhaseResults) {
        collected(spec, progress, |dir| async move {
            let layout = self.layout(spec, &dir);
            let python = self.python.display().to_string();
            let argv = official_argv(&python, &layout, &spec.plugins, &spec.targets);
            let env = sandbox_env(&layout, Role::Official, spec.test_timeout_s, &spec.env);
            self.run_confined(spec, &argv, env, &spec.repo, NOBODY)
                .await
        })
        .await
    }

    /// The probe phase: a judge process and subject processes, with the broker between.
    pub(crate) async fn run_probes(
        &self,
        spec: &PhaseSpec,
        progress: Arc<AtomicUsize>,
    ) -> (SandboxEnd, String, PhaseResults) {
        brokered(spec, progress, |judge_dir, subject_dir| {
            let python = self.python.display().to_string();
            let judge_layout = self.layout(spec, judge_dir);
            // The subject gets a scratch directory of its own: nothing it writes lands where
            // the judge runs.
            let mut subject_layout = self.layout(spec, subject_dir);
            let subject_scratch = spec.dir.join("subject-tmp");
            std::fs::create_dir_all(&subject_scratch)
                .and_then(|()| {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(
                        &subject_scratch,
                        std::fs::Permissions::from_mode(0o1777),
                    )
                })
                .map_err(|e| format!("cannot create {}: {e}", subject_scratch.display()))?;
            subject_layout.scratch = subject_scratch.display().to_string();
            let subjects = LocalSubjects {
                executor: self,
                spec,
                argv: subject_argv(&python, &subject_layout),
                env: sandbox_env(
                    &subject_layout,
                    Role::Subject,
                    spec.test_timeout_s,
                    &spec.env,
                ),
                current: None,
                ranks: Vec::new(),
            };
            let argv = judge_argv(&python, &judge_layout, &spec.plugins, &spec.targets);
            let env = sandbox_env(&judge_layout, Role::Judge, spec.test_timeout_s, &spec.env);
            let judge = async move {
                self.run_confined(spec, &argv, env, &spec.scratch, NOBODY)
                    .await
            };
            Ok((subjects, judge))
        })
        .await
    }

    /// Runs one confined process to its end (or its wall clock).
    async fn run_confined(
        &self,
        spec: &PhaseSpec,
        argv: &[String],
        env: Vec<(String, String)>,
        cwd: &Path,
        uid: libc::uid_t,
    ) -> (SandboxEnd, String) {
        match self.spawn_as(spec, argv, env, cwd, uid) {
            Ok(child) => wait_capped(child, spec.limits.wall, spec.limits.output_bytes).await,
            Err(e) => (infra(e), String::new()),
        }
    }

    /// Starts one confined process (its own process group, rlimits, and as root a private
    /// network namespace with only its loopback up, as Docker's `none` network, and user
    /// `uid`).
    fn spawn_as(
        &self,
        spec: &PhaseSpec,
        argv: &[String],
        env: Vec<(String, String)>,
        cwd: &Path,
        uid: libc::uid_t,
    ) -> Result<tokio::process::Child, String> {
        self.spawn_in(spec, argv, env, cwd, uid, NetNs::PrivateWithLoopback)
    }

    /// `spawn_as` with a choice of network namespace (when running as root).
    fn spawn_in(
        &self,
        spec: &PhaseSpec,
        argv: &[String],
        env: Vec<(String, String)>,
        cwd: &Path,
        uid: libc::uid_t,
        net: NetNs,
    ) -> Result<tokio::process::Child, String> {
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .envs(env)
            .current_dir(cwd)
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
        // functions (setsid, setrlimit, unshare, setns, socket, ioctl, close, setgroups,
        // setgid, setuid).
        unsafe {
            cmd.pre_exec(move || confine(&limits, privileged, uid, net));
        }
        cmd.spawn()
            .map_err(|e| format!("cannot start {}: {e}", argv[0]))
    }
}

/// Waits for a confined process with a wall clock, keeping the tail of its output; kills
/// its process group afterwards.
async fn wait_capped(
    mut child: tokio::process::Child,
    wall: std::time::Duration,
    cap: usize,
) -> (SandboxEnd, String) {
    let pgid = child.id().map(|p| p as libc::pid_t);
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    let read_both = async {
        let (a, b) = tokio::join!(
            read_capped(stdout.as_mut(), cap),
            read_capped(stderr.as_mut(), cap)
        );
        format!("{a}{b}")
    };
    let waited = tokio::time::timeout(wall, async { tokio::join!(child.wait(), read_both) }).await;
    kill_group(pgid);
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
            let end = match status.code() {
                Some(code) => SandboxEnd {
                    exit_code: Some(i64::from(code)),
                    kill: None,
                    infra_error: None,
                },
                None => SandboxEnd {
                    exit_code: None,
                    kill: Some(Kill::Crashed),
                    infra_error: None,
                },
            };
            (end, output)
        }
    }
}

fn kill_group(pgid: Option<libc::pid_t>) {
    if let Some(pgid) = pgid {
        // SAFETY: killpg with a process group we created; errors (already gone) are fine.
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
    }
}

/// The subject processes of one probe phase.
struct LocalSubjects<'a> {
    executor: &'a LocalExecutor,
    spec: &'a PhaseSpec,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    current: Option<tokio::process::Child>,
    /// The running rank group's processes, in rank order.
    ranks: Vec<tokio::process::Child>,
}

impl SubjectHost for LocalSubjects<'_> {
    async fn start(&mut self, _generation: u32) -> Result<(), String> {
        let mut child = self.executor.spawn_as(
            self.spec,
            &self.argv,
            self.env.clone(),
            &self.spec.repo,
            SUBJECT_USER,
        )?;
        // The subject's output is never read: drop the pipes so it cannot block on them.
        drop(child.stdout.take());
        drop(child.stderr.take());
        self.current = Some(child);
        Ok(())
    }

    async fn meter(&mut self) -> Meter {
        match self.current.as_ref().and_then(|c| c.id()) {
            Some(pid) => Meter::for_process(pid),
            None => Meter::default(),
        }
    }

    async fn stop(&mut self) -> SubjectEnd {
        if let Some(mut child) = self.current.take() {
            kill_group(child.id().map(|p| p as libc::pid_t));
            let _ = child.wait().await;
        }
        // RLIMIT_AS makes allocations fail (MemoryError) instead of an OOM kill.
        SubjectEnd::default()
    }

    /// Each rank is a process group of its own, as the subject user. As root, the ranks share
    /// one private network namespace (rank 0's, with its loopback up); otherwise the host's.
    async fn start_ranks(
        &mut self,
        _group: u32,
        socket_dirs: &[PathBuf],
    ) -> Result<RankAddress, String> {
        let master_port = if self.executor.privileged {
            29500
        } else {
            free_port().map_err(|e| format!("cannot find a free port for rank 0: {e}"))?
        };
        let mut netns: Option<std::fs::File> = None;
        for (rank, dir) in socket_dirs.iter().enumerate() {
            let socket = dir
                .join(super::broker::SUBJECT_SOCKET)
                .display()
                .to_string();
            let env = self
                .env
                .iter()
                .map(|(k, v)| match k.as_str() {
                    "INFRADEV_BROKER" => (k.clone(), socket.clone()),
                    _ => (k.clone(), v.clone()),
                })
                .collect();
            let net = match &netns {
                None => NetNs::PrivateWithLoopback,
                Some(f) => NetNs::Join(std::os::fd::AsRawFd::as_raw_fd(f)),
            };
            let mut child = self.executor.spawn_in(
                self.spec,
                &self.argv,
                env,
                &self.spec.repo,
                SUBJECT_USER,
                net,
            )?;
            drop(child.stdout.take());
            drop(child.stderr.take());
            if rank == 0 && self.executor.privileged {
                let pid = child.id().ok_or("rank 0 exited at once")?;
                netns = Some(
                    std::fs::File::open(format!("/proc/{pid}/ns/net"))
                        .map_err(|e| format!("cannot open rank 0's network namespace: {e}"))?,
                );
            }
            self.ranks.push(child);
        }
        Ok(RankAddress {
            master_addr: "127.0.0.1".into(),
            master_port,
        })
    }

    async fn rank_meters(&mut self) -> Vec<Meter> {
        // Memory per process; traffic cannot be told apart per rank here (one namespace).
        self.ranks
            .iter()
            .map(|c| match c.id() {
                Some(pid) => Meter::new(Some(MemorySource::Process { pid }), None),
                None => Meter::default(),
            })
            .collect()
    }

    async fn stop_ranks(&mut self) -> Vec<SubjectEnd> {
        let ranks = std::mem::take(&mut self.ranks);
        for child in &ranks {
            kill_group(child.id().map(|p| p as libc::pid_t));
        }
        let mut ends = Vec::with_capacity(ranks.len());
        for mut child in ranks {
            let _ = child.wait().await;
            ends.push(SubjectEnd::default());
        }
        ends
    }
}

/// A port nobody listens on now (the host's network is shared without root).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Which network namespace a confined process gets when the executor runs as root.
#[derive(Clone, Copy)]
enum NetNs {
    /// A new one with only its loopback up (a phase's process; rank 0 of a group). Not
    /// empty: upstream tests rendezvous on localhost (torch.distributed, zmq), and with `lo`
    /// down they fail on our account.
    PrivateWithLoopback,
    /// The one this descriptor (`/proc/<pid>/ns/net`) names (the other ranks).
    Join(std::os::fd::RawFd),
}

#[derive(Clone, Copy)]
struct RLimits {
    address_space: u64,
    processes: u64,
    file_size: u64,
}

fn confine(
    limits: &RLimits,
    privileged: bool,
    uid: libc::uid_t,
    net: NetNs,
) -> std::io::Result<()> {
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
            match net {
                NetNs::PrivateWithLoopback => {
                    check(libc::unshare(libc::CLONE_NEWNET))?;
                    loopback_up()?;
                }
                NetNs::Join(fd) => check(libc::setns(fd, libc::CLONE_NEWNET))?,
            }
            check(libc::setgroups(0, std::ptr::null()))?;
            check(libc::setgid(uid))?;
            check(libc::setuid(uid))?;
        }
    }
    Ok(())
}

/// Brings `lo` up in the calling process's (new) network namespace.
///
/// # Safety
/// Plain syscalls; async-signal-safe, for use between fork and exec.
unsafe fn loopback_up() -> std::io::Result<()> {
    // SAFETY: socket/ioctl/close on a descriptor we own and a zeroed, NUL-terminated ifreq.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (d, s) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *d = *s as libc::c_char;
        }
        let mut rc = libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req);
        if rc == 0 {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            rc = libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req);
        }
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if rc == 0 { Ok(()) } else { Err(err) }
    }
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
