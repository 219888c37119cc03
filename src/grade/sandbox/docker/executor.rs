//! Phases in containers: no network, read-only root, every capability dropped, no new
//! privileges, a non-root user, pids/memory/CPU limits, a capped log and a wall clock.
//!
//! The official phase is one container; the probe phase is two (docs/probe-protocol.md): a
//! judge that never sees the repository and a subject that never sees the probes, each with
//! its own socket directory and nothing else in common.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, DeviceRequest, HostConfig, HostConfigLogConfig, Mount, MountType,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, LogsOptionsBuilder,
    StartContainerOptions, WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;

use super::container::{LABEL_DEADLINE, LABEL_MANAGED, LABEL_RUN, kill, remove_container};
use super::image::EnvImage;
use super::ranks::DockerRanks;
use crate::grade::results::{PhaseResults, SandboxEnd};
use crate::grade::sandbox::broker::{Meter, RankAddress, SubjectEnd, SubjectHost};
use crate::grade::sandbox::command::{Role, judge_argv, official_argv, subject_argv};
use crate::grade::sandbox::{CappedOutput, Layout, PhaseSpec, brokered, collected, sandbox_env};
use crate::grading::Kill;
use crate::task::Gpus;

/// Grace beyond a phase's wall clock before the reaper treats its container as orphaned.
const REAP_GRACE_S: u64 = 300;
/// The unprivileged user every sandbox runs as (`nobody` in Debian).
const SANDBOX_USER: &str = "65534:65534";
/// What the Docker daemon keeps of a container's output (json-file driver).
const LOG_MAX_SIZE: &str = "1m";

pub struct DockerExecutor {
    docker: Docker,
    image: EnvImage,
}

impl DockerExecutor {
    /// Connects to the local Docker Engine and negotiates the API version.
    pub async fn connect() -> anyhow::Result<Docker> {
        use anyhow::Context;
        let docker =
            Docker::connect_with_local_defaults().context("cannot reach the Docker Engine")?;
        docker
            .negotiate_version()
            .await
            .context("cannot reach the Docker Engine (is dockerd running?)")
    }

    pub fn new(docker: Docker, image: EnvImage) -> Self {
        DockerExecutor { docker, image }
    }

    pub fn image(&self) -> &EnvImage {
        &self.image
    }

    /// A guard that removes the sandboxes of run `run_id` if dropped before it is disarmed.
    pub fn run_reaper(&self, run_id: &str) -> super::RunReaper {
        super::RunReaper::new(self.docker.clone(), run_id)
    }

    /// The official phase: one container, results over the events socket.
    pub(crate) async fn run_official(
        &self,
        spec: &PhaseSpec,
        progress: Arc<AtomicUsize>,
    ) -> (SandboxEnd, String, PhaseResults) {
        collected(spec, progress, |dir| async move {
            let layout = Layout::container(false);
            let mounts = vec![
                bind(&spec.repo, &layout.repo, true),
                bind(&spec.lib, &layout.lib, true),
                bind(&spec.spec_file, &layout.spec, true),
                bind(&dir, &layout.socket_dir, true),
            ];
            let body = container_body(
                spec,
                &self.image.tag,
                official_argv("python3", &layout, &spec.plugins, &spec.targets),
                sandbox_env(&layout, Role::Official, spec.test_timeout_s, &spec.env),
                mounts,
                &layout.repo,
            );
            self.run_container(&name(spec, "tests"), body, spec).await
        })
        .await
    }

    /// The probe phase: a judge container and subject containers, with the broker between.
    pub(crate) async fn run_probes(
        &self,
        spec: &PhaseSpec,
        progress: Arc<AtomicUsize>,
    ) -> (SandboxEnd, String, PhaseResults) {
        brokered(spec, progress, |judge_dir, subject_dir| {
            let layout = Layout::container(true);
            let (Some(probes), Some(probes_target)) = (&spec.probes, &layout.probes) else {
                return Err("a probe phase without probes".to_owned());
            };
            let judge_mounts = vec![
                bind(probes, probes_target, true),
                bind(&spec.lib, &layout.lib, true),
                bind(&spec.lib.join("subject"), &layout.subject_lib, true),
                bind(judge_dir, &layout.socket_dir, true),
            ];
            let judge = container_body(
                spec,
                &self.image.tag,
                judge_argv("python3", &layout, &spec.plugins, &spec.targets),
                sandbox_env(&layout, Role::Judge, spec.test_timeout_s, &spec.env),
                judge_mounts,
                &layout.scratch,
            );
            let subject = container_body(
                spec,
                &self.image.tag,
                subject_argv("python3", &layout),
                sandbox_env(&layout, Role::Subject, spec.test_timeout_s, &spec.env),
                vec![
                    bind(&spec.repo, &layout.repo, true),
                    bind(&spec.lib.join("subject"), &layout.subject_lib, true),
                    bind(subject_dir, &layout.socket_dir, true),
                ],
                &layout.repo,
            );
            let subjects = DockerSubjects {
                docker: &self.docker,
                ranks: DockerRanks::new(
                    subject.clone(),
                    layout.socket_dir.clone(),
                    name(spec, "rank"),
                    spec.run_id.clone(),
                ),
                body: subject,
                prefix: name(spec, "subject"),
                current: None,
            };
            let judge_name = name(spec, "judge");
            Ok((subjects, async move {
                self.run_container(&judge_name, judge, spec).await
            }))
        })
        .await
    }

    /// Creates, starts and waits for one container; removes it afterwards.
    async fn run_container(
        &self,
        name: &str,
        body: ContainerCreateBody,
        spec: &PhaseSpec,
    ) -> (SandboxEnd, String) {
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::default().name(name).build()),
                body,
            )
            .await;
        let id = match created {
            Ok(c) => c.id,
            Err(e) => {
                return (
                    infra(format!("cannot create the sandbox container: {e}")),
                    String::new(),
                );
            }
        };
        let result = self.start_and_wait(&id, spec).await;
        let output = self.logs(&id, spec.limits.output_bytes).await;
        self.remove(&id).await;
        (result, output)
    }

    async fn remove(&self, id: &str) {
        remove_container(&self.docker, id).await;
    }

    async fn start_and_wait(&self, id: &str, spec: &PhaseSpec) -> SandboxEnd {
        if let Err(e) = self
            .docker
            .start_container(id, None::<StartContainerOptions>)
            .await
        {
            return infra(format!("cannot start the sandbox container: {e}"));
        }
        let wait = self.docker.wait_container(
            id,
            Some(
                WaitContainerOptionsBuilder::default()
                    .condition("not-running")
                    .build(),
            ),
        );
        let timed_out = tokio::time::timeout(spec.limits.wall, wait.collect::<Vec<_>>())
            .await
            .is_err();
        if timed_out {
            kill(&self.docker, id).await;
        }
        let state = match self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
        {
            Ok(info) => info.state.unwrap_or_default(),
            Err(e) => return infra(format!("cannot inspect the sandbox container: {e}")),
        };
        let kill = if timed_out {
            Some(Kill::TimedOut)
        } else if state.oom_killed == Some(true) {
            Some(Kill::OutOfMemory)
        } else if state.exit_code.is_some_and(|c| c >= 128) {
            Some(Kill::Crashed)
        } else {
            None
        };
        let infra_error = state
            .error
            .filter(|e| !e.is_empty())
            .map(|e| format!("Docker reported: {e}"));
        SandboxEnd {
            exit_code: if timed_out { None } else { state.exit_code },
            kill,
            infra_error,
        }
    }

    /// The tail of a container's output; reading stops after a few times the cap (the log
    /// itself is capped by the daemon).
    async fn logs(&self, id: &str, cap: usize) -> String {
        let mut out = CappedOutput::new(cap);
        let opts = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .build();
        let mut stream = self.docker.logs(id, Some(opts));
        let mut read = 0usize;
        while let Some(Ok(chunk)) = stream.next().await {
            let bytes = chunk.into_bytes();
            read += bytes.len();
            out.push(&bytes);
            if read > 4 * cap.max(1 << 20) {
                break;
            }
        }
        out.into_string()
    }
}

/// The subject containers of one probe phase: one at a time, replaced after a fault.
struct DockerSubjects<'a> {
    docker: &'a Docker,
    body: ContainerCreateBody,
    prefix: String,
    /// The running subject's container id and its init process on this host.
    current: Option<(String, Option<u32>)>,
    /// The rank groups' containers and network.
    ranks: DockerRanks,
}

impl SubjectHost for DockerSubjects<'_> {
    async fn start(&mut self, generation: u32) -> Result<(), String> {
        let name = format!("{}-{generation}", self.prefix);
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                self.body.clone(),
            )
            .await
            .map_err(|e| format!("cannot create the subject container: {e}"))?;
        self.current = Some((created.id.clone(), None));
        self.docker
            .start_container(&created.id, None::<StartContainerOptions>)
            .await
            .map_err(|e| format!("cannot start the subject container: {e}"))?;
        let pid = self
            .docker
            .inspect_container(&created.id, None::<InspectContainerOptions>)
            .await
            .ok()
            .and_then(|i| i.state?.pid)
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p > 0);
        self.current = Some((created.id, pid));
        Ok(())
    }

    async fn meter(&mut self) -> Meter {
        match &self.current {
            Some((_, Some(pid))) => Meter::for_container(*pid),
            _ => Meter::default(),
        }
    }

    async fn stop(&mut self) -> SubjectEnd {
        let Some((id, _)) = self.current.take() else {
            return SubjectEnd::default();
        };
        // Ended (or killed now) and recorded as ended before asking how: the daemon notes an
        // OOM kill with the exit, so an early look can miss it.
        let _ =
            tokio::time::timeout(std::time::Duration::from_secs(5), kill(self.docker, &id)).await;
        let oom_killed = self
            .docker
            .inspect_container(&id, None::<InspectContainerOptions>)
            .await
            .ok()
            .and_then(|i| i.state?.oom_killed)
            .unwrap_or(false);
        remove_container(self.docker, &id).await;
        SubjectEnd { oom_killed }
    }

    async fn start_ranks(
        &mut self,
        group: u32,
        socket_dirs: &[PathBuf],
    ) -> Result<RankAddress, String> {
        self.ranks.start(self.docker, group, socket_dirs).await
    }

    async fn rank_meters(&mut self) -> Vec<Meter> {
        self.ranks.meters()
    }

    async fn stop_ranks(&mut self) -> Vec<SubjectEnd> {
        self.ranks.stop(self.docker).await
    }
}

fn name(spec: &PhaseSpec, role: &str) -> String {
    format!("infradev-{}-{role}", spec.run_id).to_lowercase()
}

fn infra(message: String) -> SandboxEnd {
    SandboxEnd {
        exit_code: None,
        kill: None,
        infra_error: Some(message),
    }
}

fn bind(source: &Path, target: &str, read_only: bool) -> Mount {
    Mount {
        target: Some(target.to_owned()),
        // Docker rejects relative bind sources.
        source: Some(
            std::path::absolute(source)
                .unwrap_or_else(|_| source.to_path_buf())
                .display()
                .to_string(),
        ),
        typ: Some(MountType::BIND),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// A locked-down container. Everything not named here is denied.
fn container_body(
    spec: &PhaseSpec,
    image: &str,
    cmd: Vec<String>,
    env: Vec<(String, String)>,
    mounts: Vec<Mount>,
    working_dir: &str,
) -> ContainerCreateBody {
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
        + spec.limits.wall.as_secs()
        + REAP_GRACE_S;
    let labels = HashMap::from([
        (LABEL_MANAGED.to_owned(), "true".to_owned()),
        (LABEL_RUN.to_owned(), spec.run_id.clone()),
        (LABEL_DEADLINE.to_owned(), deadline.to_string()),
    ]);
    let memory = (spec.limits.memory_mb * 1024 * 1024) as i64;
    let host_config = HostConfig {
        network_mode: Some("none".into()),
        readonly_rootfs: Some(true),
        tmpfs: Some(HashMap::from([(
            "/tmp".to_owned(),
            format!("rw,nosuid,nodev,size={}m,mode=1777", spec.limits.scratch_mb),
        )])),
        mounts: Some(mounts),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        memory: Some(memory),
        memory_swap: Some(memory),
        nano_cpus: Some((spec.limits.cpus * 1e9) as i64),
        pids_limit: Some(spec.limits.pids),
        init: Some(true),
        ipc_mode: Some("private".into()),
        device_requests: gpu_request(&spec.gpus),
        log_config: Some(HostConfigLogConfig {
            typ: Some("json-file".into()),
            config: Some(HashMap::from([
                ("max-size".to_owned(), LOG_MAX_SIZE.to_owned()),
                ("max-file".to_owned(), "1".to_owned()),
            ])),
        }),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: Some(cmd),
        entrypoint: Some(Vec::new()),
        env: Some(env.into_iter().map(|(k, v)| format!("{k}={v}")).collect()),
        user: Some(SANDBOX_USER.into()),
        working_dir: Some(working_dir.to_owned()),
        labels: Some(labels),
        // Isolation is `network_mode: none` (a loopback of its own, nothing else). Not
        // `network_disabled`: with it Docker writes no /etc/hosts, so `localhost` does not
        // resolve and code that rendezvous on it (torch.distributed's MASTER_ADDR=localhost in
        // upstream tests) retries until its timeout: our fault, blamed on the submission.
        network_disabled: None,
        host_config: Some(host_config),
        ..Default::default()
    }
}

fn gpu_request(gpus: &Gpus) -> Option<Vec<DeviceRequest>> {
    let request = |count, device_ids| DeviceRequest {
        driver: Some("nvidia".into()),
        count,
        device_ids,
        capabilities: Some(vec![vec!["gpu".into()]]),
        ..Default::default()
    };
    match gpus {
        Gpus::Count(0) => None,
        Gpus::Count(n) => Some(vec![request(Some(i64::from(*n)), None)]),
        Gpus::Ids(ids) => Some(vec![request(None, Some(ids.clone()))]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grade::sandbox::Limits;
    use crate::grading::Phase;
    use std::path::PathBuf;
    use std::time::Duration;

    fn spec(gpus: Gpus) -> PhaseSpec {
        PhaseSpec {
            phase: Phase::Probes,
            run_id: "r1".into(),
            repo: PathBuf::from("/w/repo"),
            probes: Some(PathBuf::from("/t/probes")),
            lib: PathBuf::from("/t/lib"),
            spec_file: PathBuf::from("/w/spec.json"),
            dir: PathBuf::from("/w/probes"),
            scratch: PathBuf::from("/w/tmp"),
            targets: vec!["test_a.py".into()],
            limits: Limits {
                memory_mb: 512,
                cpus: 1.5,
                pids: 64,
                wall: Duration::from_secs(30),
                output_bytes: 1024,
                scratch_mb: 64,
            },
            gpus,
            plugins: vec![],
            env: vec![("HF_HUB_OFFLINE".into(), "1".into())],
            test_timeout_s: 10,
            budgets: vec![],
        }
    }

    #[test]
    fn the_container_is_locked_down() {
        let s = spec(Gpus::Count(0));
        let layout = Layout::container(false);
        let body = container_body(
            &s,
            "img",
            vec!["python3".into()],
            sandbox_env(&layout, Role::Subject, 10, &s.env),
            vec![
                bind(&s.repo, "/infradev/repo", true),
                bind(Path::new("/w/sock"), "/infradev/broker", true),
            ],
            "/infradev/repo",
        );
        let hc = body.host_config.unwrap();
        assert_eq!(hc.network_mode.as_deref(), Some("none"));
        assert_eq!(body.network_disabled, None, "it would take /etc/hosts away");
        assert_eq!(hc.readonly_rootfs, Some(true));
        assert_eq!(hc.cap_drop, Some(vec!["ALL".to_owned()]));
        assert_eq!(hc.security_opt, Some(vec!["no-new-privileges".to_owned()]));
        assert_eq!(body.user.as_deref(), Some("65534:65534"));
        assert_eq!(hc.memory, Some(512 << 20));
        assert_eq!(hc.memory_swap, hc.memory);
        assert_eq!(hc.nano_cpus, Some(1_500_000_000));
        assert_eq!(hc.pids_limit, Some(64));
        assert_eq!(hc.device_requests, None);
        let log = hc.log_config.unwrap();
        assert_eq!(
            log.config.unwrap().get("max-size").map(String::as_str),
            Some("1m")
        );
        assert!(
            hc.mounts.unwrap().iter().all(|m| m.read_only == Some(true)),
            "nothing is writable but /tmp"
        );
        assert!(body.labels.unwrap().contains_key(LABEL_DEADLINE));
        let env = body.env.unwrap();
        assert!(
            env.contains(&"HF_HUB_OFFLINE=1".to_owned()),
            "the task's own variables"
        );
    }

    #[test]
    fn gpus_are_device_requests_by_count_or_id() {
        let by_count = gpu_request(&Gpus::Count(4)).unwrap();
        assert_eq!(by_count[0].count, Some(4));
        assert_eq!(by_count[0].driver.as_deref(), Some("nvidia"));
        let by_id = gpu_request(&Gpus::Ids(vec!["0".into(), "3".into()])).unwrap();
        assert_eq!(
            by_id[0].device_ids,
            Some(vec!["0".to_owned(), "3".to_owned()])
        );
        assert_eq!(by_id[0].count, None);
    }
}
