//! `[[reject]]` in task.toml: wrong patches that `tasks validate` must see rejected. Each is
//! the graded reference (with its follow-ups) with one mutation of runners/tasks/mutate.py
//! applied at one line (a collective posted twice, a guard dropped, ...), and names the probes
//! that must fail on it: proof, renewed by every validation, that those probes catch that
//! class of fault. Written as a mutation, not as a diff, so no upstream code is committed.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use super::error::ManifestError;
use super::probes::ProbeSet;

/// A wrong patch the probes must reject.
#[derive(Debug, Clone, PartialEq)]
pub struct Reject {
    /// The file, relative to the repository root.
    pub path: String,
    /// The line of the graded reference the mutation is at.
    pub line: u32,
    /// A mutation operator of runners/tasks/mutate.py (`collective_duplicated`, ...).
    pub operator: String,
    /// Probe ids (probes.toml) that must fail on it.
    pub probes: Vec<String>,
    /// What the wrong patch does, in words.
    pub why: String,
}

impl Reject {
    /// How validation names the run that grades it.
    pub fn run_name(&self) -> String {
        format!("reject {} at {}:{}", self.operator, self.path, self.line)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReject {
    path: Spanned<String>,
    line: Spanned<u32>,
    operator: Spanned<String>,
    probes: Spanned<Vec<String>>,
    why: Spanned<String>,
}

/// Checks each `[[reject]]`: a relative `.py` path inside the repository, a line from 1, an
/// operator name, at least one probe, each a probe of the task, and a reason.
pub(super) fn rejects(
    raw: Vec<RawReject>,
    probes: &ProbeSet,
    err: &dyn Fn(Range<usize>, &str, String) -> ManifestError,
) -> Result<Vec<Reject>, ManifestError> {
    let mut out = Vec::new();
    for r in raw {
        let path = r.path.get_ref();
        let inside = !path.starts_with('/')
            && !path
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..");
        if !inside || !path.ends_with(".py") {
            return Err(err(
                r.path.span(),
                "reject.path",
                format!("`{path}`: a Python file's path relative to the repository root"),
            ));
        }
        if *r.line.get_ref() == 0 {
            return Err(err(
                r.line.span(),
                "reject.line",
                "lines count from 1".into(),
            ));
        }
        let operator = r.operator.get_ref();
        if !operator.starts_with(|c: char| c.is_ascii_lowercase())
            || !operator
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(err(
                r.operator.span(),
                "reject.operator",
                format!("`{operator}`: an operator of runners/tasks/mutate.py (snake_case)"),
            ));
        }
        if r.probes.get_ref().is_empty() {
            return Err(err(
                r.probes.span(),
                "reject.probes",
                "name the probes that must fail on this patch".into(),
            ));
        }
        if let Some(unknown) = r
            .probes
            .get_ref()
            .iter()
            .find(|id| !probes.probes.iter().any(|p| &p.id == *id))
        {
            return Err(err(
                r.probes.span(),
                "reject.probes",
                format!("`{unknown}` is not a probe of this task (probes.toml)"),
            ));
        }
        if r.why.get_ref().trim().is_empty() {
            return Err(err(
                r.why.span(),
                "reject.why",
                "say what the wrong patch does".into(),
            ));
        }
        out.push(Reject {
            path: r.path.into_inner(),
            line: r.line.into_inner(),
            operator: r.operator.into_inner(),
            probes: r.probes.into_inner(),
            why: r.why.into_inner(),
        });
    }
    Ok(out)
}
