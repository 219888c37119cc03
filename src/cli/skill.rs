//! `infradev skill export`: an agent skill built from the failure statistics of a source of
//! grades (`source.rs`) and the public side of the tasks under the root (docs/skill.md).
//!
//! The flow: read the grades, aggregate them (`stats`), read each task's prompt and manifest
//! (`skill::PublicTask`), render (`skill::render`, pure), check the result against every
//! task's hidden material (`skill::guard`), then write the folder whole: into a temporary
//! folder beside it, renamed into place.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::source::{SourceArgs, load};
use crate::analysis::skill::guard::{Hidden, check};
use crate::analysis::skill::{Build, DEFAULT_NAME, PublicTask, Skill, render, valid_name};
use crate::analysis::stats::aggregate;
use crate::cli::common::CliError;
use crate::cli::exit;
use crate::task::{Registry, Task};

#[derive(Debug, clap::Subcommand)]
pub enum SkillCommand {
    /// Write an agent skill (SKILL.md, references/, provenance.json) built from the failure
    /// statistics of graded submissions and the tasks' public prompts.
    Export(ExportArgs),
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// The folder the skill is written into, as `<out>/<name>/`.
    #[arg(long)]
    pub out: PathBuf,
    /// The skill's name, also its folder's: lowercase letters, digits and single hyphens.
    #[arg(long, default_value = DEFAULT_NAME)]
    pub name: String,
    /// Only the tasks of this repository (`owner/name`); repeat for more. Default: every
    /// repository with a task under the root.
    #[arg(long = "repository")]
    pub repositories: Vec<String>,
    /// Replace an existing skill folder of the same name.
    #[arg(long)]
    pub force: bool,
}

pub async fn skill_command(root: &Path, cmd: SkillCommand) -> Result<u8, CliError> {
    match cmd {
        SkillCommand::Export(args) => export(root, args).await,
    }
}

fn usage(error: anyhow::Error) -> CliError {
    CliError {
        code: exit::USAGE_OR_TASK,
        error,
    }
}

async fn export(root: &Path, args: ExportArgs) -> Result<u8, CliError> {
    if !valid_name(&args.name) {
        return Err(usage(anyhow::anyhow!(
            "--name `{}`: a skill name is 1-64 lowercase letters, digits and single hyphens, \
             neither first nor last",
            args.name
        )));
    }
    let target = args.out.join(&args.name);
    if target.exists() && !args.force {
        return Err(usage(anyhow::anyhow!(
            "{} exists: pass --force to replace it",
            target.display()
        )));
    }
    let tasks = tasks(root, &args.repositories)?;
    let loaded = load(&args.source).await?;
    let stats = aggregate(&loaded.samples);

    // Every task's prompt and manifest is public, and so is the advice we wrote: what any of
    // them says is not hidden, whichever task's probe says it too.
    let mut public = Vec::new();
    let mut public_text = crate::analysis::skill::composed_text();
    let mut sources = Vec::new();
    for task in &tasks {
        let prompt = std::fs::read_to_string(task.prompt_path())
            .with_context(|| format!("cannot read {}", task.prompt_path().display()))
            .map_err(usage)?;
        let manifest = std::fs::read(task.manifest_path())
            .with_context(|| format!("cannot read {}", task.manifest_path().display()))
            .map_err(usage)?;
        sources.push(
            task.probes
                .sources()
                .with_context(|| format!("cannot read the probes of {}", task.id))
                .map_err(usage)?,
        );
        for text in [prompt.as_str(), &String::from_utf8_lossy(&manifest)] {
            public_text.push('\n');
            public_text.push_str(text);
        }
        public.push(PublicTask::of(task, &prompt, &manifest));
    }
    let hidden: Vec<Hidden> = tasks
        .iter()
        .zip(&sources)
        .map(|(task, sources)| Hidden::of(task, sources, &public_text))
        .collect();
    for row in &stats.by_repository {
        if !public.iter().any(|t| t.repository == row.key) {
            eprintln!(
                "note: {} graded submission(s) of {} count in the provenance only: no task of \
                 the skill is of that repository",
                row.tally.graded, row.key
            );
        }
    }
    let generated_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let skill = render(&Build {
        name: &args.name,
        stats: &stats,
        inputs: &loaded.inputs,
        tasks: &public,
        version: env!("CARGO_PKG_VERSION"),
        generated_at: &generated_at,
    });
    check(&skill.files, &hidden).map_err(|e| usage(e.into()))?;
    write(&skill, &args.out, &target)
        .with_context(|| format!("cannot write {}", target.display()))
        .map_err(|error| CliError {
            code: exit::INFRA,
            error,
        })?;
    crate::outln!(
        "wrote {}: SKILL.md, {} task reference(s), provenance.json; built from {} record(s) \
         ({} graded, {} resolved), {}",
        target.display(),
        public.len(),
        loaded.inputs.count(),
        stats.overall.graded,
        stats.overall.resolved,
        loaded.inputs.digest()
    );
    Ok(exit::RESOLVED)
}

/// Every task under the root, or those of the given repositories; a task that does not parse
/// or a repository without tasks is an error.
fn tasks(root: &Path, repositories: &[String]) -> Result<Vec<Task>, CliError> {
    let registry = Registry::load(root)
        .with_context(|| format!("cannot read the tasks under {}", root.display()))
        .map_err(usage)?;
    let mut tasks = Vec::new();
    for task in registry.tasks {
        tasks.push(task.map_err(|e| usage(e.into()))?);
    }
    for r in repositories {
        if !tasks.iter().any(|t| &t.repository == r) {
            let mut known: Vec<&str> = tasks.iter().map(|t| t.repository.as_str()).collect();
            known.sort();
            known.dedup();
            return Err(usage(anyhow::anyhow!(
                "--repository {r}: no task of it under {} (repositories: {})",
                root.display(),
                known.join(", ")
            )));
        }
    }
    if !repositories.is_empty() {
        tasks.retain(|t| repositories.contains(&t.repository));
    }
    if tasks.is_empty() {
        return Err(usage(anyhow::anyhow!(
            "no tasks under {}",
            root.join("tasks").display()
        )));
    }
    Ok(tasks)
}

/// Writes the skill into a temporary folder in `out`, then renames it to `target` (replacing
/// an earlier one): a skill folder that exists is whole.
fn write(skill: &Skill, out: &Path, target: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", skill.name))
        .tempdir_in(out)?;
    for (path, text) in &skill.files {
        let file = tmp.path().join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&file, text)?;
    }
    let tmp = tmp.keep();
    if target.exists() {
        std::fs::remove_dir_all(target)?;
    }
    std::fs::rename(&tmp, target)?;
    Ok(())
}
