//! Finding tasks on disk: `<root>/tasks/<repo>/<task-id>/task.toml` with probes in
//! `<root>/probes/<task-id>/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::error::ManifestError;
use super::manifest::{Task, load_task};

/// Every task manifest under a root, parsed or not.
#[derive(Debug)]
pub struct Registry {
    pub root: PathBuf,
    pub tasks: Vec<Result<Task, ManifestError>>,
}

/// A problem `tasks check` reports: a manifest error, or a cross-task one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckProblem {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("{}: duplicate task id `{id}` (also in {})", first.display(), second.display())]
    DuplicateId {
        id: String,
        first: PathBuf,
        second: PathBuf,
    },
}

impl Registry {
    /// Reads every `tasks/*/*/task.toml` under `root`, in path order.
    pub fn load(root: &Path) -> std::io::Result<Registry> {
        let mut dirs = Vec::new();
        let tasks_dir = root.join("tasks");
        for repo in sorted_dirs(&tasks_dir)? {
            for task in sorted_dirs(&repo)? {
                if task.join("task.toml").is_file() {
                    dirs.push(task);
                }
            }
        }
        let tasks = dirs
            .into_iter()
            .map(|dir| {
                let id = dir
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                load_task(&dir, &root.join("probes").join(&id))
            })
            .collect();
        Ok(Registry {
            root: root.to_path_buf(),
            tasks,
        })
    }

    /// Finds a task by id, or loads it from a directory path.
    pub fn resolve(
        root: &Path,
        id_or_dir: &str,
        probes: Option<&Path>,
    ) -> Result<Task, ManifestError> {
        let as_dir = Path::new(id_or_dir);
        let dir = if as_dir.join("task.toml").is_file() {
            as_dir.to_path_buf()
        } else {
            let found = sorted_dirs(&root.join("tasks"))
                .unwrap_or_default()
                .into_iter()
                .map(|repo| repo.join(id_or_dir))
                .find(|d| d.join("task.toml").is_file());
            found.ok_or_else(|| {
                ManifestError::whole_file(
                    &root.join("tasks"),
                    format!("no task `{id_or_dir}`: not a directory with task.toml, nor tasks/<repo>/{id_or_dir}/task.toml"),
                )
            })?
        };
        let id = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let probes_dir = match probes {
            Some(p) => p.to_path_buf(),
            None => dir
                .parent()
                .and_then(Path::parent)
                .and_then(Path::parent)
                .unwrap_or(root)
                .join("probes")
                .join(&id),
        };
        load_task(&dir, &probes_dir)
    }

    /// Every problem across all tasks; empty when all is well.
    pub fn check(&self) -> Vec<CheckProblem> {
        let mut problems = Vec::new();
        let mut ids: BTreeMap<&str, &Path> = BTreeMap::new();
        for task in &self.tasks {
            match task {
                Err(e) => problems.push(e.clone().into()),
                Ok(t) => {
                    problems.extend(check_task(t).into_iter().map(CheckProblem::from));
                    if let Some(layer) = &t.environment.layer {
                        let file = self
                            .root
                            .join("runners/layers")
                            .join(layer)
                            .join("requirements.txt");
                        if !file.is_file() {
                            problems.push(CheckProblem::Manifest(ManifestError::whole_file(
                                &t.manifest_path(),
                                format!("environment.layer: `{layer}` has no {}", file.display()),
                            )));
                        }
                    }
                    if let Some(first) = ids.insert(&t.id, &t.dir) {
                        problems.push(CheckProblem::DuplicateId {
                            id: t.id.clone(),
                            first: first.join("task.toml"),
                            second: t.manifest_path(),
                        });
                    }
                }
            }
        }
        problems
    }
}

/// Checks what parsing alone cannot: the directory name, the prompt, the probes' presence.
pub fn check_task(task: &Task) -> Vec<ManifestError> {
    let mut problems = Vec::new();
    let manifest = task.manifest_path();
    let dir_name = task.dir.file_name().unwrap_or_default().to_string_lossy();
    if dir_name != task.id {
        problems.push(ManifestError::whole_file(
            &manifest,
            format!(
                "id `{}` differs from its directory name `{dir_name}`",
                task.id
            ),
        ));
    }
    // Checked here, not when the task is loaded: a grade may bring other probes (`--probes`).
    if task.ranks == 1
        && let Some(p) = task
            .probes
            .probes
            .iter()
            .find(|p| p.budget.rank_bytes.is_some())
    {
        problems.push(ManifestError::whole_file(
            &manifest,
            format!(
                "field `ranks`: probe `{}` has a per-rank traffic budget, so the task starts \
                 rank groups: give `ranks` (the most ranks a group has)",
                p.id
            ),
        ));
    }
    if task.tests.fail_to_pass.is_empty() {
        if task.tests.no_fail_to_pass.is_none() {
            problems.push(ManifestError::whole_file(
                &manifest,
                "tests.fail_to_pass is empty: a task must fail on its base (when the upstream \
                 change has no such test, say why in tests.no_fail_to_pass)",
            ));
        } else if task.probes.probes.iter().all(|p| p.checks_base_behaviour) {
            problems.push(ManifestError::whole_file(
                &manifest,
                "tests.no_fail_to_pass: with no FAIL_TO_PASS test, some probe must check what \
                 the change adds (every probe is marked checks_base_behaviour)",
            ));
        }
    }
    match std::fs::read_to_string(task.prompt_path()) {
        Ok(text) if text.trim().is_empty() => problems.push(ManifestError::whole_file(
            &task.prompt_path(),
            "prompt is empty",
        )),
        Ok(_) => {}
        Err(e) => problems.push(ManifestError::whole_file(
            &task.prompt_path(),
            format!("cannot read the prompt: {e}"),
        )),
    }
    if let Some(c) = &task.environment.constraints {
        let path = task.dir.join(c);
        if !path.is_file() {
            problems.push(ManifestError::whole_file(
                &manifest,
                format!(
                    "environment.constraints: `{}` does not exist",
                    path.display()
                ),
            ));
        }
    }
    problems
}

fn sorted_dirs(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        // Follows symbolic links: a task directory may be linked in from elsewhere.
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    Ok(dirs)
}
