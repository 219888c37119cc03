//! `infradev stats`: the run report's tables over a folder of JSON reports.
//!
//! It reads, recursively, every `*.json` below the folder: run records
//! (`runs/<id>/submissions/*.json`, labelled by their submissions file) and plain grade
//! reports (`infradev grade --json`, labelled with `--agent`). Run reports (`report.json`) are
//! summaries of records already counted and are left out; any other file is named on standard
//! error as skipped.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::CliError;
use crate::exit;
use crate::report::Report;
use crate::run::record::Record;
use crate::stats::{Labels, Sample, Table, aggregate, render_csv, render_text};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables for a terminal.
    Text,
    /// One table (`--table`) as CSV.
    Csv,
    /// Every table as JSON (the `stats` object of a run report).
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TableArg {
    Overall,
    Agents,
    Tasks,
    Repositories,
    Categories,
}

/// Summarise grades: resolved rates, probe rejections and failure categories.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// A folder of JSON reports: run folders (`runs/` or `runs/<id>`), or `infradev grade
    /// --json` outputs.
    #[arg(long)]
    pub reports: PathBuf,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// The table written as CSV.
    #[arg(long, value_enum, default_value_t = TableArg::Agents)]
    pub table: TableArg,
    /// The agent label of plain grade reports, which carry none.
    #[arg(long, default_value = "unlabelled")]
    pub agent: String,
}

pub fn stats_command(args: StatsArgs) -> Result<u8, CliError> {
    let usage = |msg: String| CliError {
        code: exit::USAGE_OR_TASK,
        error: anyhow::anyhow!(msg),
    };
    if !args.reports.is_dir() {
        return Err(usage(format!("{} is not a folder", args.reports.display())));
    }
    let mut files = Vec::new();
    walk(&args.reports, &mut files)
        .map_err(|e| usage(format!("cannot read {}: {e}", args.reports.display())))?;
    files.sort();
    let mut samples = Vec::new();
    for file in &files {
        match read_sample(file, &args.agent) {
            Some(Some(s)) => samples.push(s),
            Some(None) => {}
            None => eprintln!(
                "skipped {}: not a grade report or run record",
                file.display()
            ),
        }
    }
    if samples.is_empty() {
        return Err(usage(format!(
            "no grade reports or run records below {}",
            args.reports.display()
        )));
    }
    let stats = aggregate(&samples);
    let text = match args.format {
        Format::Text => render_text(&stats),
        Format::Json => serde_json::to_string_pretty(&stats).unwrap_or_default() + "\n",
        Format::Csv => render_csv(
            &stats,
            match args.table {
                TableArg::Overall => Table::Overall,
                TableArg::Agents => Table::Agents,
                TableArg::Tasks => Table::Tasks,
                TableArg::Repositories => Table::Repositories,
                TableArg::Categories => Table::Categories,
            },
        ),
    };
    let _ = std::io::stdout().write_all(text.as_bytes());
    Ok(exit::RESOLVED)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            walk(&path, out)?;
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
    Ok(())
}

/// `Some(Some(sample))` for a record or a grade report, `Some(None)` for a run report (already
/// counted through its records), `None` for anything else.
fn read_sample(path: &Path, agent: &str) -> Option<Option<Sample>> {
    let text = std::fs::read_to_string(path).ok()?;
    if let Ok(record) = serde_json::from_str::<Record>(&text) {
        return Some(Some(record.sample()));
    }
    if let Ok(report) = serde_json::from_str::<Report>(&text) {
        let labels = Labels {
            agent: agent.to_owned(),
            model: None,
            account: None,
        };
        return Some(Some(Sample::from_report(&report, labels)));
    }
    serde_json::from_str::<crate::run::report::RunReport>(&text)
        .ok()
        .map(|_| None)
}
