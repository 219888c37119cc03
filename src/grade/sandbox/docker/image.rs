//! The task's environment image, in up to three layers, each cached by a tag derived from
//! everything that goes into it:
//!
//! 1. the base image (runners/base-image/build.sh: Debian packages, no registry);
//! 2. an optional shared layer (`runners/layers/<name>/requirements.txt`, for example torch
//!    and its CUDA wheels), built once and shared by every task that names it;
//! 3. the task's own packages, pinned by its constraints file.
//!
//! Layers 2 and 3 are installed with `pip --no-index` from the host's wheel cache, bind-mounted
//! read-only into a build container that has no network; the container is then committed.
//! Nothing is sent as a build context, so multi-gigabyte wheel caches cost no copy.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use bollard::Docker;
use bollard::models::{ContainerConfig, ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{
    CommitContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    StartContainerOptions, WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use super::container::{LABEL_DEADLINE, LABEL_MANAGED, remove_container};
use crate::task::Task;

/// Bumped when the way layers are built changes, so old tags are not reused.
const RECIPE_VERSION: &str = "2";
/// The label of every committed layer: its repository (namespace included).
pub(super) const LABEL_LAYER: &str = "org.infradev.layer";
/// Build output kept for an error message.
const LOG_TAIL: usize = 8 * 1024;

/// A ready environment image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvImage {
    pub tag: String,
    /// The base image's id (`sha256:…`), recorded for reproducibility.
    pub base_id: String,
    /// The image ids of each layer, base first.
    pub layers: Vec<(String, String)>,
}

/// What one pip layer installs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipLayer {
    /// `infradev-layer/torch-2.8` or `infradev-env/<task>`.
    pub repo: String,
    pub requirements: String,
    pub constraints: Option<String>,
}

impl PipLayer {
    /// The shared layer a task names, read from `<runners>/layers/<name>/requirements.txt`.
    pub fn shared(runners: &Path, name: &str) -> anyhow::Result<PipLayer> {
        let file = layer_file(runners, name);
        let requirements = std::fs::read_to_string(&file).with_context(|| {
            format!(
                "layer `{name}`: cannot read {} (layers live in runners/layers/<name>/)",
                file.display()
            )
        })?;
        Ok(PipLayer {
            repo: format!("infradev-layer/{name}"),
            requirements,
            constraints: None,
        })
    }

    /// The task's own packages, if it has any.
    pub fn task(task: &Task) -> anyhow::Result<Option<PipLayer>> {
        let env = &task.environment;
        if env.packages.is_empty() {
            return Ok(None);
        }
        let constraints = match &env.constraints {
            Some(c) => Some(
                std::fs::read_to_string(task.dir.join(c))
                    .with_context(|| format!("cannot read constraints {}", c.display()))?,
            ),
            None => None,
        };
        Ok(Some(PipLayer {
            repo: format!("infradev-env/{}", task.id),
            requirements: env.packages.join("\n") + "\n",
            constraints,
        }))
    }

    /// The pip layers of a task's environment, base first: its shared layer if it names one,
    /// then its own packages if it has any.
    pub fn chain(task: &Task, runners: &Path) -> anyhow::Result<Vec<PipLayer>> {
        let mut layers = Vec::new();
        if let Some(name) = &task.environment.layer {
            layers.push(PipLayer::shared(runners, name)?);
        }
        layers.extend(PipLayer::task(task)?);
        Ok(layers)
    }
}

/// `<runners>/layers/<name>/requirements.txt`.
pub fn layer_file(runners: &Path, name: &str) -> PathBuf {
    runners.join("layers").join(name).join("requirements.txt")
}

impl EnvImage {
    /// Returns the task's environment image, building the layers that are not there yet.
    /// `runners` is the repository's runners/ folder; `wheels` the host's wheel cache.
    pub async fn ensure(
        docker: &Docker,
        task: &Task,
        runners: &Path,
        wheels: Option<&Path>,
    ) -> anyhow::Result<EnvImage> {
        let pip_layers = PipLayer::chain(task, runners)?;
        EnvImage::build(docker, task, &pip_layers, wheels, "").await
    }

    /// The image of `pip_layers` installed in order on the task's base image, each layer
    /// tagged `<namespace><layer_tag>` and built only when that tag is not there yet.
    /// `ensure` passes the task's own chain and no namespace; the environment bench
    /// (`env_bench.rs`) passes its own chains under `infradev-bench/…` namespaces.
    pub(super) async fn build(
        docker: &Docker,
        task: &Task,
        pip_layers: &[PipLayer],
        wheels: Option<&Path>,
        namespace: &str,
    ) -> anyhow::Result<EnvImage> {
        let env = &task.environment;
        let base = docker.inspect_image(&env.base_image).await.with_context(|| {
            format!(
                "base image `{}` is missing: build it with runners/base-image/build.sh (no registry is used)",
                env.base_image
            )
        })?;
        let base_id = base.id.unwrap_or_default();
        let mut layers = vec![(env.base_image.clone(), base_id.clone())];
        // Installing and committing a multi-gigabyte layer takes minutes: the client's
        // default request timeout would give up on a build that is still going.
        let builder = docker.clone().with_timeout(std::time::Duration::from_secs(
            task.resources.timeouts.build_s.max(60),
        ));
        let mut parent = base_id.clone();
        for layer in pip_layers {
            let wheels = wheels.with_context(|| {
                format!(
                    "task `{}` installs packages ({}) but no wheel cache was given (--wheels; \
                     fill it with `infradev tasks fetch {}`)",
                    task.id, layer.repo, task.id
                )
            })?;
            let (tag, id) =
                build_pip_layer(&builder, &parent, layer, &env.python, wheels, namespace).await?;
            layers.push((tag, id.clone()));
            parent = id;
        }
        let tag = match layers.last() {
            Some((tag, _)) if pip_layers.is_empty() => {
                check_python(docker, tag, &env.python).await?;
                tag.clone()
            }
            Some((tag, _)) => tag.clone(),
            None => unreachable!("the base is always there"),
        };
        Ok(EnvImage {
            tag,
            base_id,
            layers,
        })
    }
}

/// Whether `name` is in the local image store (`infradev doctor`).
pub async fn image_exists(docker: &Docker, name: &str) -> bool {
    docker.inspect_image(name).await.is_ok()
}

/// The tag a layer gets: its repo plus a digest of its parent and its inputs.
pub fn layer_tag(parent_id: &str, layer: &PipLayer, python: &str) -> String {
    let mut hasher = Sha256::new();
    for part in [
        RECIPE_VERSION,
        parent_id,
        python,
        &layer.requirements,
        layer.constraints.as_deref().unwrap_or(""),
    ] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    format!("{}:{}", layer.repo, &hex::encode(hasher.finalize())[..12])
}

/// The shell script a build container runs: check the Python version, then install.
fn install_script(layer: &PipLayer, python: &str) -> String {
    let constraints = if layer.constraints.is_some() {
        " -c /infradev/ctx/constraints.txt"
    } else {
        ""
    };
    format!(
        "set -e\n\
         python3 -c \"import sys; v = '%d.%d' % sys.version_info[:2]; \
         assert v == '{python}', 'the image has Python ' + v + ', the task needs {python}'\"\n\
         python3 -m pip install --no-index --no-cache-dir --break-system-packages \
         --disable-pip-version-check --root-user-action=ignore --progress-bar off \
         --find-links /infradev/wheels -r /infradev/ctx/requirements.txt{constraints}\n\
         python3 -c 'import pytest'\n"
    )
}

/// Builds one layer on `parent_id` unless its tag is there already; returns its tag and image
/// id. `namespace` is put before the tag's repository (empty for the real cache).
async fn build_pip_layer(
    docker: &Docker,
    parent_id: &str,
    layer: &PipLayer,
    python: &str,
    wheels: &Path,
    namespace: &str,
) -> anyhow::Result<(String, String)> {
    let tag = format!("{namespace}{}", layer_tag(parent_id, layer, python));
    if let Ok(found) = docker.inspect_image(&tag).await {
        return Ok((tag, found.id.unwrap_or_default()));
    }
    let wheels = wheels
        .canonicalize()
        .with_context(|| format!("the wheel cache {} does not exist", wheels.display()))?;
    let ctx = tempfile::tempdir().context("cannot create a build context dir")?;
    std::fs::write(ctx.path().join("requirements.txt"), &layer.requirements)?;
    if let Some(c) = &layer.constraints {
        std::fs::write(ctx.path().join("constraints.txt"), c)?;
    }
    // Readable by the daemon whatever the umask.
    set_mode(ctx.path(), 0o755)?;
    tracing::info!(%tag, "building an environment layer");
    let t0 = std::time::Instant::now();
    let bind = |source: &Path, target: &str| Mount {
        source: Some(source.display().to_string()),
        target: Some(target.into()),
        typ: Some(MountType::BIND),
        read_only: Some(true),
        ..Default::default()
    };
    let body = ContainerCreateBody {
        image: Some(parent_id.to_owned()),
        cmd: Some(vec![
            "sh".into(),
            "-c".into(),
            install_script(layer, python),
        ]),
        entrypoint: Some(Vec::new()),
        user: Some("0:0".into()),
        env: Some(vec![
            "PATH=/usr/local/bin:/usr/bin:/bin".into(),
            "PIP_NO_INPUT=1".into(),
        ]),
        labels: Some(build_labels(LAYER_BUILD_LIFETIME)),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            mounts: Some(vec![
                bind(&wheels, "/infradev/wheels"),
                bind(ctx.path(), "/infradev/ctx"),
            ]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            body,
        )
        .await
        .context("cannot create the build container")?
        .id;
    let mut progress = super::pip_log::PipProgress::new(&tag, &layer.requirements);
    let result = run_and_commit(docker, &id, &tag, |line| progress.line(line)).await;
    progress.finish();
    remove_container(docker, &id).await;
    let image_id = result?;
    tracing::info!(%tag, seconds = t0.elapsed().as_secs(), "environment layer built");
    Ok((tag, image_id))
}

/// Starts a created container and waits for it to exit; returns its exit code.
async fn run_to_exit(docker: &Docker, id: &str) -> anyhow::Result<i64> {
    docker
        .start_container(id, None::<StartContainerOptions>)
        .await
        .context("cannot start the container")?;
    wait_exit(docker, id).await
}

/// Waits for a started container to exit; returns its exit code.
async fn wait_exit(docker: &Docker, id: &str) -> anyhow::Result<i64> {
    let mut wait = docker.wait_container(
        id,
        Some(
            WaitContainerOptionsBuilder::default()
                .condition("not-running")
                .build(),
        ),
    );
    match wait.next().await {
        Some(Ok(r)) => Ok(r.status_code),
        // bollard reports a non-zero exit as an error carrying the code.
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
        Some(Err(e)) => Err(e).context("waiting for the container"),
        None => bail!("the container vanished"),
    }
}

/// Runs a build container, handing each line of its output to `on_line` as it comes, and
/// commits it as `tag` when it succeeded.
async fn run_and_commit(
    docker: &Docker,
    id: &str,
    tag: &str,
    mut on_line: impl FnMut(&str),
) -> anyhow::Result<String> {
    docker
        .start_container(id, None::<StartContainerOptions>)
        .await
        .with_context(|| format!("building {tag}: cannot start the container"))?;
    let mut output = docker.logs(
        id,
        Some(
            LogsOptionsBuilder::default()
                .follow(true)
                .stdout(true)
                .stderr(true)
                .build(),
        ),
    );
    let mut pending = String::new();
    while let Some(Ok(chunk)) = output.next().await {
        pending.push_str(&chunk.to_string());
        while let Some(end) = pending.find('\n') {
            on_line(&pending[..end]);
            pending.drain(..=end);
        }
    }
    if !pending.is_empty() {
        on_line(&pending);
    }
    let code = wait_exit(docker, id)
        .await
        .with_context(|| format!("building {tag}"))?;
    if code != 0 {
        bail!(
            "building {tag} failed (exit {code}); the end of its output:\n{}",
            logs(docker, id).await
        );
    }
    let (repo, version) = tag.split_once(':').unwrap_or((tag, "latest"));
    let options = CommitContainerOptionsBuilder::default()
        .container(id)
        .repo(repo)
        .tag(version)
        .pause(false)
        .build();
    let config = ContainerConfig {
        cmd: Some(vec!["python3".into()]),
        user: Some(String::new()),
        labels: Some(HashMap::from([(LABEL_LAYER.to_owned(), repo.to_owned())])),
        ..Default::default()
    };
    let committed = docker
        .commit_container(options, config)
        .await
        .with_context(|| format!("cannot commit {tag}"))?;
    Ok(committed.id)
}

/// How long a layer's build container may live before the reaper may remove it (a torch
/// layer installs gigabytes from the wheel cache).
const LAYER_BUILD_LIFETIME: std::time::Duration = std::time::Duration::from_secs(4 * 3600);
/// The same for the container that checks an image's Python.
const CHECK_LIFETIME: std::time::Duration = std::time::Duration::from_secs(600);

/// Labels of a build or check container: ours, and removable by the reaper after `lifetime`
/// (a grader killed mid-build leaves it behind).
fn build_labels(lifetime: std::time::Duration) -> HashMap<String, String> {
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        + lifetime;
    HashMap::from([
        (LABEL_MANAGED.to_owned(), "build".to_owned()),
        (LABEL_DEADLINE.to_owned(), deadline.as_secs().to_string()),
    ])
}

async fn check_python(docker: &Docker, image: &str, python: &str) -> anyhow::Result<()> {
    let body = ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: Some(vec![
            "python3".into(),
            "-c".into(),
            format!(
                "import sys, pytest; v = '%d.%d' % sys.version_info[:2]; \
                 assert v == '{python}', 'the image has Python ' + v + ', the task needs {python}'"
            ),
        ]),
        entrypoint: Some(Vec::new()),
        labels: Some(build_labels(CHECK_LIFETIME)),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            body,
        )
        .await
        .context("cannot create the Python check container")?
        .id;
    let result = run_to_exit(docker, &id).await;
    let out = logs(docker, &id).await;
    let _ = docker
        .remove_container(
            &id,
            Some(RemoveContainerOptionsBuilder::default().force(true).build()),
        )
        .await;
    match result {
        Ok(0) => Ok(()),
        Ok(code) => bail!("the image {image} is not usable for this task (exit {code}):\n{out}"),
        Err(e) => Err(e).context("running the Python check container"),
    }
}

async fn logs(docker: &Docker, id: &str) -> String {
    let mut stream = docker.logs(
        id,
        Some(
            LogsOptionsBuilder::default()
                .stdout(true)
                .stderr(true)
                .tail("200")
                .build(),
        ),
    );
    let mut out = String::new();
    while let Some(Ok(chunk)) = stream.next().await {
        out.push_str(&chunk.to_string());
    }
    if out.len() > LOG_TAIL {
        let cut = out.len() - LOG_TAIL;
        let cut = (cut..out.len())
            .find(|i| out.is_char_boundary(*i))
            .unwrap_or(0);
        out.drain(..cut);
    }
    out
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    for entry in std::fs::read_dir(path)? {
        std::fs::set_permissions(entry?.path(), std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(requirements: &str, constraints: Option<&str>) -> PipLayer {
        PipLayer {
            repo: "infradev-env/t".into(),
            requirements: requirements.into(),
            constraints: constraints.map(Into::into),
        }
    }

    #[test]
    fn a_layer_tag_changes_with_each_input_and_only_then() {
        let a = layer("torch==2.8.0\n", None);
        let tag = layer_tag("sha256:base", &a, "3.11");
        assert!(tag.starts_with("infradev-env/t:"));
        assert_eq!(tag, layer_tag("sha256:base", &a, "3.11"));
        for other in [
            layer_tag("sha256:other", &a, "3.11"),
            layer_tag("sha256:base", &a, "3.12"),
            layer_tag("sha256:base", &layer("torch==2.7.0\n", None), "3.11"),
            layer_tag(
                "sha256:base",
                &layer("torch==2.8.0\n", Some("numpy==1.26.4")),
                "3.11",
            ),
        ] {
            assert_ne!(tag, other);
        }
    }

    #[test]
    fn the_install_is_offline_and_pinned() {
        let script = install_script(&layer("a==1\n", Some("b==2\n")), "3.11");
        assert!(script.contains("--no-index"));
        assert!(script.contains("--find-links /infradev/wheels"));
        assert!(script.contains("-c /infradev/ctx/constraints.txt"));
        assert!(script.contains("the task needs 3.11"));
        let script = install_script(&layer("a==1\n", None), "3.11");
        assert!(!script.contains("constraints"));
    }
}
