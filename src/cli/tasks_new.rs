//! `infradev tasks new`: a task scaffolded from a merged pull request in a local clone. It
//! finds the commits, writes task.toml with the test files the change touched, builds the
//! environment, runs those tests on the base and on the reference and proposes FAIL_TO_PASS
//! and PASS_TO_PASS from the outcomes, scaffolds prompt.md and the probes, and says what is
//! left to write. The proposals are in `task::scaffold` (pure).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::cli::common::{CliError, HostArgs};
use crate::cli::exit;
use crate::grade::{ExecutorChoice, GradeRequest, run_test_files};
use crate::suite::fetch::{Cache, fetch_wheels};
use crate::suite::git::git;
use crate::suite::scaffold::{self, NewTask, Proposal};
use crate::task::{Registry, Task};

/// Scaffold a task from a merged pull request of a local clone.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The upstream repository, `owner/name`.
    #[arg(long)]
    pub repo: String,
    /// The pull request's number.
    #[arg(long)]
    pub pr: u64,
    /// The part of the model stack the change is in: training, inference or rl.
    #[arg(long, value_parser = parse_area)]
    pub area: crate::task::Area,
    /// The base commit (default: the first parent of the reference).
    #[arg(long)]
    pub base: Option<String>,
    /// The merged change (default: the newest commit whose subject ends with `(#N)` or
    /// starts with `Merge pull request #N`).
    #[arg(long)]
    pub reference: Option<String>,
    /// A local clone of the repository (default: <cache>/upstream/<owner>+<name>.git).
    #[arg(long)]
    pub git: Option<PathBuf>,
    /// The task id (default: `<name>-pr<N>`, from the repository's name).
    #[arg(long)]
    pub id: Option<String>,
    /// Where tasks/ and probes/ are written (default: the InfraDev checkout).
    #[arg(long)]
    pub into: Option<PathBuf>,
    /// The image the environment is built from.
    #[arg(long, default_value = "infradev-base:bookworm")]
    pub base_image: String,
    /// The Python version of that image (`[environment] python`).
    #[arg(long, default_value = "3.11")]
    pub python_version: String,
    /// A shared layer (runners/layers/<name>), for example `torch-2.8`.
    #[arg(long)]
    pub layer: Option<String>,
    /// A pip requirement of the environment (repeat for more).
    #[arg(long = "package")]
    pub packages: Vec<String>,
    /// Write the scaffold only; do not build the environment or run the tests.
    #[arg(long)]
    pub no_run: bool,
    #[command(flatten)]
    pub host: HostArgs,
}

fn parse_area(s: &str) -> Result<crate::task::Area, String> {
    crate::task::Area::ALL
        .into_iter()
        .find(|a| a.as_str() == s)
        .ok_or_else(|| format!("`{s}`: an area is training, inference or rl"))
}

pub async fn new_command(root: &Path, args: NewArgs) -> Result<u8, CliError> {
    let cache = Cache::locate(args.host.cache.clone());
    let clone = args
        .git
        .clone()
        .unwrap_or_else(|| cache.upstream_git(&args.repo));
    let plan = plan(&args, &clone).map_err(CliError::task)?;
    let into = args.into.clone().unwrap_or_else(|| root.to_path_buf());
    let group = group_of(&args.repo);
    let task_dir = into.join("tasks").join(&group).join(&plan.id);
    let probes_dir = into.join("probes").join(&plan.id);
    for dir in [&task_dir, &probes_dir] {
        if dir.exists() {
            return Err(CliError::task(anyhow::anyhow!(
                "{} already exists: choose another --id, or remove it",
                dir.display()
            )));
        }
    }
    let touched = &plan.task.touched;
    crate::outln!(
        "new task `{}` from {} #{}: base {}, reference {}",
        plan.id,
        args.repo,
        args.pr,
        short(&plan.task.base_commit),
        short(&plan.task.reference_commit)
    );
    crate::outln!("  test files: {}", list_or_none(&touched.test_files));
    crate::outln!("  packages: {}", list_or_none(&touched.packages));
    if !touched.test_infrastructure.is_empty() {
        crate::outln!(
            "  test infrastructure the change edited (graded as the reference's): {}",
            touched.test_infrastructure.join(", ")
        );
    }

    write_scaffold(&task_dir, &probes_dir, &plan.task, &Proposal::default())
        .map_err(CliError::infra)?;
    let task = Registry::resolve(root, &task_dir.display().to_string(), Some(&probes_dir))
        .map_err(|e| CliError::task(anyhow::anyhow!("the scaffolded task.toml: {e}")))?;

    let mut proposed = None;
    if args.no_run {
        crate::outln!(
            "  tests not run (--no-run): fill [tests] fail_to_pass and pass_to_pass by hand"
        );
    } else if touched.test_files.is_empty() {
        crate::outln!(
            "  the change touched no test file: name the official tests in [tests] by hand"
        );
    } else {
        let proposal = run_both(root, &args, &cache, &clone, &task).await?;
        std::fs::write(
            task_dir.join("task.toml"),
            scaffold::render_task_toml(&plan.task, &proposal),
        )
        .map_err(|e| CliError::infra(anyhow::anyhow!("cannot rewrite task.toml: {e}")))?;
        Registry::resolve(root, &task_dir.display().to_string(), Some(&probes_dir)).map_err(
            |e| CliError::task(anyhow::anyhow!("the proposed task.toml does not load: {e}")),
        )?;
        crate::outln!(
            "  proposed: {} FAIL_TO_PASS, {} PASS_TO_PASS, {} left out",
            proposal.fail_to_pass.len(),
            proposal.pass_to_pass.len(),
            proposal.left_out.len()
        );
        for (id, why) in &proposal.left_out {
            crate::outln!("    left out: {id} ({why})");
        }
        proposed = Some(proposal);
    }
    print_left_to_do(&task_dir, &probes_dir, &plan.id, &clone, proposed.as_ref());
    Ok(exit::RESOLVED)
}

struct Plan {
    id: String,
    task: NewTask,
}

fn plan(args: &NewArgs, clone: &Path) -> anyhow::Result<Plan> {
    if !clone.exists() {
        bail!(
            "there is no clone of {} at {} (pass --git <clone>, or clone it there)",
            args.repo,
            clone.display()
        );
    }
    git(clone, &["rev-parse", "--git-dir"])
        .with_context(|| format!("{} is not a git repository", clone.display()))?;
    let resolve = |what: &str, rev: &str| -> anyhow::Result<String> {
        git(
            clone,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{rev}^{{commit}}"),
            ],
        )
        .map(|s| s.trim().to_owned())
        .with_context(|| format!("{what} `{rev}` is not a commit of {}", clone.display()))
    };
    let (reference, subject) = match &args.reference {
        Some(rev) => {
            let sha = resolve("--reference", rev)?;
            let subject = git(clone, &["log", "-1", "--format=%s", &sha])?;
            (sha, subject.trim().to_owned())
        }
        None => {
            let log = git(clone, &["log", "--all", "--format=%H%x1f%P%x1f%s"])?;
            let found = scaffold::find_pr_commit(&log, args.pr).with_context(|| {
                format!(
                    "no commit of {} merges #{} (a subject ending with `(#{})` or starting with \
                     `Merge pull request #{}`): pass --reference <sha>",
                    clone.display(),
                    args.pr,
                    args.pr,
                    args.pr
                )
            })?;
            (found.sha, found.subject)
        }
    };
    let base = match &args.base {
        Some(rev) => resolve("--base", rev)?,
        None => resolve("the reference's parent", &format!("{reference}^1"))?,
    };
    if base == reference {
        bail!("the base and the reference are the same commit {base}");
    }
    let name_status = git(clone, &["diff", "--name-status", &base, &reference])?;
    let id = match &args.id {
        Some(id) => id.clone(),
        None => format!("{}-pr{}", group_of(&args.repo), args.pr),
    };
    let title = subject
        .trim_end_matches(&format!("(#{})", args.pr))
        .trim()
        .to_owned();
    Ok(Plan {
        task: NewTask {
            id: id.clone(),
            repository: args.repo.clone(),
            pr: args.pr,
            area: args.area,
            title,
            base_commit: base,
            reference_commit: reference,
            base_image: args.base_image.clone(),
            python: args.python_version.clone(),
            layer: args.layer.clone(),
            packages: args.packages.clone(),
            touched: scaffold::touched(&name_status),
        },
        id,
    })
}

/// Builds the environment and runs the task's test files on the base and the reference.
async fn run_both(
    root: &Path,
    args: &NewArgs,
    cache: &Cache,
    clone: &Path,
    task: &Task,
) -> Result<Proposal, CliError> {
    let runners = root.join("runners");
    fetch_wheels(&args.host.python, task, &runners, cache).map_err(CliError::infra)?;
    let mut runs = Vec::new();
    for (name, head) in [
        ("base", &task.base_commit),
        ("reference", &task.reference_commit),
    ] {
        crate::outln!("  running the test files on the {name} ({})", short(head));
        let request = GradeRequest {
            task: task.clone(),
            repo: clone.to_path_buf(),
            head: head.clone(),
            lib: runners.join("python"),
            executor: ExecutorChoice::Docker {
                wheels: Some(cache.wheels()),
            },
            keep_workdir: false,
            // One run each: the proposal reads raw outcomes, and a test that needs a rerun
            // to pass on the reference is left out anyway.
            retries: 0,
            unvalidated: crate::grade::Unvalidated::Allow,
        };
        let run = run_test_files(&request).await.map_err(|e| {
            CliError::infra(anyhow::anyhow!("running the tests on the {name}: {e}"))
        })?;
        for file in &run.collect_errors {
            crate::outln!("    {file}: cannot be imported on the {name}");
        }
        runs.push(run.outcomes);
    }
    if runs[1].is_empty() {
        return Err(CliError::task(anyhow::anyhow!(
            "no test of {} ran on the reference: does the environment have what they import? \
             (--layer, --package)",
            task.tests.files.join(", ")
        )));
    }
    Ok(scaffold::propose(&runs[0], &runs[1]))
}

fn write_scaffold(
    task_dir: &Path,
    probes_dir: &Path,
    task: &NewTask,
    proposal: &Proposal,
) -> anyhow::Result<()> {
    let files = [
        (
            task_dir.join("task.toml"),
            scaffold::render_task_toml(task, proposal),
        ),
        (task_dir.join("prompt.md"), scaffold::render_prompt(task)),
        (
            probes_dir.join("probes.toml"),
            scaffold::render_probes_toml(&task.id),
        ),
        (
            probes_dir.join("test_interface.py"),
            scaffold::render_probe_skeleton(&task.touched.packages),
        ),
    ];
    for (path, text) in files {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn print_left_to_do(
    task_dir: &Path,
    probes_dir: &Path,
    id: &str,
    clone: &Path,
    proposal: Option<&Proposal>,
) {
    crate::outln!(
        "\nwritten: {}/{{task.toml,prompt.md}}, {}/",
        task_dir.display(),
        probes_dir.display()
    );
    crate::outln!("left to write:");
    crate::outln!(
        "  - task.toml: `summary`, [resources] (memory, GPUs, timeouts) and `default_category`"
    );
    if proposal.is_none() {
        crate::outln!("  - task.toml: [tests] fail_to_pass and pass_to_pass");
    } else {
        crate::outln!("  - task.toml: review the proposed [tests] lists and the tests left out");
    }
    crate::outln!(
        "  - prompt.md: the problem, every interface the probes call, the semantics (each TODO)"
    );
    crate::outln!(
        "  - {}/: the probes (the skeleton fails until written) and each probe's requirement in probes.toml",
        probes_dir.display()
    );
    crate::outln!("then:");
    crate::outln!("  infradev tasks lint {id}");
    crate::outln!("  infradev tasks validate {id} --git {}", clone.display());
    crate::outln!("  infradev tasks power {id} --git {}", clone.display());
}

/// `tasks/<group>/`: the repository's name up to its first `-`, lowercased
/// (`NVIDIA/Megatron-LM` → `megatron`).
fn group_of(repository: &str) -> String {
    let name = repository.rsplit('/').next().unwrap_or(repository);
    name.split('-').next().unwrap_or(name).to_lowercase()
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(10)]
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn groups_tasks_by_repository_name() {
        for (repo, group) in [
            ("NVIDIA/Megatron-LM", "megatron"),
            ("vllm-project/vllm", "vllm"),
            ("volcengine/verl", "verl"),
            ("infradev/minicache", "minicache"),
        ] {
            assert_eq!(super::group_of(repo), group);
        }
    }
}
