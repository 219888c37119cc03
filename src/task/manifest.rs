//! `tasks/<repo>/<task-id>/task.toml`: what a task is and how to grade it.
//!
//! Parsing is strict (unknown keys are errors) and every error names file, line and field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::error::ManifestError;
use super::limits::{MAX_RETRIES, MAX_WORLD_SIZE};
use super::probes::{ProbeSet, load_probes};
use super::reject::{RawReject, Reject, rejects};
use crate::grading::Category;

/// A validated task, with its hidden probes.
#[derive(Debug, Clone)]
pub struct Task {
    /// The directory holding task.toml and prompt.md.
    pub dir: PathBuf,
    pub id: String,
    pub title: String,
    pub summary: String,
    /// Upstream repository, `owner/name`.
    pub repository: String,
    /// Upstream pull-request number.
    pub pr: u64,
    /// Which part of the model stack the change is in (README's task table).
    pub area: Area,
    /// The most ranks the probes' rank groups have (docs/probe-protocol.md "Rank groups");
    /// 1 when no probe starts one.
    pub ranks: u32,
    pub base_commit: String,
    pub reference_commit: String,
    pub environment: Environment,
    /// Where the upstream code comes from when the task is validated.
    pub upstream: Upstream,
    pub tests: OfficialTests,
    pub resources: Resources,
    pub probes: ProbeSet,
    /// Wrong patches validation must see rejected (`[[reject]]`).
    pub rejects: Vec<Reject>,
}

impl Task {
    pub fn manifest_path(&self) -> PathBuf {
        self.dir.join("task.toml")
    }

    pub fn prompt_path(&self) -> PathBuf {
        self.dir.join("prompt.md")
    }
}

/// The part of the model stack a task's change is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Area {
    /// Parallel state, optimizers, checkpoints, schedules.
    Training,
    /// KV cache, scheduling, sampling, offload.
    Inference,
    /// Advantages, rollout, weight sync between trainer and rollout workers.
    Rl,
}

impl Area {
    pub const ALL: [Area; 3] = [Area::Training, Area::Inference, Area::Rl];

    pub fn as_str(self) -> &'static str {
        match self {
            Area::Training => "training",
            Area::Inference => "inference",
            Area::Rl => "rl",
        }
    }
}

impl std::fmt::Display for Area {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    /// The image the task's environment image is built FROM (see runners/base-image).
    pub base_image: String,
    /// The Python version the environment must have (`3.11`).
    pub python: String,
    /// A layer shared by several tasks (`runners/layers/<name>/requirements.txt`, for example
    /// torch), installed between the base image and the task's own packages.
    #[serde(default)]
    pub layer: Option<String>,
    /// pip requirement strings, installed offline from the wheel cache.
    #[serde(default)]
    pub packages: Vec<String>,
    /// A pip constraints file, relative to the task directory.
    #[serde(default)]
    pub constraints: Option<PathBuf>,
    /// pytest plugins loaded with `-p` (plugin autoloading is off in every sandbox).
    #[serde(default)]
    pub pytest_plugins: Vec<String>,
    /// Extra environment variables of every sandbox (never InfraDev's own).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Provenance, for example which releases stand in for the base and reference commits.
    #[serde(default)]
    pub note: Option<String>,
}

/// Where `tasks validate` gets the upstream code, offline.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Upstream {
    /// Top-level import names that belong to the upstream repository (`tasks lint`).
    pub packages: Vec<String>,
    pub source: UpstreamSource,
    /// Upstream commits that fixed the reference later (`follow_up`), applied on top of
    /// `reference_commit`, in order, to make the reference that validation and probe power
    /// grade: a task's reference must not carry a bug upstream already fixed.
    pub follow_up: Vec<String>,
    /// For a release source: files taken from later releases that fixed the reference
    /// (`[[upstream.follow_up_release]]`), laid over the reference sdist's tree in order.
    pub follow_up_releases: Vec<FollowUpRelease>,
    /// Provenance: why releases stand in for the commits, and so on.
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub enum UpstreamSource {
    /// `base_commit` and `reference_commit` from a local clone of the repository.
    #[default]
    Git,
    /// The last release without the change and the first release with it, as PyPI sdists
    /// (which must carry the official test files), pinned by SHA-256.
    Release { base: Release, reference: Release },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// `name==version`.
    pub name: String,
    pub version: String,
    /// SHA-256 of the sdist, lowercase hex.
    pub sha256: String,
}

/// An upstream fix of a release-sourced reference: the files it changed, as a later release
/// ships them.
#[derive(Debug, Clone, PartialEq)]
pub struct FollowUpRelease {
    pub release: Release,
    /// Paths in the repository (and in the sdist below its top folder), `/`-separated.
    pub paths: Vec<String>,
    /// Which upstream change this is, for the record.
    pub note: Option<String>,
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}=={}", self.name, self.version)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct OfficialTests {
    /// Official test files, restored from the reference commit before grading.
    pub files: Vec<String>,
    pub fail_to_pass: Vec<String>,
    pub pass_to_pass: Vec<String>,
    /// Why the upstream change has no failing test (a performance PR often ships none): then
    /// `fail_to_pass` is empty and the probes are what fails on the base.
    pub no_fail_to_pass: Option<String>,
    /// The category of an official-test failure when the evidence says nothing more specific.
    pub default_category: Category,
    /// How many times a failing official test is rerun (flake handling); `None`: the
    /// configured default.
    pub retries: Option<u32>,
}

/// GPUs the task needs: a count, or the exact device ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gpus {
    Count(u32),
    Ids(Vec<String>),
}

impl std::fmt::Display for Gpus {
    /// `0 GPUs`, `2 GPUs`, `GPUs 0,3`: as `tasks show` and logs print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gpus::Count(1) => write!(f, "1 GPU"),
            Gpus::Count(n) => write!(f, "{n} GPUs"),
            Gpus::Ids(ids) => write!(f, "GPUs {}", ids.join(",")),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Resources {
    pub gpus: Gpus,
    pub memory_mb: u64,
    pub cpus: f64,
    pub pids: i64,
    /// Hard limit for one test, enforced inside the sandbox.
    pub test_timeout_s: u64,
    pub timeouts: Timeouts,
    /// What the grade needs of a machine beyond counts (`h100`, `nvlink`): a remote backend
    /// turns them into Slurm constraints or runner labels.
    pub labels: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    pub build_s: u64,
    pub tests_s: u64,
    pub probes_s: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    id: Spanned<String>,
    title: String,
    summary: String,
    repository: Spanned<String>,
    pr: u64,
    area: Area,
    #[serde(default)]
    ranks: Option<Spanned<u32>>,
    base_commit: Spanned<String>,
    reference_commit: Spanned<String>,
    environment: Spanned<Environment>,
    #[serde(default)]
    upstream: Option<Spanned<RawUpstream>>,
    tests: RawTests,
    resources: RawResources,
    #[serde(default)]
    reject: Vec<RawReject>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum ValidateFrom {
    Git,
    Release,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    #[serde(default)]
    packages: Vec<String>,
    validate_from: ValidateFrom,
    #[serde(default)]
    base_release: Option<Spanned<String>>,
    #[serde(default)]
    reference_release: Option<Spanned<String>>,
    #[serde(default)]
    base_sha256: Option<Spanned<String>>,
    #[serde(default)]
    reference_sha256: Option<Spanned<String>>,
    #[serde(default)]
    follow_up: Vec<Spanned<String>>,
    #[serde(default)]
    follow_up_release: Vec<Spanned<RawFollowUpRelease>>,
    #[serde(default)]
    note: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFollowUpRelease {
    release: Spanned<String>,
    sha256: Spanned<String>,
    paths: Vec<Spanned<String>>,
    #[serde(default)]
    note: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTests {
    files: Vec<String>,
    fail_to_pass: Vec<Spanned<String>>,
    #[serde(default)]
    pass_to_pass: Vec<Spanned<String>>,
    #[serde(default)]
    no_fail_to_pass: Option<Spanned<String>>,
    default_category: Spanned<Category>,
    #[serde(default)]
    retries: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResources {
    #[serde(default)]
    gpus: u32,
    #[serde(default)]
    gpu_ids: Option<Spanned<Vec<String>>>,
    memory_mb: Spanned<u64>,
    cpus: Spanned<f64>,
    pids: Spanned<i64>,
    test_timeout_s: Spanned<u64>,
    timeouts: Timeouts,
    #[serde(default)]
    labels: Vec<String>,
}

/// Loads `<dir>/task.toml` and the probes in `probes_dir`.
pub fn load_task(dir: &Path, probes_dir: &Path) -> Result<Task, ManifestError> {
    let file = dir.join("task.toml");
    let text = std::fs::read_to_string(&file)
        .map_err(|e| ManifestError::whole_file(&file, format!("cannot read: {e}")))?;
    let raw: RawTask =
        toml::from_str(&text).map_err(|e| ManifestError::from_toml(&file, &text, &e))?;
    let err = |span: std::ops::Range<usize>, field: &str, msg: String| {
        ManifestError::at(&file, &text, span, Some(field), msg)
    };

    if !is_task_id(raw.id.get_ref()) {
        return Err(err(
            raw.id.span(),
            "id",
            "must be lowercase letters, digits and '-'".into(),
        ));
    }
    if !raw
        .repository
        .get_ref()
        .split_once('/')
        .is_some_and(|(o, n)| !o.is_empty() && !n.is_empty())
    {
        return Err(err(
            raw.repository.span(),
            "repository",
            "must be `owner/name`".into(),
        ));
    }
    for (field, sha) in [
        ("base_commit", &raw.base_commit),
        ("reference_commit", &raw.reference_commit),
    ] {
        if !is_full_sha(sha.get_ref()) {
            return Err(err(
                sha.span(),
                field,
                format!("`{}` is not a 40-hex commit SHA", sha.get_ref()),
            ));
        }
    }
    if raw.base_commit.get_ref() == raw.reference_commit.get_ref() {
        return Err(err(
            raw.reference_commit.span(),
            "reference_commit",
            "equals base_commit".into(),
        ));
    }
    for (field, ids) in [
        ("tests.fail_to_pass", &raw.tests.fail_to_pass),
        ("tests.pass_to_pass", &raw.tests.pass_to_pass),
    ] {
        for id in ids {
            let file_part = id.get_ref().split("::").next().unwrap_or_default();
            if !id.get_ref().contains("::") {
                return Err(err(
                    id.span(),
                    field,
                    format!("`{}` is not a pytest node id (`file::test`)", id.get_ref()),
                ));
            }
            if field == "tests.fail_to_pass" && !raw.tests.files.iter().any(|f| f == file_part) {
                return Err(err(
                    id.span(),
                    field,
                    format!(
                        "`{file_part}` is not listed in tests.files, so it would not be restored from the reference"
                    ),
                ));
            }
        }
    }
    let retries = match &raw.tests.retries {
        Some(r) if *r.get_ref() > MAX_RETRIES => {
            return Err(ManifestError::at(
                &file,
                &text,
                r.span(),
                Some("tests.retries"),
                format!("{} reruns is too many (at most {MAX_RETRIES})", r.get_ref()),
            ));
        }
        r => r.as_ref().map(|r| *r.get_ref()),
    };
    if let Some(why) = &raw.tests.no_fail_to_pass {
        if !raw.tests.fail_to_pass.is_empty() {
            return Err(err(
                why.span(),
                "tests.no_fail_to_pass",
                "only for a task whose fail_to_pass is empty".into(),
            ));
        }
        if why.get_ref().trim().is_empty() {
            return Err(err(
                why.span(),
                "tests.no_fail_to_pass",
                "say why the upstream change has no test that fails on its base".into(),
            ));
        }
    }
    let default_category = *raw.tests.default_category.get_ref();
    if matches!(default_category, Category::Build | Category::Infra) {
        return Err(err(
            raw.tests.default_category.span(),
            "tests.default_category",
            format!("`{default_category}` is decided by evidence, not declared"),
        ));
    }
    let r = &raw.resources;
    let positive = [
        (
            "resources.memory_mb",
            r.memory_mb.span(),
            *r.memory_mb.get_ref() > 0,
        ),
        ("resources.cpus", r.cpus.span(), *r.cpus.get_ref() > 0.0),
        ("resources.pids", r.pids.span(), *r.pids.get_ref() > 0),
        (
            "resources.test_timeout_s",
            r.test_timeout_s.span(),
            *r.test_timeout_s.get_ref() > 0,
        ),
    ];
    if let Some((field, span, _)) = positive.into_iter().find(|(_, _, ok)| !ok) {
        return Err(err(span, field, "must be greater than zero".into()));
    }
    let gpus = match &r.gpu_ids {
        Some(ids) if r.gpus != 0 => {
            return Err(err(
                ids.span(),
                "resources.gpu_ids",
                "give either gpus (a count) or gpu_ids, not both".into(),
            ));
        }
        Some(ids) => Gpus::Ids(ids.get_ref().clone()),
        None => Gpus::Count(r.gpus),
    };

    let environment_span = raw.environment.span();
    let environment = raw.environment.into_inner();
    for key in environment.env.keys() {
        let ours = RESERVED_ENV.contains(&key.as_str()) || key.starts_with("INFRADEV_");
        if ours || key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(err(
                environment_span.clone(),
                "environment.env",
                format!("`{key}` cannot be set by a task (a reserved or malformed name)"),
            ));
        }
    }
    if let Some(layer) = &environment.layer
        && !is_task_id(layer.replace('.', "-").as_str())
    {
        return Err(err(
            environment_span,
            "environment.layer",
            format!("`{layer}` must be lowercase letters, digits, '.' and '-'"),
        ));
    }
    let upstream = match raw.upstream {
        None => Upstream::default(),
        Some(u) => upstream(u, &err)?,
    };
    let probes = load_probes(probes_dir, raw.id.get_ref())?;
    let rejects = rejects(raw.reject, &probes, &err)?;
    let ranks = match &raw.ranks {
        None => 1,
        Some(r) => {
            let (n, max) = (*r.get_ref(), MAX_WORLD_SIZE as u32);
            if !(1..=max).contains(&n) {
                return Err(err(
                    r.span(),
                    "ranks",
                    format!("{n}: the probes' rank groups have 2 to {max} ranks (1: none)"),
                ));
            }
            n
        }
    };
    Ok(Task {
        dir: dir.to_path_buf(),
        id: raw.id.into_inner(),
        title: raw.title,
        summary: raw.summary,
        repository: raw.repository.into_inner(),
        pr: raw.pr,
        area: raw.area,
        ranks,
        base_commit: raw.base_commit.into_inner(),
        reference_commit: raw.reference_commit.into_inner(),
        environment,
        upstream,
        tests: OfficialTests {
            files: raw.tests.files,
            fail_to_pass: raw
                .tests
                .fail_to_pass
                .into_iter()
                .map(Spanned::into_inner)
                .collect(),
            pass_to_pass: raw
                .tests
                .pass_to_pass
                .into_iter()
                .map(Spanned::into_inner)
                .collect(),
            no_fail_to_pass: raw.tests.no_fail_to_pass.map(Spanned::into_inner),
            default_category,
            retries,
        },
        resources: Resources {
            gpus,
            memory_mb: r.memory_mb.clone().into_inner(),
            cpus: r.cpus.clone().into_inner(),
            pids: r.pids.clone().into_inner(),
            test_timeout_s: r.test_timeout_s.clone().into_inner(),
            timeouts: r.timeouts,
            labels: r.labels.clone(),
        },
        probes,
        rejects,
    })
}

/// Variables every sandbox sets itself (see `sandbox::command`).
const RESERVED_ENV: &[&str] = &[
    "PYTHONPATH",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONNOUSERSITE",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
    "HOME",
    "TMPDIR",
    "PATH",
    "LANG",
];

type ErrAt<'a> = dyn Fn(std::ops::Range<usize>, &str, String) -> ManifestError + 'a;

fn upstream(raw: Spanned<RawUpstream>, err: &ErrAt<'_>) -> Result<Upstream, ManifestError> {
    let span = raw.span();
    let raw = raw.into_inner();
    let source = match raw.validate_from {
        ValidateFrom::Git => {
            for (field, value) in [
                ("upstream.base_release", &raw.base_release),
                ("upstream.reference_release", &raw.reference_release),
                ("upstream.base_sha256", &raw.base_sha256),
                ("upstream.reference_sha256", &raw.reference_sha256),
            ] {
                if let Some(v) = value {
                    return Err(err(
                        v.span(),
                        field,
                        "only for validate_from = \"release\"".into(),
                    ));
                }
            }
            UpstreamSource::Git
        }
        ValidateFrom::Release => {
            let release = |req: &Option<Spanned<String>>,
                           sha: &Option<Spanned<String>>,
                           which: &str|
             -> Result<Release, ManifestError> {
                let missing = |field: &str, why: &str| {
                    err(
                        span.clone(),
                        &format!("upstream.{which}_{field}"),
                        why.into(),
                    )
                };
                let req = req.as_ref().ok_or_else(|| {
                    missing(
                        "release",
                        "missing (validate_from = \"release\" needs both releases)",
                    )
                })?;
                let req_field = format!("upstream.{which}_release");
                name_version(req, &req_field, err)?;
                let sha = sha.as_ref().ok_or_else(|| {
                    missing(
                        "sha256",
                        "missing: every release is pinned by the SHA-256 of its sdist",
                    )
                })?;
                parse_release(
                    req,
                    &req_field,
                    sha,
                    &format!("upstream.{which}_sha256"),
                    err,
                )
            };
            UpstreamSource::Release {
                base: release(&raw.base_release, &raw.base_sha256, "base")?,
                reference: release(&raw.reference_release, &raw.reference_sha256, "reference")?,
            }
        }
    };
    let mut follow_up = Vec::new();
    for sha in raw.follow_up {
        if !matches!(source, UpstreamSource::Git) {
            return Err(err(
                sha.span(),
                "upstream.follow_up",
                "only for validate_from = \"git\" (the fixes are applied to the reference commit)"
                    .into(),
            ));
        }
        if !is_full_sha(sha.get_ref()) {
            return Err(err(
                sha.span(),
                "upstream.follow_up",
                format!("`{}` is not a 40-hex commit SHA", sha.get_ref()),
            ));
        }
        follow_up.push(sha.into_inner());
    }
    let mut follow_up_releases = Vec::new();
    for fix in raw.follow_up_release {
        let fix_span = fix.span();
        let fix = fix.into_inner();
        if !matches!(source, UpstreamSource::Release { .. }) {
            return Err(err(
                fix_span,
                "upstream.follow_up_release",
                "only for validate_from = \"release\" (for a git source, list the fix commits \
                 in upstream.follow_up)"
                    .into(),
            ));
        }
        let release = parse_release(
            &fix.release,
            "upstream.follow_up_release.release",
            &fix.sha256,
            "upstream.follow_up_release.sha256",
            err,
        )?;
        if fix.paths.is_empty() {
            return Err(err(
                fix_span,
                "upstream.follow_up_release.paths",
                "empty: name the files the fix changed".into(),
            ));
        }
        let mut paths = Vec::new();
        for path in fix.paths {
            let p = path.get_ref();
            let clean = !p.is_empty()
                && !p.starts_with('/')
                && p.split('/').all(|part| !matches!(part, "" | "." | ".."));
            if !clean {
                return Err(err(
                    path.span(),
                    "upstream.follow_up_release.paths",
                    format!("`{p}` is not a relative path inside the repository"),
                ));
            }
            paths.push(path.into_inner());
        }
        follow_up_releases.push(FollowUpRelease {
            release,
            paths,
            note: fix.note,
        });
    }
    Ok(Upstream {
        packages: raw.packages,
        source,
        follow_up,
        follow_up_releases,
        note: raw.note,
    })
}

/// `name==version` pinned by the SHA-256 of its sdist.
fn parse_release(
    req: &Spanned<String>,
    req_field: &str,
    sha: &Spanned<String>,
    sha_field: &str,
    err: &ErrAt<'_>,
) -> Result<Release, ManifestError> {
    let (name, version) = name_version(req, req_field, err)?;
    let hex = sha.get_ref();
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(err(
            sha.span(),
            sha_field,
            "must be 64 lowercase hex digits".into(),
        ));
    }
    Ok(Release {
        name,
        version,
        sha256: hex.clone(),
    })
}

/// The name and version of a `name==version` requirement.
fn name_version(
    req: &Spanned<String>,
    field: &str,
    err: &ErrAt<'_>,
) -> Result<(String, String), ManifestError> {
    req.get_ref()
        .split_once("==")
        .filter(|(n, v)| !n.trim().is_empty() && !v.trim().is_empty())
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .ok_or_else(|| {
            err(
                req.span(),
                field,
                format!("`{}` is not `name==version`", req.get_ref()),
            )
        })
}

fn is_task_id(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

pub(crate) fn is_full_sha(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}
