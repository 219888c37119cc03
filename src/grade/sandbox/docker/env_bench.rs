//! The library side of the shared-environment bench (`benches/env_sharing.rs`): every task's
//! environment built in two modes under bench-only tags, the storage a set of images takes,
//! and the removal of the bench's images.
//!
//! * [`EnvMode::Shared`] builds exactly the chain [`EnvImage::ensure`] builds (base → shared
//!   layer → the task's packages), so the shared layer is built once for every task naming it;
//! * [`EnvMode::Independent`] builds one pip layer per task on the base, installing the shared
//!   layer's requirements and the task's packages together ([`merge_layers`]).
//!
//! Both go through the same layer builder as the real cache, with their tags under
//! `infradev-bench/<mode>/` ([`BENCH_NAMESPACE`]): the real cache (`infradev-layer/…`,
//! `infradev-env/…`) is never used, changed or removed, and [`EnvBench::remove_images`] removes
//! only images under that namespace.
//!
//! Storage is counted as `docker system df` counts it: each layer of the layer store once,
//! however many images use it. A layer is identified by its chain id (its diff id and all of its
//! parents'), which is what the layer store keys layers by; its size is the one the image's
//! history reports (the layer store's diff size).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{Context, bail};
use bollard::Docker;
use bollard::query_parameters::{ListImagesOptionsBuilder, RemoveImageOptionsBuilder};
use sha2::{Digest, Sha256};

use super::executor::DockerExecutor;
use super::image::{EnvImage, LABEL_LAYER, PipLayer};
use crate::task::Task;

/// The tag namespace of every image the bench builds; no real tag starts with it.
pub const BENCH_NAMESPACE: &str = "infradev-bench/";

/// How a bench builds a task's environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvMode {
    /// Base → shared layer (once for all tasks naming it) → the task's packages.
    Shared,
    /// Base → one layer with the shared layer's requirements and the task's packages.
    Independent,
}

impl EnvMode {
    pub fn name(self) -> &'static str {
        match self {
            EnvMode::Shared => "shared",
            EnvMode::Independent => "independent",
        }
    }

    /// The prefix of this mode's tags.
    pub fn namespace(self) -> String {
        format!("{BENCH_NAMESPACE}{}/", self.name())
    }

    /// The pip layers this mode installs on the task's base image, in order.
    pub fn layers(self, task: &Task, runners: &Path) -> anyhow::Result<Vec<PipLayer>> {
        let chain = PipLayer::chain(task, runners)?;
        match self {
            EnvMode::Shared => Ok(chain),
            EnvMode::Independent => {
                let repo = format!("infradev-env/{}", task.id);
                Ok(merge_layers(&chain, &repo)
                    .with_context(|| format!("task `{}`: the independent layer", task.id))?
                    .into_iter()
                    .collect())
            }
        }
    }
}

/// One layer that installs what `chain` installs layer by layer: the requirements of every
/// layer in order (a line already there once is not repeated), then the constraints of every
/// layer in order. Where a later layer pins a package again at another version (`name==1` in
/// the shared layer, `name==2` in the task's constraints, with the same environment marker),
/// the later pin wins and the earlier line is left out: the shared chain's pip run on top of
/// the layer moves the package to the later pin, and one pip run cannot take both. Two pins of
/// one package within one layer are an error naming both lines. `None` when the chain is empty.
pub fn merge_layers(chain: &[PipLayer], repo: &str) -> anyhow::Result<Option<PipLayer>> {
    if chain.is_empty() {
        return Ok(None);
    }
    // (normalized name, marker) → (version, the line, where it is, its layer's index).
    let mut pins: BTreeMap<(String, String), (String, String, String, usize)> = BTreeMap::new();
    for (index, layer) in chain.iter().enumerate() {
        let files = [
            ("requirements", Some(&layer.requirements)),
            ("constraints", layer.constraints.as_ref()),
        ];
        for (file, text) in files {
            for line in text.into_iter().flat_map(|t| requirement_lines(t)) {
                let Some((key, version)) = pin(line) else {
                    continue;
                };
                let source = format!("{} {file}", layer.repo);
                if let Some((pinned, first, first_source, at)) = pins.get(&key)
                    && *at == index
                    && *pinned != version
                {
                    bail!(
                        "`{first}` ({first_source}) and `{line}` ({source}) pin {} to two versions",
                        key.0
                    );
                }
                pins.insert(key, (version, line.to_owned(), source, index));
            }
        }
    }
    // A line stays unless a later layer pinned its package at another version.
    let keep = |line: &str| match pin(line) {
        Some((key, version)) => pins.get(&key).is_none_or(|(winner, ..)| *winner == version),
        None => true,
    };
    let mut requirements: Vec<&str> = Vec::new();
    let mut constraints: Vec<&str> = Vec::new();
    for layer in chain {
        for line in requirement_lines(&layer.requirements).filter(|l| keep(l)) {
            if !requirements.contains(&line) {
                requirements.push(line);
            }
        }
        if let Some(c) = &layer.constraints {
            constraints.extend(requirement_lines(c).filter(|l| keep(l)));
        }
    }
    Ok(Some(PipLayer {
        repo: repo.to_owned(),
        requirements: requirements.join("\n") + "\n",
        constraints: (!constraints.is_empty()).then(|| constraints.join("\n") + "\n"),
    }))
}

/// The lines of a requirements or constraints file that say something: comments and blank
/// lines left out (pip's rule: `#` at the start or after whitespace begins a comment).
fn requirement_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(|line| {
            let cut = line
                .char_indices()
                .find(|&(i, c)| {
                    c == '#' && (i == 0 || line[..i].ends_with(|p: char| p.is_whitespace()))
                })
                .map_or(line.len(), |(i, _)| i);
            line[..cut].trim()
        })
        .filter(|line| !line.is_empty())
}

/// `((normalized name, marker), version)` of an exact pin (`name==v`, `name[extra]===v`,
/// `name==v ; marker`); `None` for anything else (ranges, wildcards, options).
fn pin(line: &str) -> Option<((String, String), String)> {
    let (spec, marker) = match line.split_once(';') {
        Some((spec, marker)) => (spec.trim(), marker.trim()),
        None => (line.trim(), ""),
    };
    let name_end = spec
        .find(|c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c)))
        .unwrap_or(spec.len());
    let (name, mut rest) = spec.split_at(name_end);
    if name.is_empty() {
        return None;
    }
    rest = rest.trim_start();
    if rest.starts_with('[') {
        rest = rest[rest.find(']')? + 1..].trim_start();
    }
    let version = rest
        .strip_prefix("===")
        .or_else(|| rest.strip_prefix("=="))?
        .trim();
    if version.is_empty() || version.contains([',', '*']) {
        return None;
    }
    Some(((normalize(name), marker.to_owned()), version.to_owned()))
}

/// A distribution name as PEP 503 compares it.
fn normalize(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if "-_.".contains(c) {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// One layer of an image, as the layer store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// `sha256:…` of the layer and all its parents: the layer store's key.
    pub chain_id: String,
    /// Bytes on disk (the history's size of the layer).
    pub size: u64,
}

/// An image's layers, base first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageLayers {
    pub image: String,
    pub layers: Vec<Layer>,
    /// The image's own `Size` (inspect); equals the sum of its layers' sizes.
    pub reported_size: u64,
}

/// The storage a set of images takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Storage {
    pub images: usize,
    pub layers: usize,
    /// Each layer counted once, however many images use it.
    pub bytes: u64,
}

/// Unique bytes of a set of images: the union of their layers, each counted once.
pub fn unique_bytes(images: &[ImageLayers]) -> Storage {
    let mut ids: Vec<&str> = images.iter().map(|i| i.image.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let layers: HashMap<&str, u64> = images
        .iter()
        .flat_map(|i| &i.layers)
        .map(|l| (l.chain_id.as_str(), l.size))
        .collect();
    Storage {
        images: ids.len(),
        layers: layers.len(),
        bytes: layers.values().sum(),
    }
}

/// The layers two sets of images have in common (counted once), as a `Storage` of no images.
pub fn common_layers(a: &[ImageLayers], b: &[ImageLayers]) -> Storage {
    let in_b: HashMap<&str, u64> = b
        .iter()
        .flat_map(|i| &i.layers)
        .map(|l| (l.chain_id.as_str(), l.size))
        .collect();
    let common: HashMap<&str, u64> = a
        .iter()
        .flat_map(|i| &i.layers)
        .filter(|l| in_b.contains_key(l.chain_id.as_str()))
        .map(|l| (l.chain_id.as_str(), l.size))
        .collect();
    Storage {
        images: 0,
        layers: common.len(),
        bytes: common.values().sum(),
    }
}

/// The chain ids of an image's layers from their diff ids (base first): the first layer's is
/// its diff id, each next one `sha256(parent chain id + " " + diff id)`.
fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(diff_ids.len());
    for diff in diff_ids {
        let id = match out.last() {
            None => diff.clone(),
            Some(parent) => format!(
                "sha256:{}",
                hex::encode(Sha256::digest(format!("{parent} {diff}").as_bytes()))
            ),
        };
        out.push(id);
    }
    out
}

/// Each layer's size, base first, from the image's history (newest entry first, as the Engine
/// lists it). The history also has entries that made no layer (size 0: a `CMD`, a `LABEL`);
/// they are told apart from layers by size, which is unambiguous unless an image has both
/// such entries and layers of size 0 (then an error rather than a guess).
fn layer_sizes(diff_ids: &[String], history_newest_first: &[i64]) -> anyhow::Result<Vec<u64>> {
    let sizes: Vec<u64> = history_newest_first
        .iter()
        .rev()
        .map(|&s| u64::try_from(s).unwrap_or(0))
        .collect();
    if sizes.len() == diff_ids.len() {
        return Ok(sizes);
    }
    let nonzero: Vec<u64> = sizes.iter().copied().filter(|&s| s > 0).collect();
    if nonzero.len() == diff_ids.len() {
        return Ok(nonzero);
    }
    bail!(
        "cannot tell the image's {} layers from its {} history entries ({} with a size)",
        diff_ids.len(),
        sizes.len(),
        nonzero.len()
    )
}

/// The bench's connection to the Engine.
pub struct EnvBench {
    docker: Docker,
}

impl EnvBench {
    pub async fn connect() -> anyhow::Result<EnvBench> {
        Ok(EnvBench {
            docker: DockerExecutor::connect().await?,
        })
    }

    /// `Docker Engine <version>, storage driver <driver>`, for the bench's heading.
    pub async fn describe(&self) -> anyhow::Result<String> {
        let info = self.docker.info().await.context("docker info")?;
        Ok(format!(
            "Docker Engine {}, storage driver {}",
            info.server_version.as_deref().unwrap_or("?"),
            info.driver.as_deref().unwrap_or("?")
        ))
    }

    /// Builds (or finds, when an earlier task of the same run built it) the task's environment
    /// in `mode`, under the mode's namespace, with the layer builder `EnvImage::ensure` uses.
    pub async fn build(
        &self,
        mode: EnvMode,
        task: &Task,
        runners: &Path,
        wheels: Option<&Path>,
    ) -> anyhow::Result<EnvImage> {
        let layers = mode.layers(task, runners)?;
        EnvImage::build(&self.docker, task, &layers, wheels, &mode.namespace()).await
    }

    /// An image's layers with their chain ids and sizes (inspect + history).
    pub async fn image_layers(&self, image: &str) -> anyhow::Result<ImageLayers> {
        let inspect = self
            .docker
            .inspect_image(image)
            .await
            .with_context(|| format!("inspecting {image}"))?;
        let diff_ids = inspect.root_fs.and_then(|r| r.layers).unwrap_or_default();
        let history = self
            .docker
            .image_history(image)
            .await
            .with_context(|| format!("the history of {image}"))?;
        let sizes: Vec<i64> = history.iter().map(|h| h.size).collect();
        let sizes = layer_sizes(&diff_ids, &sizes).with_context(|| format!("image {image}"))?;
        let layers = chain_ids(&diff_ids)
            .into_iter()
            .zip(sizes)
            .map(|(chain_id, size)| Layer { chain_id, size })
            .collect();
        Ok(ImageLayers {
            image: inspect.id.unwrap_or_else(|| image.to_owned()),
            layers,
            reported_size: inspect
                .size
                .and_then(|s| u64::try_from(s).ok())
                .unwrap_or(0),
        })
    }

    /// Removes every image under [`BENCH_NAMESPACE`] (tagged there, or a committed layer
    /// labelled with a repository there, such as a parent left untagged), children first;
    /// returns how many. Nothing else is touched.
    pub async fn remove_images(&self) -> anyhow::Result<usize> {
        let filters = HashMap::from([("label".to_owned(), vec![LABEL_LAYER.to_owned()])]);
        let options = ListImagesOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let mut ours: Vec<_> = self
            .docker
            .list_images(Some(options))
            .await
            .context("listing images")?
            .into_iter()
            .filter(|i| {
                i.labels
                    .get(LABEL_LAYER)
                    .is_some_and(|l| l.starts_with(BENCH_NAMESPACE))
                    || i.repo_tags.iter().any(|t| t.starts_with(BENCH_NAMESPACE))
            })
            .collect();
        // A layer is committed after its parent: newest first removes children first.
        ours.sort_by_key(|i| std::cmp::Reverse(i.created));
        let mut removed = 0;
        for image in &ours {
            let options = RemoveImageOptionsBuilder::default()
                .force(false)
                .noprune(false)
                .build();
            match self
                .docker
                .remove_image(&image.id, Some(options), None)
                .await
            {
                Ok(_) => removed += 1,
                // Pruned already with a child removed before it.
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "removing the bench image {} {:?}",
                            image.id, image.repo_tags
                        )
                    });
                }
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(repo: &str, requirements: &str, constraints: Option<&str>) -> PipLayer {
        PipLayer {
            repo: repo.into(),
            requirements: requirements.into(),
            constraints: constraints.map(Into::into),
        }
    }

    fn image(id: &str, layers: &[(&str, u64)]) -> ImageLayers {
        ImageLayers {
            image: id.into(),
            layers: layers
                .iter()
                .map(|&(c, size)| Layer {
                    chain_id: c.into(),
                    size,
                })
                .collect(),
            reported_size: layers.iter().map(|l| l.1).sum(),
        }
    }

    #[test]
    fn unique_bytes_count_each_layer_once() {
        // Two tasks on one shared layer, and a third on the base alone (the base image itself).
        let images = [
            image("a", &[("base", 100), ("torch", 5000), ("a-pkgs", 30)]),
            image("b", &[("base", 100), ("torch", 5000), ("b-pkgs", 70)]),
            image("base", &[("base", 100)]),
            image("a", &[("base", 100), ("torch", 5000), ("a-pkgs", 30)]),
        ];
        assert_eq!(
            unique_bytes(&images),
            Storage {
                images: 3,
                layers: 4,
                bytes: 5200
            }
        );
        // Independent: the same bytes installed twice are two layers.
        let independent = [
            image("a2", &[("base", 100), ("a-all", 5030)]),
            image("b2", &[("base", 100), ("b-all", 5070)]),
        ];
        assert_eq!(unique_bytes(&independent).bytes, 10200);
        assert_eq!(
            common_layers(&images, &independent),
            Storage {
                images: 0,
                layers: 1,
                bytes: 100
            }
        );
        assert_eq!(unique_bytes(&[]), Storage::default());
    }

    #[test]
    fn chain_ids_follow_the_parents() {
        let d = |s: &str| format!("sha256:{s}");
        let one = chain_ids(&[d("a")]);
        assert_eq!(one, [d("a")]);
        let two = chain_ids(&[d("a"), d("b")]);
        assert_eq!(two[0], d("a"));
        assert_eq!(
            two[1],
            format!(
                "sha256:{}",
                hex::encode(Sha256::digest(b"sha256:a sha256:b"))
            )
        );
        // The same diff on another parent is another layer.
        assert_ne!(chain_ids(&[d("x"), d("b")])[1], two[1]);
    }

    #[test]
    fn history_sizes_are_matched_to_layers() {
        let ids: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        // One entry per layer, a layer of size 0 included.
        assert_eq!(layer_sizes(&ids, &[0, 7]).unwrap(), [7, 0]);
        // Entries without a layer (size 0) left out.
        assert_eq!(layer_sizes(&ids, &[0, 30, 0, 7]).unwrap(), [7, 30]);
        assert!(layer_sizes(&ids, &[0, 30, 0]).is_err());
    }

    #[test]
    fn the_independent_layer_installs_both_and_keeps_every_constraint() {
        let shared = layer(
            "infradev-layer/torch-2.8",
            "# torch\ntorch==2.8.0\nnumpy==1.26.4  # pinned\n\n",
            None,
        );
        let task = layer(
            "infradev-env/t",
            "numpy==1.26.4\nrequests==2.32.4\n",
            Some("urllib3==2.5.0\nNumPy==1.26.4"),
        );
        let merged = merge_layers(&[shared.clone(), task], "infradev-env/t")
            .unwrap()
            .unwrap();
        assert_eq!(merged.repo, "infradev-env/t");
        assert_eq!(
            merged.requirements,
            "torch==2.8.0\nnumpy==1.26.4\nrequests==2.32.4\n"
        );
        assert_eq!(
            merged.constraints.as_deref(),
            Some("urllib3==2.5.0\nNumPy==1.26.4\n")
        );
        // Constraints of both are concatenated.
        let both = merge_layers(
            &[
                layer("s", "a==1\n", Some("c==1\n")),
                layer("t", "b==1\n", Some("d==1\n")),
            ],
            "x",
        )
        .unwrap()
        .unwrap();
        assert_eq!(both.constraints.as_deref(), Some("c==1\nd==1\n"));
        // Only the shared layer, or nothing at all.
        let alone = merge_layers(std::slice::from_ref(&shared), "x")
            .unwrap()
            .unwrap();
        assert_eq!(alone.requirements, "torch==2.8.0\nnumpy==1.26.4\n");
        assert_eq!(alone.constraints, None);
        assert_eq!(merge_layers(&[], "x").unwrap(), None);
    }

    #[test]
    fn a_later_layer_s_pin_wins_and_two_pins_in_one_layer_are_an_error() {
        let shared = layer(
            "infradev-layer/torch-2.8",
            "numpy==1.26.4\nMarkupSafe==3.0.2\n",
            None,
        );
        // The task's constraints move MarkupSafe on, as pip does on top of the shared layer.
        let merged = merge_layers(
            &[
                shared.clone(),
                layer(
                    "infradev-env/t",
                    "jinja2==3.1.6\n",
                    Some("markupsafe==3.0.3\n"),
                ),
            ],
            "infradev-env/t",
        )
        .unwrap()
        .unwrap();
        assert_eq!(merged.requirements, "numpy==1.26.4\njinja2==3.1.6\n");
        assert_eq!(merged.constraints.as_deref(), Some("markupsafe==3.0.3\n"));
        // Within one layer, two versions of one package cannot be installed at once.
        let err = merge_layers(
            &[
                shared.clone(),
                layer("infradev-env/t", "numpy==2.1.0\n", Some("numpy==2.2.0\n")),
            ],
            "infradev-env/t",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`numpy==2.1.0` (infradev-env/t requirements)"),
            "{err}"
        );
        assert!(
            err.contains("`numpy==2.2.0` (infradev-env/t constraints)"),
            "{err}"
        );
        // Names compare as PEP 503 says; extras do not matter.
        let err = merge_layers(
            &[layer(
                "t",
                "typing_extensions==4.14.1\nTyping.Extensions[x] == 4.15.0\n",
                None,
            )],
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("typing-extensions"), "{err}");
        // Ranges, wildcards and pins under other markers do not replace a pin.
        for other in [
            "numpy>=2",
            "numpy==2.*",
            "numpy==2.1.0 ; python_version >= '3.13'",
        ] {
            let merged = merge_layers(&[shared.clone(), layer("t", other, None)], "t")
                .unwrap()
                .unwrap();
            assert!(
                merged.requirements.starts_with("numpy==1.26.4\n"),
                "{other}"
            );
        }
    }
}
