//! `infradev tasks lint`: every upstream symbol a task's probes use must be named in its
//! prompt.md, so that the agent is told every interface it is graded on.
//!
//! The symbols come from the syntax trees of every Python file in the task's probe directory
//! (helper modules too), read by `runners/tasks/probe_symbols.py` with Python's own `ast`
//! module (the probes are never imported or run). The check itself is
//! pure: [`unnamed_symbols`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::task::Task;

/// One use of an upstream symbol in a probe.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SymbolUse {
    pub file: String,
    pub line: u32,
    pub symbol: String,
    /// `module`, `name`, `attribute` or `keyword`.
    pub kind: String,
}

#[derive(Deserialize)]
struct Extracted {
    symbols: Vec<SymbolUse>,
    errors: Vec<String>,
}

/// What lint found for one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LintReport {
    pub task: String,
    pub prompt: PathBuf,
    /// Distinct symbols checked.
    pub checked: usize,
    /// Uses whose symbol the prompt does not name (first use of each symbol).
    pub unnamed: Vec<SymbolUse>,
    /// Probe files that could not be read.
    pub errors: Vec<String>,
}

impl LintReport {
    /// No unnamed symbol, no unreadable file, and at least one symbol seen: probes that reach
    /// the submission in a way the extractor cannot follow would otherwise pass vacuously.
    pub fn ok(&self) -> bool {
        self.unnamed.is_empty() && self.errors.is_empty() && !self.vacuous()
    }

    /// The probes use no upstream symbol the extractor can see.
    pub fn vacuous(&self) -> bool {
        self.checked == 0
    }
}

/// Lints one task. `python` runs the extractor; `runners` is the repository's runners/.
pub fn lint_task(task: &Task, runners: &Path, python: &Path) -> anyhow::Result<LintReport> {
    let prompt_path = task.prompt_path();
    let prompt = std::fs::read_to_string(&prompt_path)
        .with_context(|| format!("cannot read {}", prompt_path.display()))?;
    // Every Python file the judge receives, helpers (`_model.py`) included: a symbol reached
    // only in a helper is as much an interface as one reached in a test file.
    let files: Vec<PathBuf> = task
        .probes
        .sources()
        .with_context(|| format!("cannot read {}", task.probes.dir.display()))?
        .into_iter()
        .filter(|(path, _)| path.ends_with(".py"))
        .map(|(path, _)| task.probes.dir.join(path))
        .collect();
    if task.upstream.packages.is_empty() {
        bail!(
            "{}: upstream.packages is empty, so lint cannot tell upstream names from others",
            task.manifest_path().display()
        );
    }
    let script = runners.join("tasks/probe_symbols.py");
    let mut cmd = Command::new(python);
    cmd.arg(&script);
    for p in &task.upstream.packages {
        cmd.args(["--package", p]);
    }
    cmd.args(&files);
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {} {}", python.display(), script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let extracted: Extracted = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{} printed something other than JSON", script.display()))?;
    let root = task.probes.dir.display().to_string();
    let relative = |s: SymbolUse| SymbolUse {
        file: s
            .file
            .strip_prefix(&root)
            .map(|f| format!("probes/{}{f}", task.id))
            .unwrap_or(s.file),
        ..s
    };
    let symbols: Vec<SymbolUse> = extracted.symbols.into_iter().map(relative).collect();
    let checked = symbols
        .iter()
        .map(|s| s.symbol.as_str())
        .collect::<BTreeSet<_>>()
        .len();
    Ok(LintReport {
        task: task.id.clone(),
        prompt: prompt_path,
        checked,
        unnamed: unnamed_symbols(&prompt, &symbols),
        errors: extracted.errors,
    })
}

/// The uses whose symbol `prompt` does not name, one per symbol, in order of first use.
/// A name counts as named when it appears as a whole word; a module when its dotted path or
/// its file path (`a/b/c.py`) appears. Dunder names (`__init__`) are Python's, not upstream's.
pub fn unnamed_symbols(prompt: &str, uses: &[SymbolUse]) -> Vec<SymbolUse> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for u in uses {
        if u.symbol.starts_with("__") && u.symbol.ends_with("__") {
            continue;
        }
        if !seen.insert(u.symbol.clone()) {
            continue;
        }
        let named = if u.kind == "module" {
            contains_word(prompt, &u.symbol)
                || prompt.contains(&format!("{}.py", u.symbol.replace('.', "/")))
                || prompt.contains(&format!("{}/", u.symbol.replace('.', "/")))
        } else {
            contains_word(prompt, &u.symbol)
        };
        if !named {
            out.push(u.clone());
        }
    }
    out
}

/// `needle` occurs in `hay` with no identifier character on either side.
fn contains_word(hay: &str, needle: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    hay.match_indices(needle).any(|(i, _)| {
        let before = hay[..i].chars().next_back();
        let after = hay[i + needle.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uses(list: &[(&str, &str)]) -> Vec<SymbolUse> {
        list.iter()
            .enumerate()
            .map(|(i, (kind, symbol))| SymbolUse {
                file: "probes/t/test_a.py".into(),
                line: i as u32 + 1,
                symbol: (*symbol).into(),
                kind: (*kind).into(),
            })
            .collect()
    }

    #[test]
    fn names_must_appear_as_whole_words() {
        let prompt = "Add `compute_grpo_vectorized_outcome_advantage(scores, index)` to \
                      `verl/trainer/ppo/core_algos.py`; `verl.utils` gains `group_mean_std`.";
        let table = [
            (("name", "compute_grpo_vectorized_outcome_advantage"), true),
            (("keyword", "index"), true),
            (("keyword", "scores"), true),
            // A prefix of a named word is not named.
            (("name", "compute_grpo"), false),
            (("name", "group_mean"), false),
            (("module", "verl.trainer.ppo.core_algos"), true),
            (("module", "verl.utils"), true),
            (("module", "verl.utils.groupwise"), false),
            (("attribute", "__init__"), true),
            (("keyword", "epsilon"), false),
        ];
        for ((kind, symbol), named) in table {
            let found = unnamed_symbols(prompt, &uses(&[(kind, symbol)]));
            assert_eq!(found.is_empty(), named, "{kind} {symbol}");
        }
    }

    #[test]
    fn each_symbol_is_reported_once_at_its_first_use() {
        let found = unnamed_symbols(
            "nothing",
            &uses(&[("name", "a"), ("attribute", "a"), ("keyword", "b")]),
        );
        assert_eq!(
            found
                .iter()
                .map(|u| (u.symbol.as_str(), u.line))
                .collect::<Vec<_>>(),
            vec![("a", 1), ("b", 3)]
        );
    }
}
