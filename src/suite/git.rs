//! git as the task-suite tools run it: in a given repository, as their own committer with
//! fixed dates, so that the same inputs always give the same commits.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

/// Runs git in `dir`; its trimmed standard output, or an error with git's words.
pub fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    git_env(dir, &[], args)
}

/// Runs git in `dir` as the validation's own committer, with fixed dates so that the same
/// sdists always give the same commits.
pub fn git_env(dir: &Path, env: &[(&str, &OsStr)], args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "infradev")
        .env("GIT_AUTHOR_EMAIL", "infradev@localhost")
        .env("GIT_COMMITTER_NAME", "infradev")
        .env("GIT_COMMITTER_EMAIL", "infradev@localhost")
        .env("GIT_AUTHOR_DATE", "2000-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2000-01-01T00:00:00Z")
        .envs(env.iter().copied())
        .output()
        .context("cannot run git")?;
    if !out.status.success() {
        bail!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
