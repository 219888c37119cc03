//! Host-side downloads into the cache (the sandboxes never reach a registry):
//!
//! * wheels for a task's environment (its shared layer and its own packages), with the host's
//!   pip, into `<cache>/wheels`, one flat directory shared by every task;
//! * the release sdists that stand in for a task's base and reference commits, from the
//!   package index's JSON simple API, checked against the SHA-256 pinned in task.toml, into
//!   `<cache>/sdists`.
//!
//! The cache is `--cache`, else `$INFRADEV_CACHE`, else `$XDG_CACHE_HOME/infradev`, else
//! `~/.cache/infradev`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::grade::sandbox::docker::layer_file;
use crate::task::{Release, Task};

/// The package index's simple API (PEP 691 JSON).
const DEFAULT_INDEX: &str = "https://pypi.org/simple";

/// Where downloads are kept between runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    pub root: PathBuf,
}

impl Cache {
    /// `explicit`, else the environment's choice, else `~/.cache/infradev`.
    pub fn locate(explicit: Option<PathBuf>) -> Cache {
        let root = explicit
            .or_else(|| std::env::var_os("INFRADEV_CACHE").map(PathBuf::from))
            .or_else(|| {
                std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("infradev"))
            })
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/infradev")))
            .unwrap_or_else(|| PathBuf::from(".infradev-cache"));
        Cache { root }
    }

    pub fn wheels(&self) -> PathBuf {
        self.root.join("wheels")
    }

    pub fn sdists(&self) -> PathBuf {
        self.root.join("sdists")
    }

    /// Where a local clone of an upstream repository is looked for (`owner+name.git`).
    pub fn upstream_git(&self, repository: &str) -> PathBuf {
        self.root
            .join("upstream")
            .join(format!("{}.git", repository.replace('/', "+")))
    }
}

/// One pip requirements set to make available offline.
struct WheelSet {
    what: String,
    requirements: PathBuf,
    constraints: Option<PathBuf>,
}

/// Makes every wheel the task's environment installs available in the cache. Uses only the
/// cache when it already has everything (no network), else downloads with pip, building
/// wheels on the host for packages published only as sdists. The host interpreter must have
/// the task's Python version, so that pip picks the wheels the image will install.
pub fn fetch_wheels(
    python: &Path,
    task: &Task,
    runners: &Path,
    cache: &Cache,
) -> anyhow::Result<()> {
    let env = &task.environment;
    let scratch = tempfile::tempdir()?;
    let mut sets = Vec::new();
    if let Some(layer) = &env.layer {
        sets.push(WheelSet {
            what: format!("layer `{layer}`"),
            requirements: layer_file(runners, layer),
            constraints: None,
        });
    }
    if !env.packages.is_empty() {
        let file = scratch.path().join("requirements.txt");
        std::fs::write(&file, env.packages.join("\n") + "\n")?;
        sets.push(WheelSet {
            what: format!("task `{}`", task.id),
            requirements: file,
            constraints: env.constraints.as_ref().map(|c| task.dir.join(c)),
        });
    }
    if sets.is_empty() {
        return Ok(());
    }
    // With the task's own Python the host's pip picks exactly the wheels the image installs
    // and can build wheels for sdist-only packages; with another, binary wheels are selected
    // for that version and every manylinux tag the image's glibc (2.36 or newer) accepts.
    let target: Vec<String> = if host_python(python)? == env.python {
        Vec::new()
    } else {
        let mut t: Vec<String> = ["--only-binary", ":all:", "--implementation", "cp"]
            .into_iter()
            .map(String::from)
            .collect();
        t.extend(["--python-version".into(), env.python.clone()]);
        for platform in manylinux_platforms() {
            t.extend(["--platform".into(), platform]);
        }
        t
    };
    let wheels = cache.wheels();
    std::fs::create_dir_all(&wheels)
        .with_context(|| format!("cannot create {}", wheels.display()))?;
    let dir = wheels.display().to_string();
    for set in &sets {
        let mut args: Vec<String> = vec!["-r".into(), set.requirements.display().to_string()];
        if let Some(c) = &set.constraints {
            args.extend(["-c".into(), c.display().to_string()]);
        }
        // From the cache alone first: nothing is downloaded (and, with the host's own
        // Python, nothing is copied either).
        let offline = if target.is_empty() {
            pip(
                python,
                &[
                    "install",
                    "--dry-run",
                    "--ignore-installed",
                    "--quiet",
                    "--no-index",
                ],
                &["--only-binary", ":all:", "--find-links", &dir],
                [&[], &args],
            )?
        } else {
            pip(
                python,
                &["download", "--quiet", "--no-index"],
                &["--find-links", &dir, "-d", &dir],
                [&target, &args],
            )?
        };
        if offline.status.success() {
            tracing::info!(set = %set.what, "every wheel is in the cache");
            continue;
        }
        eprintln!("fetch: downloading the wheels of {} into {dir}", set.what);
        let online = if target.is_empty() {
            pip(
                python,
                &["wheel", "--prefer-binary", "--progress-bar", "off"],
                &["--find-links", &dir, "--wheel-dir", &dir],
                [&[], &args],
            )?
        } else {
            pip(
                python,
                &["download", "--progress-bar", "off"],
                &["--find-links", &dir, "-d", &dir],
                [&target, &args],
            )?
        };
        if !online.status.success() {
            bail!(
                "pip could not fetch the wheels of {}:\n{}",
                set.what,
                tail(&online.stderr)
            );
        }
    }
    Ok(())
}

fn pip(
    python: &Path,
    command: &[&str],
    options: &[&str],
    args: [&[String]; 2],
) -> anyhow::Result<std::process::Output> {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "pip", "--disable-pip-version-check"]);
    cmd.args(command).args(options).args(args[0]).args(args[1]);
    cmd.output()
        .with_context(|| format!("cannot run {} -m pip", python.display()))
}

fn host_python(python: &Path) -> anyhow::Result<String> {
    let out = Command::new(python)
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        bail!("{} does not run", python.display());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Every manylinux tag a Debian bookworm or trixie image accepts (glibc 2.36+), newest first.
fn manylinux_platforms() -> Vec<String> {
    let mut tags: Vec<String> = (17..=36)
        .rev()
        .map(|minor| format!("manylinux_2_{minor}_x86_64"))
        .collect();
    tags.extend(
        [
            "manylinux2014_x86_64",
            "manylinux2010_x86_64",
            "manylinux1_x86_64",
        ]
        .map(String::from),
    );
    tags
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The file name of a release's sdist, as the index normalises it (PEP 625).
pub fn sdist_name(release: &Release) -> String {
    let name: String = release
        .name
        .chars()
        .map(|c| {
            if c == '-' || c == '.' {
                '_'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    format!("{name}-{}.tar.gz", release.version)
}

/// Returns the path of a release's sdist in the cache, downloading it when it is missing.
/// The file's SHA-256 must equal the pin, whether it was cached or downloaded.
pub async fn fetch_sdist(release: &Release, cache: &Cache) -> anyhow::Result<PathBuf> {
    let dir = cache.sdists();
    let path = dir.join(sdist_name(release));
    if path.is_file() {
        verify_sha256(&path, &release.sha256)?;
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let index = std::env::var("INFRADEV_INDEX_URL").unwrap_or_else(|_| DEFAULT_INDEX.into());
    let url = sdist_url(&index, release).await?;
    eprintln!("fetch: downloading {release} from {url}");
    let bytes = reqwest::get(&url)
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("cannot download {url}"))?
        .bytes()
        .await
        .with_context(|| format!("cannot download {url}"))?;
    let got = hex::encode(Sha256::digest(&bytes));
    if got != release.sha256 {
        bail!(
            "{url}: SHA-256 is {got}, task.toml pins {} for {release}",
            release.sha256
        );
    }
    let partial = path.with_extension("partial");
    std::fs::write(&partial, &bytes)?;
    std::fs::rename(&partial, &path)?;
    Ok(path)
}

#[derive(Deserialize)]
struct SimpleIndex {
    files: Vec<SimpleFile>,
}

#[derive(Deserialize)]
struct SimpleFile {
    filename: String,
    url: String,
}

async fn sdist_url(index: &str, release: &Release) -> anyhow::Result<String> {
    let project = format!("{}/{}/", index.trim_end_matches('/'), release.name);
    let listing: SimpleIndex = reqwest::Client::new()
        .get(&project)
        .header("Accept", "application/vnd.pypi.simple.v1+json")
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("cannot read the index page {project}"))?
        .json()
        .await
        .with_context(|| format!("{project} is not a JSON simple-API page"))?;
    let want = sdist_name(release);
    listing
        .files
        .into_iter()
        .find(|f| f.filename.eq_ignore_ascii_case(&want))
        .map(|f| f.url)
        .with_context(|| format!("{project} lists no sdist `{want}` for {release}"))
}

fn verify_sha256(path: &Path, want: &str) -> anyhow::Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let got = hex::encode(Sha256::digest(&bytes));
    if got != want {
        bail!(
            "{}: SHA-256 is {got}, task.toml pins {want}; remove the file to download it again",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdist_names_are_normalised() {
        let r = |name: &str, version: &str| Release {
            name: name.into(),
            version: version.into(),
            sha256: String::new(),
        };
        assert_eq!(
            sdist_name(&r("megatron-core", "0.19.0")),
            "megatron_core-0.19.0.tar.gz"
        );
        assert_eq!(sdist_name(&r("vllm", "0.10.2")), "vllm-0.10.2.tar.gz");
        assert_eq!(sdist_name(&r("Foo.Bar", "1.0")), "foo_bar-1.0.tar.gz");
    }

    #[test]
    fn the_cache_layout_is_stable() {
        let c = Cache {
            root: PathBuf::from("/c"),
        };
        assert_eq!(c.wheels(), PathBuf::from("/c/wheels"));
        assert_eq!(c.sdists(), PathBuf::from("/c/sdists"));
        assert_eq!(
            c.upstream_git("NVIDIA/Megatron-LM"),
            PathBuf::from("/c/upstream/NVIDIA+Megatron-LM.git")
        );
    }

    #[test]
    fn a_cached_sdist_with_another_hash_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.tar.gz");
        std::fs::write(&file, b"abc").unwrap();
        let good = hex::encode(Sha256::digest(b"abc"));
        verify_sha256(&file, &good).unwrap();
        let err = verify_sha256(&file, &"0".repeat(64))
            .unwrap_err()
            .to_string();
        assert!(err.contains("x.tar.gz") && err.contains(&good), "{err}");
    }
}
