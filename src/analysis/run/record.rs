//! One submission's result in a run: `runs/<id>/submissions/<key>.json`, written atomically
//! (a temporary file renamed into place), so a file that exists is a whole record.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::submissions::{Change, Submission};
use crate::analysis::stats::{Labels, Sample};
use crate::grade::report::Report;
use crate::grading::Verdict;

/// Bump on any change to [`Record`] that is not a pure addition.
pub const RECORD_VERSION: u32 = 1;

/// The change as recorded: a revision, a patch file's path, or an inline diff's digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordedChange {
    Rev(String),
    PatchFile(String),
    /// SHA-256 of the inline diff.
    DiffSha256(String),
}

impl From<&Change> for RecordedChange {
    fn from(c: &Change) -> Self {
        use sha2::Digest;
        match c {
            Change::Rev(r) => RecordedChange::Rev(r.clone()),
            Change::PatchFile(p) => RecordedChange::PatchFile(p.display().to_string()),
            Change::Diff(d) => RecordedChange::DiffSha256(hex::encode(sha2::Sha256::digest(d))),
        }
    }
}

/// How grading one submission ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// A grade report (its verdict may still be `error`: an infra fault inside the grade).
    Graded { report: Box<Report> },
    /// Our side failed before a report existed (git, the file system).
    Infra { error: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub record_version: u32,
    pub key: String,
    pub line: usize,
    pub task: String,
    /// The task's upstream repository (for tables of records without a report).
    pub repository: String,
    pub labels: Labels,
    pub change: RecordedChange,
    pub duration_s: f64,
    pub finished_at: String,
    pub outcome: Outcome,
}

impl Record {
    pub fn new(s: &Submission, repository: &str, duration_s: f64, outcome: Outcome) -> Record {
        Record {
            record_version: RECORD_VERSION,
            key: s.key.clone(),
            line: s.line,
            task: s.task.clone(),
            repository: repository.to_owned(),
            labels: s.labels.clone(),
            change: (&s.change).into(),
            duration_s,
            finished_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            outcome,
        }
    }

    /// The verdict, or `None` when our side failed before a report existed.
    pub fn verdict(&self) -> Option<Verdict> {
        match &self.outcome {
            Outcome::Graded { report } => Some(report.grade.verdict),
            Outcome::Infra { .. } => None,
        }
    }

    /// Done means a verdict of the submission's own; an infra error is graded again on resume.
    pub fn is_done(&self) -> bool {
        self.verdict().is_some_and(|v| v != Verdict::Error)
    }

    /// `resolved`, `unresolved`, `tampered`, `error` (an infra fault in the grade) or `infra`.
    pub fn outcome_name(&self) -> &'static str {
        self.verdict().map_or("infra", Verdict::as_str)
    }

    /// Why the grade is an infra error, when it is one.
    pub fn infra_reason(&self) -> Option<String> {
        match &self.outcome {
            Outcome::Infra { error } => Some(error.clone()),
            Outcome::Graded { report } if report.grade.verdict == Verdict::Error => {
                Some(report.grade.reason.clone())
            }
            Outcome::Graded { .. } => None,
        }
    }

    /// The ids of the tests and probes whose outcome is `flaky`.
    pub fn flaky_tests(&self) -> Vec<String> {
        match &self.outcome {
            Outcome::Graded { report } => report
                .grade
                .tests
                .iter()
                .filter(|t| t.evidence.outcome == crate::grading::Outcome::Flaky)
                .map(|t| t.evidence.id.clone())
                .collect(),
            Outcome::Infra { .. } => Vec::new(),
        }
    }

    pub fn sample(&self) -> Sample {
        match &self.outcome {
            Outcome::Graded { report } => Sample::from_report(report, self.labels.clone()),
            Outcome::Infra { .. } => {
                Sample::infra(&self.task, &self.repository, self.labels.clone())
            }
        }
    }

    pub fn read(path: &Path) -> anyhow::Result<Record> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a run record", path.display()))
    }

    /// Writes `path` atomically: a temporary file in the same folder, synced, renamed.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let json = serde_json::to_vec_pretty(self)?;
        write_atomically(path, &json)
    }
}

/// Writes a file so that it either does not exist or is whole, even if we are killed.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .with_context(|| format!("cannot write {}", tmp.path().display()))?;
    tmp.persist(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
