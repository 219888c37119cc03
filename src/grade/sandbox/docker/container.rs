//! What every container we create shares: the labels the reaper finds orphans by, and how a
//! container is killed and removed.

use bollard::Docker;
use bollard::query_parameters::{KillContainerOptionsBuilder, RemoveContainerOptionsBuilder};
use futures_util::StreamExt;

/// Labels on every container we create, so the reaper can find orphans.
pub(super) const LABEL_MANAGED: &str = "org.infradev.managed";
pub(super) const LABEL_RUN: &str = "org.infradev.run";
/// Unix time after which a container is an orphan whatever its state.
pub(super) const LABEL_DEADLINE: &str = "org.infradev.deadline";

/// Kills a container and waits for it to end; errors are ignored (it may be gone already).
pub(super) async fn kill(docker: &Docker, id: &str) {
    let _ = docker
        .kill_container(
            id,
            Some(
                KillContainerOptionsBuilder::default()
                    .signal("SIGKILL")
                    .build(),
            ),
        )
        .await;
    let _ = docker.wait_container(id, None).collect::<Vec<_>>().await;
}

/// Removes a container and its anonymous volumes, whatever its state.
pub(super) async fn remove_container(docker: &Docker, id: &str) {
    let _ = docker
        .remove_container(
            id,
            Some(
                RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .v(true)
                    .build(),
            ),
        )
        .await;
}
