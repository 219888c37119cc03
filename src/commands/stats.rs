//! `infradev stats`: the run report's tables over a folder of JSON reports, or over the grades
//! the App stored (`--store <url>`, or `--config` for the store `infradev serve` uses).
//!
//! From the store, every finished job counts once: its report's sample labelled with the PR's
//! author (the agent account), or an infra error when it could not be graded; the repository
//! is the one the PR was opened against (`app::grades::sample_of`).
//!
//! From a folder, it reads, recursively, every `*.json` below the folder: run records
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
#[command(group(clap::ArgGroup::new("source").required(true).args(["reports", "store", "config"])))]
pub struct StatsArgs {
    /// A folder of JSON reports: run folders (`runs/` or `runs/<id>`), or `infradev grade
    /// --json` outputs.
    #[arg(long)]
    pub reports: Option<PathBuf>,
    /// The App's store: `sqlite://PATH` or `postgres://…`.
    #[arg(long)]
    pub store: Option<String>,
    /// The App's configuration (`infradev serve --config`): its store.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// The table written as CSV.
    #[arg(long, value_enum, default_value_t = TableArg::Agents)]
    pub table: TableArg,
    /// The agent label of plain grade reports, which carry none.
    #[arg(long, default_value = "unlabelled")]
    pub agent: String,
}

fn usage(msg: String) -> CliError {
    CliError {
        code: exit::USAGE_OR_TASK,
        error: anyhow::anyhow!(msg),
    }
}

pub async fn stats_command(args: StatsArgs) -> Result<u8, CliError> {
    let samples = match (&args.reports, &args.store, &args.config) {
        (Some(folder), _, _) => folder_samples(folder, &args.agent)?,
        (None, Some(url), _) => store_samples(url).await?,
        (None, None, Some(config)) => {
            let config = crate::config::ServerConfig::load(config).map_err(|error| CliError {
                code: exit::USAGE_OR_TASK,
                error,
            })?;
            store_samples(&config.store.url).await?
        }
        (None, None, None) => return Err(usage("give --reports, --store or --config".into())),
    };
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

/// Every finished grade in the App's store. A store that cannot be opened is ours (exit 3);
/// one without grades is a usage error.
async fn store_samples(url: &str) -> Result<Vec<Sample>, CliError> {
    let store = crate::store::Store::open(url).await.map_err(|e| CliError {
        code: exit::INFRA,
        error: anyhow::anyhow!("cannot open the store {url}: {e}"),
    })?;
    let samples = crate::app::grades::samples(&store)
        .await
        .map_err(|error| CliError {
            code: exit::INFRA,
            error,
        })?;
    store.close().await;
    if samples.is_empty() {
        return Err(usage(format!("no finished grades in the store {url}")));
    }
    Ok(samples.into_iter().map(|(_, s)| s).collect())
}

fn folder_samples(folder: &Path, agent: &str) -> Result<Vec<Sample>, CliError> {
    if !folder.is_dir() {
        return Err(usage(format!("{} is not a folder", folder.display())));
    }
    let mut files = Vec::new();
    walk(folder, &mut files)
        .map_err(|e| usage(format!("cannot read {}: {e}", folder.display())))?;
    files.sort();
    let mut samples = Vec::new();
    for file in &files {
        match read_sample(file, agent) {
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
            folder.display()
        )));
    }
    Ok(samples)
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
