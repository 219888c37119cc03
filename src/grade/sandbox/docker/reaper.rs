//! Removes sandbox containers left behind by earlier runs (a killed grader, a lost host).

use std::collections::HashMap;

use bollard::Docker;
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, RemoveContainerOptionsBuilder,
};

use super::container::{LABEL_DEADLINE, LABEL_MANAGED};
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
