//! Aggregation: many grades in, the tables a benchmark is read by out (resolved rate per agent,
//! per task and overall; official-passing submissions that the probes reject; failure
//! categories per repository; infra errors apart). Pure: no I/O.
//!
//! One implementation for every reader: the run report of `infradev run`, `infradev stats`
//! over a folder of reports, and the App's statistics. Each reader turns what it has (a grade
//! [`Report`], a stored job) into a [`Sample`] and calls [`aggregate`].
//!
//! Infra errors are never counted against an agent: a sample whose grade ended in `error`
//! (or that could not be graded because of our side) is counted in `infra_errors` and left
//! out of `graded`, the denominator of every rate.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::grade::report::Report;
use crate::grading::{Category, Verdict};

mod inputs;
mod render;
mod series;

pub use inputs::{InputFile, InputJob, Inputs};
pub use render::{Table, render_csv, render_markdown, render_text};
pub use series::{Period, series};

/// Who made a submission: free-form labels given by whoever ran the benchmark.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub struct Labels {
    /// The agent (harness) that wrote the submission.
    pub agent: String,
    /// The model behind the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The account that opened the pull request, or ran the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
}

impl Labels {
    /// The key rows of the per-agent table are grouped by: `agent` or `agent (model)`.
    pub fn agent_key(&self) -> String {
        match &self.model {
            Some(model) => format!("{} ({model})", self.agent),
            None => self.agent.clone(),
        }
    }
}

/// How one sample ended, as far as statistics care.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SampleOutcome {
    Resolved,
    Unresolved,
    /// The results were rewritten inside the sandbox: graded, never resolved.
    Tampered,
    /// Our side failed: not graded, never counted against the agent.
    Infra,
}

/// One grade (or one failed attempt to grade), reduced to what the tables need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub task: String,
    pub repository: String,
    pub labels: Labels,
    pub outcome: SampleOutcome,
    /// Every official test passed (only for graded, untampered samples).
    pub official_passed: bool,
    /// Every official test passed but some probe did not: the case probes exist for.
    pub rejected_by_probes: bool,
    /// The categories of the sample's failures (never `infra`).
    pub categories: BTreeSet<Category>,
    /// Some test or probe failed and then passed on a rerun (only for graded samples): a
    /// flaky result, which never counts as a pass.
    pub flaky: bool,
}

impl Sample {
    /// A finished grade.
    pub fn from_report(report: &Report, labels: Labels) -> Sample {
        let outcome = match report.grade.verdict {
            Verdict::Resolved => SampleOutcome::Resolved,
            Verdict::Unresolved => SampleOutcome::Unresolved,
            Verdict::Tampered => SampleOutcome::Tampered,
            Verdict::Error => SampleOutcome::Infra,
        };
        let graded = matches!(outcome, SampleOutcome::Resolved | SampleOutcome::Unresolved);
        let official_passed = graded
            && report
                .grade
                .tests
                .iter()
                .filter(|t| t.expectation.is_official())
                .all(|t| t.passed());
        let categories = match outcome {
            SampleOutcome::Infra => BTreeSet::new(),
            _ => report
                .grade
                .tests
                .iter()
                .filter_map(|t| t.category)
                .filter(|c| *c != Category::Infra)
                .collect(),
        };
        Sample {
            task: report.task.id.clone(),
            repository: report.task.repository.clone(),
            labels,
            outcome,
            official_passed,
            rejected_by_probes: graded && report.grade.official_passed_but_probes_failed,
            categories,
            flaky: outcome != SampleOutcome::Infra && report.grade.counts.flaky > 0,
        }
    }

    /// A submission our side could not grade (Docker down, a lost runner, a grade that hung).
    pub fn infra(task: &str, repository: &str, labels: Labels) -> Sample {
        Sample {
            task: task.to_owned(),
            repository: repository.to_owned(),
            labels,
            outcome: SampleOutcome::Infra,
            official_passed: false,
            rejected_by_probes: false,
            categories: BTreeSet::new(),
            flaky: false,
        }
    }
}

/// Counts over a set of samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Tally {
    /// Every sample, infra errors included.
    pub submissions: usize,
    /// Samples with a verdict of the submission's own: `submissions - infra_errors`.
    pub graded: usize,
    pub resolved: usize,
    /// Graded and not resolved (tampered included).
    pub unresolved: usize,
    pub tampered: usize,
    /// Not graded because of our side; never counted against the agent.
    pub infra_errors: usize,
    /// `resolved / graded`; absent when nothing was graded.
    pub resolved_rate: Option<f64>,
    /// Graded samples that passed every official test.
    pub official_passed: usize,
    /// Of those, the ones the probes rejected.
    pub rejected_by_probes: usize,
    /// `rejected_by_probes / official_passed`; absent when no sample passed the official tests.
    pub rejected_by_probes_share: Option<f64>,
    /// Graded samples with a flaky result (a test or probe that failed, then passed on a
    /// rerun); never resolved, so they are among `unresolved`.
    #[serde(default)]
    pub flaky: usize,
}

impl Tally {
    fn add(&mut self, s: &Sample) {
        self.submissions += 1;
        match s.outcome {
            SampleOutcome::Infra => self.infra_errors += 1,
            SampleOutcome::Resolved => self.resolved += 1,
            SampleOutcome::Unresolved => self.unresolved += 1,
            SampleOutcome::Tampered => {
                self.unresolved += 1;
                self.tampered += 1;
            }
        }
        self.graded = self.submissions - self.infra_errors;
        self.official_passed += usize::from(s.official_passed);
        self.rejected_by_probes += usize::from(s.rejected_by_probes);
        self.flaky += usize::from(s.flaky);
        self.resolved_rate = ratio(self.resolved, self.graded);
        self.rejected_by_probes_share = ratio(self.rejected_by_probes, self.official_passed);
    }
}

fn ratio(num: usize, den: usize) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

/// One row of a grouped table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Row {
    /// The group: an agent key, a task id or a repository.
    pub key: String,
    #[serde(flatten)]
    pub tally: Tally,
}

/// Failure categories of one repository's graded samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CategoryRow {
    pub repository: String,
    /// Graded samples of this repository.
    pub graded: usize,
    /// Graded samples that were not resolved.
    pub unresolved: usize,
    /// Per category, how many graded samples had at least one failure of it. Categories no
    /// sample failed in are absent; `infra` never appears.
    pub categories: BTreeMap<String, usize>,
}

/// Every table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Stats {
    pub overall: Tally,
    /// Per agent (`agent`, or `agent (model)` when a model is named), by key.
    pub by_agent: Vec<Row>,
    /// Per task, by task id.
    pub by_task: Vec<Row>,
    /// Per repository, by name.
    pub by_repository: Vec<Row>,
    /// Failure categories per repository.
    pub categories: Vec<CategoryRow>,
}

/// Aggregates samples into every table. Rows are sorted by key, so equal inputs give equal
/// output whatever their order.
pub fn aggregate(samples: &[Sample]) -> Stats {
    let mut overall = Tally::default();
    let mut agents: BTreeMap<String, Tally> = BTreeMap::new();
    let mut tasks: BTreeMap<String, Tally> = BTreeMap::new();
    let mut repos: BTreeMap<String, Tally> = BTreeMap::new();
    for s in samples {
        overall.add(s);
        agents.entry(s.labels.agent_key()).or_default().add(s);
        tasks.entry(s.task.clone()).or_default().add(s);
        repos.entry(s.repository.clone()).or_default().add(s);
    }
    let rows = |m: BTreeMap<String, Tally>| {
        m.into_iter()
            .map(|(key, tally)| Row { key, tally })
            .collect()
    };
    Stats {
        overall,
        by_agent: rows(agents),
        by_task: rows(tasks),
        by_repository: rows(repos),
        categories: category_rows(samples, |s| s.repository.clone()),
    }
}

/// Failure categories grouped by `key` (a repository, an agent key), sorted by key. The
/// `repository` field of each row holds the key.
pub fn category_rows(samples: &[Sample], key: impl Fn(&Sample) -> String) -> Vec<CategoryRow> {
    let mut categories: BTreeMap<String, CategoryRow> = BTreeMap::new();
    for s in samples {
        let k = key(s);
        let row = categories.entry(k.clone()).or_insert_with(|| CategoryRow {
            repository: k,
            graded: 0,
            unresolved: 0,
            categories: BTreeMap::new(),
        });
        if s.outcome == SampleOutcome::Infra {
            continue;
        }
        row.graded += 1;
        row.unresolved += usize::from(s.outcome != SampleOutcome::Resolved);
        for c in &s.categories {
            *row.categories.entry(c.as_str().to_owned()).or_default() += 1;
        }
    }
    categories.into_values().collect()
}

/// Failure categories per agent (`agent` or `agent (model)`); the rows' `repository` field
/// holds the agent key.
pub fn categories_by_agent(samples: &[Sample]) -> Vec<CategoryRow> {
    category_rows(samples, |s| s.labels.agent_key())
}

#[cfg(test)]
mod tests;
