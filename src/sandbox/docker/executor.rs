//! One phase in one container: no network, read-only root, every capability dropped,
//! no new privileges, a non-root user, pids/memory/CPU limits and a wall clock.

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig, Mount, MountType};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, KillContainerOptionsBuilder,
    LogsOptionsBuilder, RemoveContainerOptionsBuilder, StartContainerOptions,
    WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;

use super::image::EnvImage;
use crate::grading::Kill;
use crate::results::SandboxEnd;
use crate::sandbox::{CappedOutput, Layout, PhaseSpec, pytest_argv, sandbox_env};
use crate::task::Gpus;

/// Labels on every container we create, so the reaper can find orphans.
pub(super) const LABEL_MANAGED: &str = "org.infradev.managed";
pub(super) const LABEL_RUN: &str = "org.infradev.run";
/// Unix time after which a container is an orphan whatever its state.
pub(super) const LABEL_DEADLINE: &str = "org.infradev.deadline";

/// Grace beyond a phase's wall clock before the reaper treats its container as orphaned.
const REAP_GRACE_S: u64 = 300;
/// The unprivileged user every sandbox runs as (`nobody` in Debian).
const SANDBOX_USER: &str = "65534:65534";

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

    pub(crate) async fn run(&self, spec: &PhaseSpec) -> (SandboxEnd, String) {
        let name = format!("infradev-{}-{:?}", spec.run_id, spec.phase).to_lowercase();
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                container_body(spec, &self.image.tag),
            )
            .await;
        let t0 = std::time::Instant::now();
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
        tracing::debug!(elapsed_ms = t0.elapsed().as_millis(), "container exited");
        let output = self.logs(&id, spec.limits.output_bytes).await;
        tracing::debug!(elapsed_ms = t0.elapsed().as_millis(), "logs read");
        let _ = self
            .docker
            .remove_container(
                &id,
                Some(
                    RemoveContainerOptionsBuilder::default()
                        .force(true)
                        .v(true)
                        .build(),
                ),
            )
            .await;
        (result, output)
    }

    async fn start_and_wait(&self, id: &str, spec: &PhaseSpec) -> SandboxEnd {
        if let Err(e) = self
            .docker
            .start_container(id, None::<StartContainerOptions>)
            .await
        {
            return infra(format!("cannot start the sandbox container: {e}"));
        }
        tracing::debug!("started");
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
            let _ = self
                .docker
                .kill_container(
                    id,
                    Some(
                        KillContainerOptionsBuilder::default()
                            .signal("SIGKILL")
                            .build(),
                    ),
                )
                .await;
            let _ = self
                .docker
                .wait_container(id, None)
                .collect::<Vec<_>>()
                .await;
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

    async fn logs(&self, id: &str, cap: usize) -> String {
        let mut out = CappedOutput::new(cap);
        let opts = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .build();
        let mut stream = self.docker.logs(id, Some(opts));
        while let Some(Ok(chunk)) = stream.next().await {
            out.push(&chunk.into_bytes());
        }
        out.into_string()
    }
}

fn infra(message: String) -> SandboxEnd {
    SandboxEnd {
        exit_code: None,
        kill: None,
        infra_error: Some(message),
    }
}

fn bind(source: &std::path::Path, target: &str, read_only: bool) -> Mount {
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

/// The container for one phase. Everything not named here is denied.
fn container_body(spec: &PhaseSpec, image: &str) -> ContainerCreateBody {
    let layout = Layout::container(spec.probes.is_some());
    let mut mounts = vec![
        bind(&spec.repo, &layout.repo, true),
        bind(&spec.lib, &layout.lib, true),
        bind(&spec.spec_file, &layout.spec, true),
        bind(&spec.out, &layout.out, false),
    ];
    if let (Some(host), Some(target)) = (&spec.probes, &layout.probes) {
        mounts.push(bind(host, target, true));
    }
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
            layout.scratch.clone(),
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
        ..Default::default()
    };
    let env = sandbox_env(&layout, &spec.env)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: Some(pytest_argv(
            "python3",
            &layout,
            spec.phase,
            &spec.plugins,
            &spec.targets,
        )),
        entrypoint: Some(Vec::new()),
        env: Some(env),
        user: Some(SANDBOX_USER.into()),
        working_dir: Some(layout.repo.clone()),
        labels: Some(labels),
        network_disabled: Some(true),
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
    use crate::grading::Phase;
    use crate::sandbox::Limits;
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
            out: PathBuf::from("/w/out"),
            scratch: PathBuf::from("/w/tmp"),
            targets: vec!["test_a.py::t".into()],
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
        }
    }

    #[test]
    fn the_container_is_locked_down() {
        let body = container_body(&spec(Gpus::Count(0)), "img");
        let hc = body.host_config.unwrap();
        assert_eq!(hc.network_mode.as_deref(), Some("none"));
        assert_eq!(body.network_disabled, Some(true));
        assert_eq!(hc.readonly_rootfs, Some(true));
        assert_eq!(hc.cap_drop, Some(vec!["ALL".to_owned()]));
        assert_eq!(hc.security_opt, Some(vec!["no-new-privileges".to_owned()]));
        assert_eq!(body.user.as_deref(), Some("65534:65534"));
        assert_eq!(hc.memory, Some(512 << 20));
        assert_eq!(hc.memory_swap, hc.memory);
        assert_eq!(hc.nano_cpus, Some(1_500_000_000));
        assert_eq!(hc.pids_limit, Some(64));
        assert_eq!(hc.device_requests, None);
        let mounts = hc.mounts.unwrap();
        let writable: Vec<_> = mounts
            .iter()
            .filter(|m| m.read_only == Some(false))
            .map(|m| m.target.clone().unwrap())
            .collect();
        assert_eq!(writable, vec!["/infradev/out".to_owned()]);
        assert!(
            mounts
                .iter()
                .any(|m| m.target.as_deref() == Some("/infradev/probes")
                    && m.read_only == Some(true))
        );
        assert!(body.labels.unwrap().contains_key(LABEL_DEADLINE));
        let env = body.env.unwrap();
        assert!(
            env.contains(&"HF_HUB_OFFLINE=1".to_owned()),
            "the task's own variables"
        );
        assert!(
            env.iter()
                .any(|e| e.starts_with("PYTHONPATH=/infradev/lib:"))
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
