//! The grade report: everything a run found, in one serialisable value, and its renderings
//! (terminal summary, JUnit XML, JSON). Renderers are pure and trust that the report was
//! redacted ([`crate::grade::redact::Redactor::redact_report`]) before they see it.
//!
//! The JSON form is documented field by field in `docs/grade-json.md`; bump
//! [`SCHEMA_VERSION`] on any change that is not a pure addition.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::grading::{Grade, PhaseEvidence};

pub mod github;
mod json;
mod junit;
mod summary;

pub use json::render_json;
pub use junit::render_junit;
pub use summary::render_summary;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub task: TaskRef,
    pub submission: SubmissionRef,
    /// `docker` or `local`.
    pub executor: String,
    /// Guarantees the executor could not give (for example "no network isolation"), so that a
    /// reader knows how far to trust the run.
    pub executor_limits: Vec<String>,
    /// Changed files the guard neutralised, and why.
    pub flags: Vec<GuardFlag>,
    /// Why the change did not apply; when set, no phase ran.
    pub apply_error: Option<String>,
    pub phases: Vec<PhaseReport>,
    pub grade: Grade,
    /// What each probe checks, in words, keyed by the probe's test id; shown for failures
    /// instead of the probe's source.
    pub probe_requirements: BTreeMap<String, String>,
    /// The images the sandboxes ran in, by content id (Docker only): the base image first,
    /// then each environment layer. Empty for the local executor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageRef>,
    /// The sandboxes' run id: every container and network the grade made carries it as the
    /// label `org.infradev.run`, so an operator (or the reaper's log) can tell them apart from
    /// another grade's on the same host. None when nothing ran (the change did not apply).
    #[serde(default)]
    pub run_id: Option<String>,
    /// Whether the grade used what the task's validation.json validated: the probes' digest,
    /// and why it did not (operators see this; `serve`, `run` and `action` refuse such a grade
    /// unless told to allow it). None when nothing was checked (the change did not apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
}

/// What a grade used, against what validation validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// `sha256:…` over the probe files graded (path, length, bytes; `task::probes_digest`).
    pub probes_digest: String,
    /// Why this is not a grade of what was validated; empty when it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unvalidated: Vec<String>,
}

/// One image a grade ran in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    /// Its tag (`infradev/base:…`, `infradev-env/<task>:…`).
    pub tag: String,
    /// Its content id, `sha256:…`.
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRef {
    pub id: String,
    pub repository: String,
    pub pr: u64,
    pub base_commit: String,
    pub reference_commit: String,
}

impl TaskRef {
    /// The task a report is about, as the report names it.
    pub fn of(task: &crate::task::Task) -> TaskRef {
        TaskRef {
            id: task.id.clone(),
            repository: task.repository.clone(),
            pr: task.pr,
            base_commit: task.base_commit.clone(),
            reference_commit: task.reference_commit.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmissionRef {
    /// The submission repository as given on the command line.
    pub repo: String,
    /// The resolved head commit.
    pub head: String,
    pub changed_files: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardFlag {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    pub evidence: PhaseEvidence,
    pub duration_s: f64,
    /// 1 for a phase's first run; 2 and on for the reruns of the tests that failed in it.
    #[serde(default = "first_attempt")]
    pub attempt: u32,
}

fn first_attempt() -> u32 {
    1
}

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;

/// A path the submission named (a changed or flagged file), fit to show anywhere: control
/// characters become U+FFFD, and a leading `:` gets `./` before it so no rendering of it,
/// however extracted, starts a line with a workflow command. At most 300 characters.
pub fn safe_path(path: &str) -> String {
    let mut out: String = path
        .chars()
        .take(300)
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect();
    if out.starts_with(':') {
        out.insert_str(0, "./");
    }
    out
}

#[cfg(test)]
mod safe_path_tests {
    #[test]
    fn submission_paths_carry_no_escapes_or_commands() {
        assert_eq!(super::safe_path("a/b.py"), "a/b.py");
        assert_eq!(super::safe_path("x\u{1b}[31m\n"), "x\u{FFFD}[31m\u{FFFD}");
        assert_eq!(
            super::safe_path("::stop-commands::p"),
            "./::stop-commands::p"
        );
        assert_eq!(super::safe_path(&"a".repeat(400)).len(), 300);
    }
}
