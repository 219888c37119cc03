//! runners/tasks/mutate.py from the host: the mutants and variants of a change, and a
//! candidate committed on top of the reference. Shared by `tasks power` and by validation's
//! `[[reject]]` wrong patches.

use std::path::Path;

use anyhow::{Context, bail};

use crate::suite::git::{git, git_env};
use crate::suite::power::Candidate;

/// Runs runners/tasks/mutate.py on `files` (`{"path", "source", "changed": [[first, last]]}`)
/// and returns every candidate it makes in the changed lines.
pub fn mutate(
    python: &Path,
    runners: &Path,
    files: Vec<serde_json::Value>,
) -> anyhow::Result<Vec<Candidate>> {
    let script = runners.join("tasks/mutate.py");
    let mut child = std::process::Command::new(python)
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {} {}", python.display(), script.display()))?;
    let request = serde_json::to_vec(&serde_json::json!({ "files": files }))?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().context("no stdin")?;
        stdin.write_all(&request)?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        mutants: Vec<Candidate>,
        errors: Vec<String>,
    }
    let answer: Answer = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{} printed no candidates", script.display()))?;
    if !answer.errors.is_empty() {
        bail!("{}: {}", script.display(), answer.errors.join("; "));
    }
    Ok(answer.mutants)
}

/// Commits a candidate's file on top of the reference; returns the commit.
pub fn commit_candidate(repo: &Path, reference: &str, c: &Candidate) -> anyhow::Result<String> {
    let work = tempfile::tempdir()?;
    let file = work.path().join("source");
    std::fs::write(&file, &c.source)?;
    let blob = git(
        repo,
        &[
            "hash-object",
            "-w",
            "--no-filters",
            &file.display().to_string(),
        ],
    )?;
    let index = work.path().join("index");
    let env = [("GIT_INDEX_FILE", index.as_os_str())];
    let run = |args: &[&str]| git_env(repo, &env, args);
    run(&["read-tree", reference])?;
    run(&[
        "update-index",
        "--cacheinfo",
        &format!("100644,{blob},{}", c.path),
    ])?;
    let tree = run(&["write-tree"])?;
    let message = format!("power: {} {} ({})", c.operator, c.id, c.path);
    run(&["commit-tree", &tree, "-p", reference, "-m", &message])
}
