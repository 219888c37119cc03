//! Removes sandbox containers left behind by earlier runs (a killed grader, a lost host).

use std::collections::HashMap;

use bollard::Docker;
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, RemoveContainerOptionsBuilder,
};

use super::container::{LABEL_DEADLINE, LABEL_MANAGED, LABEL_RUN};
use super::executor::DockerExecutor;

impl DockerExecutor {
    /// Removes every container of ours (sandboxes, and the build and check containers of
    /// environment images) whose deadline has passed, then the rank groups' networks whose
    /// deadline has passed; returns how many containers.
    pub async fn reap_orphans(docker: &Docker) -> anyhow::Result<usize> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        // Any value of the label: `true` (sandboxes) or `build`.
        let filters = HashMap::from([("label".to_owned(), vec![LABEL_MANAGED.to_owned()])]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let mut reaped = 0;
        for c in docker.list_containers(Some(options)).await? {
            let deadline = c
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_DEADLINE))
                .and_then(|d| d.parse::<u64>().ok());
            if deadline.is_none_or(|d| d < now)
                && let Some(id) = c.id
            {
                let opts = RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .v(true)
                    .build();
                if docker.remove_container(&id, Some(opts)).await.is_ok() {
                    reaped += 1;
                }
            }
        }
        let networks = ListNetworksOptionsBuilder::default()
            .filters(&filters)
            .build();
        for n in docker.list_networks(Some(networks)).await? {
            let deadline = n
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_DEADLINE))
                .and_then(|d| d.parse::<u64>().ok());
            if deadline.is_none_or(|d| d < now)
                && let Some(id) = n.id
            {
                // Fails while a container still uses it; the next reap gets it.
                let _ = docker.remove_network(&id).await;
            }
        }
        Ok(reaped)
    }
}

/// Removes every container and network of one grade's run (labelled `org.infradev.run=<run_id>`)
/// when dropped before [`RunReaper::disarm`]: a grade that is abandoned half way (its future
/// dropped: the job was cancelled, superseded, or its App access removed) leaves nothing
/// running, without waiting for the containers' deadlines.
pub struct RunReaper {
    docker: Option<Docker>,
    run_id: String,
}

impl RunReaper {
    pub fn new(docker: Docker, run_id: &str) -> RunReaper {
        RunReaper {
            docker: Some(docker),
            run_id: run_id.to_owned(),
        }
    }

    /// The grade ended by itself (its phases removed their sandboxes): nothing to do.
    pub fn disarm(mut self) {
        self.docker = None;
    }
}

impl Drop for RunReaper {
    fn drop(&mut self) {
        let Some(docker) = self.docker.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // No runtime left: the containers' deadlines let the reaper have them.
        };
        let run_id = std::mem::take(&mut self.run_id);
        runtime.spawn(async move {
            match remove_run(&docker, &run_id).await {
                Ok(n) => tracing::info!(run = %run_id, containers = n, "removed the sandboxes of an abandoned grade"),
                Err(e) => tracing::warn!(run = %run_id, error = %format!("{e:#}"), "could not remove the sandboxes of an abandoned grade; the reaper will"),
            }
        });
    }
}

/// Removes the containers, then the networks, labelled with `run_id`; returns how many
/// containers.
pub async fn remove_run(docker: &Docker, run_id: &str) -> anyhow::Result<usize> {
    let filters = HashMap::from([("label".to_owned(), vec![format!("{LABEL_RUN}={run_id}")])]);
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    let mut removed = 0;
    for c in docker.list_containers(Some(options)).await? {
        if let Some(id) = c.id {
            let opts = RemoveContainerOptionsBuilder::default()
                .force(true)
                .v(true)
                .build();
            if docker.remove_container(&id, Some(opts)).await.is_ok() {
                removed += 1;
            }
        }
    }
    let networks = ListNetworksOptionsBuilder::default()
        .filters(&filters)
        .build();
    for n in docker.list_networks(Some(networks)).await? {
        if let Some(id) = n.id {
            let _ = docker.remove_network(&id).await;
        }
    }
    Ok(removed)
}
