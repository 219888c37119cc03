//! Rank groups in containers: one subject container per rank, each in its own network
//! namespace, joined by a network of the group's own. The network is `internal` (no route
//! out) and its bridge has no address on the host (`inhibit_ipv4`): without that, an
//! internal network still reaches every service of the host through the bridge's gateway
//! address (checked by hand on Docker 20.10, and by tests/probe_phase.rs). The containers are
//! on that network only. Everything is labelled like the sandboxes, so the reaper removes
//! what a killed grader left.

use std::collections::HashMap;
use std::path::PathBuf;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, NetworkCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, StartContainerOptions,
};

use super::container::{LABEL_DEADLINE, LABEL_MANAGED, LABEL_RUN, kill, remove_container};
use crate::grade::sandbox::broker::{Meter, RankAddress, SubjectEnd};

/// The port rank 0 is told to listen on (`MASTER_PORT`): each rank has a network namespace of
/// its own, so a fixed port cannot collide.
const MASTER_PORT: u16 = 29500;

/// The rank containers of one probe phase.
pub(super) struct DockerRanks {
    /// The subject's container, used as the template of every rank.
    pub(super) body: ContainerCreateBody,
    /// Where the socket directory is mounted in the container.
    pub(super) socket_target: String,
    /// `infradev-<run>-rank`.
    pub(super) prefix: String,
    pub(super) run_id: String,
    /// The running group: its network and each rank's container id and init process.
    network: Option<String>,
    ranks: Vec<(String, Option<u32>)>,
}

impl DockerRanks {
    pub(super) fn new(
        body: ContainerCreateBody,
        socket_target: String,
        prefix: String,
        run_id: String,
    ) -> Self {
        DockerRanks {
            body,
            socket_target,
            prefix,
            run_id,
            network: None,
            ranks: Vec::new(),
        }
    }

    pub(super) async fn start(
        &mut self,
        docker: &Docker,
        group: u32,
        socket_dirs: &[PathBuf],
    ) -> Result<RankAddress, String> {
        let network = format!("{}-{group}", self.prefix);
        docker
            .create_network(network_request(&network, &self.run_id, &self.body))
            .await
            .map_err(|e| format!("cannot create the ranks' network: {e}"))?;
        self.network = Some(network.clone());
        for (rank, dir) in socket_dirs.iter().enumerate() {
            let name = format!("{network}-{rank}");
            let body = rank_body(&self.body, &self.socket_target, dir, &network);
            let created = docker
                .create_container(
                    Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                    body,
                )
                .await
                .map_err(|e| format!("cannot create rank {rank}'s container: {e}"))?;
            self.ranks.push((created.id, None));
        }
        for rank in 0..self.ranks.len() {
            let id = self.ranks[rank].0.clone();
            docker
                .start_container(&id, None::<StartContainerOptions>)
                .await
                .map_err(|e| format!("cannot start rank {rank}'s container: {e}"))?;
        }
        let mut master_addr = None;
        for (rank, (id, pid)) in self.ranks.iter_mut().enumerate() {
            let info = docker
                .inspect_container(id, None::<InspectContainerOptions>)
                .await
                .map_err(|e| format!("cannot inspect rank {rank}'s container: {e}"))?;
            *pid = info
                .state
                .and_then(|s| s.pid)
                .and_then(|p| u32::try_from(p).ok())
                .filter(|p| *p > 0);
            if rank == 0 {
                master_addr = info
                    .network_settings
                    .and_then(|n| n.networks)
                    .and_then(|mut n| n.remove(&network))
                    .and_then(|e| e.ip_address)
                    .filter(|a| !a.is_empty());
            }
        }
        let master_addr =
            master_addr.ok_or("rank 0 has no address on the ranks' network".to_owned())?;
        Ok(RankAddress {
            master_addr,
            master_port: MASTER_PORT,
        })
    }

    pub(super) fn meters(&self) -> Vec<Meter> {
        self.ranks
            .iter()
            .map(|(_, pid)| pid.map_or_else(Meter::default, Meter::for_container))
            .collect()
    }

    pub(super) async fn stop(&mut self, docker: &Docker) -> Vec<SubjectEnd> {
        let ranks = std::mem::take(&mut self.ranks);
        // Every rank is killed before any is asked how it ended (an OOM kill is noted with
        // the exit).
        futures_util::future::join_all(ranks.iter().map(|(id, _)| async move {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), kill(docker, id)).await;
        }))
        .await;
        let mut ends = Vec::with_capacity(ranks.len());
        for (id, _) in &ranks {
            let oom_killed = docker
                .inspect_container(id, None::<InspectContainerOptions>)
                .await
                .ok()
                .and_then(|i| i.state?.oom_killed)
                .unwrap_or(false);
            remove_container(docker, id).await;
            ends.push(SubjectEnd { oom_killed });
        }
        if let Some(network) = self.network.take() {
            let _ = docker.remove_network(&network).await;
        }
        ends
    }
}

/// The group's network: internal, no address for the host on its bridge, labelled for the
/// reaper with the same deadline as the containers.
fn network_request(name: &str, run_id: &str, body: &ContainerCreateBody) -> NetworkCreateRequest {
    let deadline = body
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_DEADLINE))
        .cloned()
        .unwrap_or_default();
    NetworkCreateRequest {
        name: name.to_owned(),
        driver: Some("bridge".into()),
        internal: Some(true),
        attachable: Some(false),
        enable_ipv6: Some(false),
        options: Some(HashMap::from([
            (
                "com.docker.network.bridge.inhibit_ipv4".to_owned(),
                "true".to_owned(),
            ),
            (
                "com.docker.network.bridge.enable_icc".to_owned(),
                "true".to_owned(),
            ),
        ])),
        labels: Some(HashMap::from([
            (LABEL_MANAGED.to_owned(), "true".to_owned()),
            (LABEL_RUN.to_owned(), run_id.to_owned()),
            (LABEL_DEADLINE.to_owned(), deadline),
        ])),
        ..Default::default()
    }
}

/// Rank `r`'s container: the subject's, with rank `r`'s socket directory and the group's
/// network as its only network.
fn rank_body(
    template: &ContainerCreateBody,
    socket_target: &str,
    socket_dir: &std::path::Path,
    network: &str,
) -> ContainerCreateBody {
    let mut body = template.clone();
    body.network_disabled = Some(false);
    if let Some(hc) = &mut body.host_config {
        hc.network_mode = Some(network.to_owned());
        if let Some(mounts) = &mut hc.mounts {
            for m in mounts
                .iter_mut()
                .filter(|m| m.target.as_deref() == Some(socket_target))
            {
                m.source = Some(
                    std::path::absolute(socket_dir)
                        .unwrap_or_else(|_| socket_dir.to_path_buf())
                        .display()
                        .to_string(),
                );
            }
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{HostConfig, Mount};

    #[test]
    fn a_rank_has_its_own_socket_and_only_the_group_network() {
        let template = ContainerCreateBody {
            network_disabled: Some(true),
            labels: Some(HashMap::from([(
                LABEL_DEADLINE.to_owned(),
                "99".to_owned(),
            )])),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                mounts: Some(vec![
                    Mount {
                        target: Some("/infradev/repo".into()),
                        source: Some("/w/repo".into()),
                        ..Default::default()
                    },
                    Mount {
                        target: Some("/infradev/broker".into()),
                        source: Some("/w/subject-socket".into()),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let body = rank_body(
            &template,
            "/infradev/broker",
            std::path::Path::new("/w/rank1-socket"),
            "net-1",
        );
        let hc = body.host_config.unwrap();
        assert_eq!(hc.network_mode.as_deref(), Some("net-1"));
        assert_eq!(body.network_disabled, Some(false));
        let mounts = hc.mounts.unwrap();
        assert_eq!(mounts[0].source.as_deref(), Some("/w/repo"));
        assert_eq!(mounts[1].source.as_deref(), Some("/w/rank1-socket"));

        let net = network_request("net-1", "run", &template);
        assert_eq!(net.internal, Some(true));
        let opts = net.options.unwrap();
        assert_eq!(
            opts.get("com.docker.network.bridge.inhibit_ipv4")
                .map(String::as_str),
            Some("true"),
            "the host has no address on the ranks' bridge"
        );
        let labels = net.labels.unwrap();
        assert_eq!(labels.get(LABEL_MANAGED).map(String::as_str), Some("true"));
        assert_eq!(labels.get(LABEL_DEADLINE).map(String::as_str), Some("99"));
    }
}
