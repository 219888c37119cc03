//! Logs: the one owner of tracing-subscriber. `--log-format text` (the default) or `json`
//! (one JSON object per line, for log collectors); `INFRADEV_LOG` filters (default `warn`;
//! `info` for `serve`).
//!
//! Colour only on a terminal: when standard error is a pipe or a file, no ANSI codes are
//! written in either format. One event is one line: a fault is logged once, where it is
//! handled, with its error chain on that line (`{e:#}`), never as a multi-line dump.

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured on a terminal).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (with `message`).
    Json,
}

/// Installs the global subscriber, writing to standard error; `default_level` applies when
/// `INFRADEV_LOG` is not set.
pub fn init(format: LogFormat, default_level: &str) {
    crate::grade::terminal::set_json_logs(format == LogFormat::Json);
    // octocrab logs each failed request itself; our callers log the same fault with its
    // context, so by default only theirs is written (one line per fault).
    let filter = EnvFilter::try_from_env("INFRADEV_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("{default_level},octocrab=off")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
}
