//! `probes/<task-id>/probes.toml`: the hidden probes, each with its requirement, its failure
//! category and any budget. Probe *source* is loaded only to run it and to redact against it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::error::ManifestError;
use crate::grading::Category;

#[derive(Debug, Clone)]
pub struct ProbeSet {
    pub dir: PathBuf,
    pub probes: Vec<Probe>,
    /// How many times a failing probe is rerun (flake handling); `None`: the configured
    /// default.
    pub retries: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub id: String,
    /// pytest node id relative to the probe directory (`test_state.py::test_x`).
    pub test: String,
    pub category: Category,
    pub requirement: String,
    pub why_official_tests_miss: String,
    /// The base already has this behaviour, so the probe passes on the base too.
    pub checks_base_behaviour: bool,
    pub budget: Budget,
}

impl Probe {
    pub fn file(&self) -> &str {
        self.test.split("::").next().unwrap_or_default()
    }
}

/// Limits a probe must stay within; measured inside the sandbox by the pytest plugin.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    #[serde(default)]
    pub peak_memory_mb: Option<f64>,
    #[serde(default)]
    pub wall_time_s: Option<f64>,
    #[serde(default)]
    pub collective_calls: Option<u64>,
    /// Bytes sent by the subject, plus every rank of the test's rank groups.
    #[serde(default)]
    pub collective_bytes: Option<u64>,
    /// Bytes sent by any one rank of the test's rank groups (the largest over ranks).
    #[serde(default)]
    pub rank_bytes: Option<u64>,
}

impl Budget {
    pub fn is_empty(&self) -> bool {
        *self == Budget::default()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProbes {
    task: Spanned<String>,
    #[serde(default)]
    retries: Option<Spanned<u32>>,
    #[serde(rename = "probe")]
    probes: Vec<RawProbe>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProbe {
    id: Spanned<String>,
    test: Spanned<String>,
    category: Spanned<Category>,
    requirement: String,
    why_official_tests_miss: String,
    #[serde(default)]
    checks_base_behaviour: bool,
    #[serde(default)]
    budget: Option<Spanned<Budget>>,
}

/// Loads and checks `<dir>/probes.toml` for task `task_id`, including that every probe's test
/// file exists and defines the test function.
pub fn load_probes(dir: &Path, task_id: &str) -> Result<ProbeSet, ManifestError> {
    let file = dir.join("probes.toml");
    let text = std::fs::read_to_string(&file).map_err(|e| {
        ManifestError::whole_file(&file, format!("cannot read the probe manifest: {e}"))
    })?;
    let raw: RawProbes =
        toml::from_str(&text).map_err(|e| ManifestError::from_toml(&file, &text, &e))?;
    let err = |span: std::ops::Range<usize>, field: &str, msg: String| {
        ManifestError::at(&file, &text, span, Some(field), msg)
    };
    if raw.task.get_ref() != task_id {
        return Err(err(
            raw.task.span(),
            "task",
            format!(
                "names `{}`, but the task is `{task_id}`",
                raw.task.get_ref()
            ),
        ));
    }
    if let Some(r) = &raw.retries
        && *r.get_ref() > super::limits::MAX_RETRIES
    {
        return Err(err(
            r.span(),
            "retries",
            format!(
                "{} reruns is too many (at most {})",
                r.get_ref(),
                super::limits::MAX_RETRIES
            ),
        ));
    }
    if raw.probes.is_empty() {
        return Err(ManifestError::whole_file(&file, "no [[probe]] entries"));
    }
    let mut seen: BTreeMap<String, ()> = BTreeMap::new();
    let mut probes = Vec::with_capacity(raw.probes.len());
    for p in raw.probes {
        if seen.insert(p.id.get_ref().clone(), ()).is_some() {
            return Err(err(
                p.id.span(),
                "probe.id",
                format!("duplicate probe id `{}`", p.id.get_ref()),
            ));
        }
        let category = *p.category.get_ref();
        if matches!(category, Category::Build | Category::Infra) {
            return Err(err(
                p.category.span(),
                "probe.category",
                format!("`{category}` is decided by evidence, not declared"),
            ));
        }
        let Some((test_file, func)) = p.test.get_ref().split_once("::") else {
            return Err(err(
                p.test.span(),
                "probe.test",
                format!(
                    "`{}` is not a pytest node id (`file::test`)",
                    p.test.get_ref()
                ),
            ));
        };
        let source = std::fs::read_to_string(dir.join(test_file)).map_err(|e| {
            err(
                p.test.span(),
                "probe.test",
                format!("probe file `{test_file}` cannot be read: {e}"),
            )
        })?;
        let func_name = func.split("::").last().unwrap_or(func);
        if !source.contains(&format!("def {func_name}(")) {
            return Err(err(
                p.test.span(),
                "probe.test",
                format!("`{test_file}` defines no `{func_name}`"),
            ));
        }
        let budget = match p.budget {
            Some(b) => {
                let span = b.span();
                let b = b.into_inner();
                let bad = [b.peak_memory_mb, b.wall_time_s]
                    .into_iter()
                    .flatten()
                    .any(|v| v <= 0.0 || !v.is_finite());
                if bad {
                    return Err(err(
                        span,
                        "probe.budget",
                        "budgets must be finite and greater than zero".into(),
                    ));
                }
                b
            }
            None => Budget::default(),
        };
        probes.push(Probe {
            id: p.id.into_inner(),
            test: p.test.into_inner(),
            category,
            requirement: p.requirement,
            why_official_tests_miss: p.why_official_tests_miss,
            checks_base_behaviour: p.checks_base_behaviour,
            budget,
        });
    }
    Ok(ProbeSet {
        dir: dir.to_path_buf(),
        probes,
        retries: raw.retries.map(Spanned::into_inner),
    })
}

impl ProbeSet {
    /// Every file under the probe directory except the manifest, as (relative path, text):
    /// what redaction must keep out of every output. The manifest is metadata meant to be
    /// shown (ids, categories, requirements), so it is not redacted against.
    pub fn sources(&self) -> std::io::Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        collect_sources(&self.dir, &self.dir, &mut out)?;
        out.retain(|(path, _)| path != "probes.toml");
        Ok(out)
    }
}

fn collect_sources(
    root: &Path,
    dir: &Path,
    out: &mut Vec<(String, String)>,
) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect_sources(root, &path, out)?;
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            out.push((rel, text));
        }
    }
    Ok(())
}
