//! `infradev stats`: the run report's tables over the grades of a source (`source.rs`: a
//! folder of JSON reports, or the grades the App stored).

use std::io::Write;

use super::source::{SourceArgs, load};
use crate::analysis::stats::{Table, aggregate, render_csv, render_text};
use crate::cli::common::CliError;
use crate::cli::exit;

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
    #[command(flatten)]
    pub source: SourceArgs,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// The table written as CSV.
    #[arg(long, value_enum, default_value_t = TableArg::Agents)]
    pub table: TableArg,
}

pub async fn stats_command(args: StatsArgs) -> Result<u8, CliError> {
    let samples = load(&args.source).await?.samples;
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
