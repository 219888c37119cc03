//! The run report: `runs/<id>/report.json` (schema: docs/run-report.schema.json, generated
//! from these types), `report.md` and the summary printed at the end. Building and rendering
//! are pure; the tables come from [`crate::analysis::stats`].

use std::fmt::Write;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::record::Record;
use crate::analysis::stats::{Stats, aggregate, render_markdown, render_text};

/// Bump on any change to [`RunReport`] that is not a pure addition.
pub const RUN_REPORT_VERSION: u32 = 1;

/// Where a run ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Environment {
    /// `docker` or `local`.
    pub executor: String,
    pub os: String,
    pub arch: String,
    /// CPUs available to the grader.
    pub cpus: usize,
    /// Grades run at the same time (`--jobs`).
    pub jobs: usize,
}

/// One submission's line in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubmissionRow {
    /// Its record: `submissions/<key>.json`.
    pub key: String,
    /// Its line in the submissions file.
    pub line: usize,
    pub task: String,
    /// `agent` or `agent (model)`.
    pub agent: String,
    /// `resolved`, `unresolved`, `tampered`, `error` (an infra fault inside the grade) or
    /// `infra` (our side failed before a grade existed).
    pub outcome: String,
    /// Every official test passed but probes did not.
    pub rejected_by_probes: bool,
    /// Categories of the submission's failures (never `infra`).
    pub categories: Vec<String>,
    /// Tests and probes that failed and then passed on a rerun (never a pass; the task's
    /// entries in flakes.json list them all).
    #[serde(default)]
    pub flaky: Vec<String>,
    pub duration_s: f64,
}

/// A submission that could not be graded because of our side; never counted against its agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InfraError {
    pub key: String,
    pub line: usize,
    pub task: String,
    pub agent: String,
    pub reason: String,
}

/// `runs/<id>/report.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunReport {
    pub schema_version: u32,
    pub run_id: String,
    /// The InfraDev version that wrote this report.
    pub infradev_version: String,
    pub environment: Environment,
    /// The submissions file, as given.
    pub submissions_file: String,
    /// Submissions in the file.
    pub submissions: usize,
    /// Graded by this invocation (the others were done before a `--resume`).
    pub graded_now: usize,
    /// Wall-clock seconds of this invocation.
    pub wall_s: f64,
    pub finished_at: String,
    /// Every table: overall, per agent, per task, per repository, failure categories.
    pub stats: Stats,
    /// Submissions our side could not grade (graded again by `--resume`).
    pub infra_errors: Vec<InfraError>,
    pub results: Vec<SubmissionRow>,
}

/// What the run knows besides the records.
#[derive(Debug, Clone)]
pub struct RunMeta {
    pub run_id: String,
    pub environment: Environment,
    pub submissions_file: String,
    pub graded_now: usize,
    pub wall_s: f64,
    pub finished_at: String,
}

/// The report of a run from its records, in submissions-file order.
pub fn build(meta: RunMeta, records: &[Record]) -> RunReport {
    let samples: Vec<_> = records.iter().map(Record::sample).collect();
    let results = records
        .iter()
        .zip(&samples)
        .map(|(r, s)| SubmissionRow {
            key: r.key.clone(),
            line: r.line,
            task: r.task.clone(),
            agent: r.labels.agent_key(),
            outcome: r.outcome_name().to_owned(),
            rejected_by_probes: s.rejected_by_probes,
            categories: s.categories.iter().map(|c| c.as_str().to_owned()).collect(),
            flaky: r.flaky_tests(),
            duration_s: r.duration_s,
        })
        .collect();
    let infra_errors = records
        .iter()
        .filter_map(|r| {
            r.infra_reason().map(|reason| InfraError {
                key: r.key.clone(),
                line: r.line,
                task: r.task.clone(),
                agent: r.labels.agent_key(),
                reason,
            })
        })
        .collect();
    RunReport {
        schema_version: RUN_REPORT_VERSION,
        run_id: meta.run_id,
        infradev_version: env!("CARGO_PKG_VERSION").to_owned(),
        environment: meta.environment,
        submissions_file: meta.submissions_file,
        submissions: records.len(),
        graded_now: meta.graded_now,
        wall_s: meta.wall_s,
        finished_at: meta.finished_at,
        stats: aggregate(&samples),
        infra_errors,
        results,
    }
}

fn clean(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect()
}

fn md_cell(text: &str) -> String {
    clean(text).replace('\\', "\\\\").replace('|', "\\|")
}

fn environment_line(r: &RunReport) -> String {
    let e = &r.environment;
    format!(
        "InfraDev {} · executor {} · {}/{} · {} CPU(s) · {} job(s)",
        r.infradev_version, e.executor, e.os, e.arch, e.cpus, e.jobs
    )
}

/// `report.md`.
pub fn render_report_markdown(r: &RunReport) -> String {
    let mut out = format!(
        "# Run `{}`\n\n{}; {} submission(s) from `{}`, {} graded by the last invocation in {:.0} s (finished {}).\n\n",
        md_cell(&r.run_id),
        environment_line(r),
        r.submissions,
        md_cell(&r.submissions_file),
        r.graded_now,
        r.wall_s,
        r.finished_at
    );
    out.push_str(&render_markdown(&r.stats));
    out.push_str("\n## Infra errors\n\nNot counted against any agent; `infradev run --resume` grades them again.\n\n");
    if r.infra_errors.is_empty() {
        out.push_str("None.\n");
    } else {
        out.push_str("| submission | line | task | agent | reason |\n|---|---:|---|---|---|\n");
        for e in &r.infra_errors {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                md_cell(&e.key),
                e.line,
                md_cell(&e.task),
                md_cell(&e.agent),
                md_cell(&e.reason)
            );
        }
    }
    out.push_str("\n## Submissions\n\n| line | submission | task | agent | outcome | categories | seconds |\n|---:|---|---|---|---|---|---:|\n");
    for s in &r.results {
        let mut outcome = if s.rejected_by_probes {
            format!("{} (rejected by probes)", s.outcome)
        } else {
            s.outcome.clone()
        };
        if !s.flaky.is_empty() {
            let _ = write!(outcome, ", {} flaky", s.flaky.len());
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.1} |",
            s.line,
            md_cell(&s.key),
            md_cell(&s.task),
            md_cell(&s.agent),
            outcome,
            s.categories.join(", "),
            s.duration_s
        );
    }
    out
}

/// The summary printed at the end of a run.
pub fn render_report_summary(r: &RunReport, dir: &str) -> String {
    let mut out = format!("run {}: {}\n", clean(&r.run_id), environment_line(r));
    out.push_str(&render_text(&r.stats));
    for e in &r.infra_errors {
        let _ = writeln!(
            out,
            "infra error (not counted): line {} {} [{}]: {}",
            e.line,
            clean(&e.key),
            clean(&e.agent),
            clean(&e.reason)
        );
    }
    let _ = writeln!(out, "\nreport: {dir}/report.json, {dir}/report.md");
    out
}

/// The JSON Schema of report.json, as published in docs/run-report.schema.json.
pub fn json_schema() -> String {
    let schema = schemars::schema_for!(RunReport);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::run::record::{Outcome, RECORD_VERSION, RecordedChange};
    use crate::analysis::stats::Labels;
    use crate::grade::report::fixtures;

    fn record(line: usize, agent: &str, outcome: Outcome) -> Record {
        Record {
            record_version: RECORD_VERSION,
            key: format!("s{line}"),
            line,
            task: "shard-adam-state".into(),
            repository: "example/opt".into(),
            labels: Labels {
                agent: agent.into(),
                model: None,
                account: None,
            },
            change: RecordedChange::Rev("main".into()),
            duration_s: 10.0 + line as f64,
            finished_at: "2026-12-02T06:00:00Z".into(),
            outcome,
        }
    }

    fn graded(r: crate::grade::report::Report) -> Outcome {
        Outcome::Graded {
            report: Box::new(r),
        }
    }

    fn sample_report() -> RunReport {
        let records = [
            record(1, "alpha", graded(fixtures::resolved())),
            record(2, "alpha", graded(fixtures::probes_reject())),
            record(3, "beta", graded(fixtures::build_failure())),
            record(4, "beta", graded(fixtures::infra_error())),
            record(
                5,
                "beta",
                Outcome::Infra {
                    error: "cannot clone".into(),
                },
            ),
        ];
        build(
            RunMeta {
                run_id: "bench-1".into(),
                environment: Environment {
                    executor: "docker".into(),
                    os: "linux".into(),
                    arch: "x86_64".into(),
                    cpus: 2,
                    jobs: 2,
                },
                submissions_file: "subs.jsonl".into(),
                graded_now: 5,
                wall_s: 42.0,
                finished_at: "2026-12-02T06:01:00Z".into(),
            },
            &records,
        )
    }

    #[test]
    fn infra_errors_are_listed_apart_and_not_counted() {
        let r = sample_report();
        assert_eq!(r.stats.overall.graded, 3);
        assert_eq!(r.stats.overall.infra_errors, 2);
        let beta = r.stats.by_agent.iter().find(|a| a.key == "beta").unwrap();
        assert_eq!((beta.tally.graded, beta.tally.resolved), (1, 0));
        let lines: Vec<usize> = r.infra_errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, [4, 5]);
        let outcomes: Vec<&str> = r.results.iter().map(|s| s.outcome.as_str()).collect();
        assert_eq!(
            outcomes,
            ["resolved", "unresolved", "unresolved", "error", "infra"]
        );
    }

    #[test]
    fn renderings_snapshot() {
        let r = sample_report();
        let mut r = r;
        r.infradev_version = "X.Y.Z".into();
        insta::assert_snapshot!("run_report_md", render_report_markdown(&r));
        insta::assert_snapshot!(
            "run_report_summary",
            render_report_summary(&r, "runs/bench-1")
        );
    }

    /// docs/run-report.schema.json is generated from these types; this fails when they drift.
    /// Regenerate with `INFRADEV_BLESS=1 cargo test --lib run::report`.
    #[test]
    fn published_schema_matches_the_types() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/run-report.schema.json");
        let generated = json_schema();
        if std::env::var("INFRADEV_BLESS").is_ok_and(|v| v == "1") {
            std::fs::write(path, &generated).unwrap();
        }
        let published = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            published == generated,
            "docs/run-report.schema.json is out of date: INFRADEV_BLESS=1 cargo test --lib run::report"
        );
        // And a real report validates against it.
        let schema: serde_json::Value = serde_json::from_str(&published).unwrap();
        let report = serde_json::to_value(sample_report()).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&report)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{errors:?}");
    }
}
