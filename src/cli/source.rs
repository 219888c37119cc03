//! Where the grades behind statistics come from, for every command that reads them
//! (`infradev stats`, `infradev skill export`): one set of arguments and one loader, so a new
//! source (the App's store) is added here and nowhere else.
//!
//! `--reports DIR` reads, recursively, every `*.json` below the folder: run records
//! (`runs/<id>/submissions/*.json`, labelled by their submissions file) and plain grade
//! reports (`infradev grade --json`, labelled with `--agent`). Run reports (`report.json`) are
//! summaries of records already counted and are left out; any other file is named on standard
//! error as skipped.
//!
//! `--store URL` (or `--config FILE`, for the store `infradev serve` uses) reads the grades the
//! App stored: every finished job once, labelled with the PR's author (the agent account), or
//! an infra error when it could not be graded; the repository is the one the PR was opened
//! against.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::analysis::run::record::Record;
use crate::analysis::stats::{InputFile, InputJob, Inputs, Labels, Sample};
use crate::cli::common::CliError;
use crate::cli::exit;
use crate::grade::report::Report;

/// Where to read grades from: one of `--reports`, `--store`, `--config`.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["reports", "store", "config"])))]
pub struct SourceArgs {
    /// A folder of JSON reports: run folders (`runs/` or `runs/<id>`), or `infradev grade
    /// --json` outputs.
    #[arg(long)]
    pub reports: Option<PathBuf>,
    /// The agent label of plain grade reports, which carry none.
    #[arg(long, default_value = "unlabelled")]
    pub agent: String,
    /// The App's store: `sqlite://PATH` or `postgres://…`.
    #[arg(long)]
    pub store: Option<String>,
    /// The App's configuration (`infradev serve --config`): its store.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// The samples read, and what they were read from.
#[derive(Debug)]
pub struct Loaded {
    pub samples: Vec<Sample>,
    pub inputs: Inputs,
}

/// Reads every grade of the source. No grade at all is a usage error: statistics of nothing
/// would only mislead.
pub async fn load(args: &SourceArgs) -> Result<Loaded, CliError> {
    match (&args.reports, &args.store, &args.config) {
        (Some(folder), _, _) => load_reports(folder, &args.agent),
        (None, Some(url), _) => load_store(url).await,
        (None, None, Some(config)) => {
            let config =
                crate::service::config::ServerConfig::load(config).map_err(|error| CliError {
                    code: exit::USAGE_OR_TASK,
                    error,
                })?;
            load_store(&config.store.url).await
        }
        (None, None, None) => Err(CliError {
            code: exit::USAGE_OR_TASK,
            error: anyhow::anyhow!("give --reports, --store or --config"),
        }),
    }
}

/// Every finished grade in the App's store: one sample per finished job, labelled with the
/// PR's author (`app::grades::sample_of`). A store that cannot be opened or read is ours
/// (exit 3); one without grades is a usage error.
async fn load_store(url: &str) -> Result<Loaded, CliError> {
    let shown = crate::service::store::redacted_url(url);
    let infra = |error: anyhow::Error| CliError {
        code: exit::INFRA,
        error,
    };
    let store = crate::service::store::Store::open(url)
        .await
        .map_err(|e| infra(anyhow::anyhow!("cannot open the store {shown}: {e}")))?;
    let graded = crate::service::app::grades::sourced_samples(&store).await;
    store.close().await;
    let graded = graded.map_err(infra)?;
    if graded.is_empty() {
        return Err(CliError {
            code: exit::USAGE_OR_TASK,
            error: anyhow::anyhow!("no finished grades in the store {shown}"),
        });
    }
    let jobs = graded
        .iter()
        .map(|(id, sha256, _)| InputJob {
            id: *id,
            sha256: sha256.clone(),
        })
        .collect();
    Ok(Loaded {
        samples: graded.into_iter().map(|(_, _, s)| s).collect(),
        inputs: Inputs::Store { store: shown, jobs },
    })
}

fn load_reports(folder: &Path, agent: &str) -> Result<Loaded, CliError> {
    let usage = |msg: String| CliError {
        code: exit::USAGE_OR_TASK,
        error: anyhow::anyhow!(msg),
    };
    if !folder.is_dir() {
        return Err(usage(format!("{} is not a folder", folder.display())));
    }
    let mut paths = Vec::new();
    walk(folder, &mut paths)
        .map_err(|e| usage(format!("cannot read {}: {e}", folder.display())))?;
    paths.sort();
    let relative = |p: &Path| {
        p.strip_prefix(folder)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned()
    };
    let (mut samples, mut files, mut skipped, mut summaries) = (Vec::new(), Vec::new(), vec![], 0);
    for path in &paths {
        match read_sample(path, agent) {
            Read::Sample(sample, bytes) => {
                samples.push(*sample);
                files.push(InputFile {
                    path: relative(path),
                    sha256: hex::encode(Sha256::digest(&bytes)),
                });
            }
            Read::Summary => summaries += 1,
            Read::Other => {
                eprintln!(
                    "skipped {}: not a grade report or run record",
                    path.display()
                );
                skipped.push(relative(path));
            }
        }
    }
    if samples.is_empty() {
        return Err(usage(format!(
            "no grade reports or run records below {}",
            folder.display()
        )));
    }
    Ok(Loaded {
        samples,
        inputs: Inputs::Reports {
            folder: folder.display().to_string(),
            files,
            summaries,
            skipped,
        },
    })
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

enum Read {
    /// A record or a grade report, with the bytes it was read from.
    Sample(Box<Sample>, Vec<u8>),
    /// A run report: already counted through its records.
    Summary,
    Other,
}

fn read_sample(path: &Path, agent: &str) -> Read {
    let Ok(bytes) = std::fs::read(path) else {
        return Read::Other;
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Read::Other;
    };
    if let Ok(record) = serde_json::from_str::<Record>(text) {
        return Read::Sample(Box::new(record.sample()), bytes);
    }
    if let Ok(report) = serde_json::from_str::<Report>(text) {
        let labels = Labels {
            agent: agent.to_owned(),
            model: None,
            account: None,
        };
        return Read::Sample(Box::new(Sample::from_report(&report, labels)), bytes);
    }
    // A run's own summaries (its report and its flake record) count what the records say.
    let run_file = serde_json::from_str::<crate::analysis::run::report::RunReport>(text).is_ok()
        || serde_json::from_str::<crate::analysis::run::flakes::Flakes>(text).is_ok();
    match run_file {
        true => Read::Summary,
        false => Read::Other,
    }
}
