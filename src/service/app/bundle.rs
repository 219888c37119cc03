//! A dispatch's bundle for engines whose nodes share a filesystem with the server (Slurm):
//! the task, its hidden probes and our pytest plugin (`root/`), the submission's commits
//! (`repo.git`, a bare repository holding the head, the task's base and reference) and the
//! result token (`token`). The directory is created mode 0700 and the token 0600, so only the
//! service user (whom the grading job runs as) can read them; the job removes the bundle when it
//! has posted its result, and the server removes it again when it closes the dispatch.

use std::fs::DirBuilder;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use secrecy::{ExposeSecret, SecretString};

use crate::task::Task;

/// The bundle directory of dispatch `dispatch` of job `job_id` under `dir`.
pub fn path(dir: &Path, job_id: i64, dispatch: u32) -> PathBuf {
    dir.join(format!("job-{job_id}-{dispatch}"))
}

/// Writes the bundle (replacing a half-written one of an earlier attempt).
pub fn write(
    bundle: &Path,
    root: &Path,
    task: &Task,
    mirror: &Path,
    head: &str,
    token: &SecretString,
) -> anyhow::Result<()> {
    remove(bundle)?;
    if let Some(parent) = bundle.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create the bundle directory {}", parent.display()))?;
    }
    DirBuilder::new()
        .mode(0o700)
        .create(bundle)
        .with_context(|| format!("cannot create {}", bundle.display()))?;

    // root/: what `Registry::resolve` and the grader need, nothing else of ours.
    let tasks_rel = task.dir.strip_prefix(root.join("tasks")).with_context(|| {
        format!(
            "{} is not under {}/tasks",
            task.dir.display(),
            root.display()
        )
    })?;
    copy_tree(&task.dir, &bundle.join("root/tasks").join(tasks_rel))?;
    copy_tree(&task.probes.dir, &bundle.join("root/probes").join(&task.id))?;
    for part in ["runners/python", "runners/layers"] {
        if root.join(part).is_dir() {
            copy_tree(&root.join(part), &bundle.join("root").join(part))?;
        }
    }

    // repo.git: the head and the task's commits, pushed from the server's mirror.
    let repo = bundle.join("repo.git");
    git(None, &["init", "--quiet", "--bare", path_str(&repo)?])?;
    git(
        Some(mirror),
        &[
            "push",
            "--quiet",
            path_str(&repo)?,
            &format!("{head}:refs/infradev/head"),
            &format!("{}:refs/infradev/base", task.base_commit),
            &format!("{}:refs/infradev/reference", task.reference_commit),
        ],
    )?;

    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(bundle.join("token"))
        .context("cannot write the bundle's token")?;
    file.write_all(token.expose_secret().as_bytes())?;
    Ok(())
}

/// Removes a bundle if it is there.
pub fn remove(bundle: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(bundle) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", bundle.display())),
    }
}

fn path_str(p: &Path) -> anyhow::Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

fn git(dir: Option<&Path>, args: &[&str]) -> anyhow::Result<()> {
    let mut cmd = Command::new("git");
    if let Some(d) = dir {
        cmd.arg("-C").arg(d);
    }
    let out = cmd
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .context("cannot run git")?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Copies a directory tree (files and directories; symbolic links are copied as links).
pub(crate) fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for entry in
        std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))?
    {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else {
            std::fs::copy(&src, &dst)
                .with_context(|| format!("cannot copy {} to {}", src.display(), dst.display()))?;
        }
    }
    Ok(())
}
