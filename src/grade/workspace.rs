//! A private work dir holding the submission at its head commit. The user's checkout is never
//! written to: we clone it (objects shared read-only) and work on the clone.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::grade::tree::{TreeEntry, parse_ls_tree};

/// One changed path between the base and the head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// git's status letter: A, M, D, R, C, T.
    pub status: char,
    pub path: String,
}

/// The private copy of a submission.
pub struct Workspace {
    dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub head: String,
}

/// Why a head cannot be graded against a base: the change "does not apply".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ApplyError(pub String);

impl Workspace {
    /// Clones `source` into a new private directory without writing any of `rev`'s tree:
    /// [`Workspace::tree`] can judge it from git's objects before [`Workspace::checkout`].
    pub fn clone_of(source: &Path, rev: &str) -> anyhow::Result<Workspace> {
        let head = git(
            source,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{rev}^{{commit}}"),
            ],
        )
        .with_context(|| format!("`{rev}` is not a commit in {}", source.display()))?;
        let dir = tempfile::Builder::new()
            .prefix("infradev-grade-")
            .tempdir()
            .context("cannot create the work dir")?;
        let repo = dir.path().join("repo");
        // Output is captured: a mirror holding only fetched commits (no branches) is "empty"
        // to clone, which git warns about although every object is shared.
        let out = Command::new("git")
            .args(["clone", "--quiet", "--shared", "--no-checkout"])
            .arg(source)
            .arg(&repo)
            .output()
            .context("cannot run git clone")?;
        if !out.status.success() {
            bail!(
                "git clone of {} failed: {}",
                source.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(Workspace { dir, repo, head })
    }

    /// Writes the head's tree into the clone (detached).
    pub fn checkout(&self) -> anyhow::Result<()> {
        git(
            &self.repo,
            &[
                "-c",
                "advice.detachedHead=false",
                "-c",
                "core.symlinks=true",
                "checkout",
                "--quiet",
                "--detach",
                &self.head,
            ],
        )?;
        Ok(())
    }

    /// Every blob, symlink and gitlink of `rev`'s tree, read from git's objects (nothing is
    /// written); `None` when `rev` is not in the clone.
    pub fn tree(&self, rev: &str) -> anyhow::Result<Option<Vec<TreeEntry>>> {
        if !self.has_commit(rev) {
            return Ok(None);
        }
        let out = Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["ls-tree", "-r", "-l", "-z", "--full-tree", rev])
            .output()
            .context("cannot run git ls-tree")?;
        if !out.status.success() {
            bail!(
                "git ls-tree {rev} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        parse_ls_tree(&out.stdout)
            .map(Some)
            .map_err(|e| anyhow::anyhow!(e))
    }

    /// Writes a file of ours into the work tree at `rel` with `mode`, never through anything
    /// the submission put there: every folder on the way must be a real folder (not a
    /// symlink), whatever is at `rel` itself is removed first (a symlink is unlinked, never
    /// followed), and the file is created anew with `O_NOFOLLOW` and chmod'ed through its
    /// own descriptor.
    pub fn plant_file(&self, rel: &str, contents: &str, mode: u32) -> anyhow::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let rel_path = Path::new(rel);
        let mut dir = self.repo.clone();
        for part in rel_path.parent().into_iter().flat_map(|p| p.components()) {
            dir.push(part);
            let meta = dir
                .symlink_metadata()
                .with_context(|| format!("cannot plant {rel}: {} is missing", dir.display()))?;
            if !meta.file_type().is_dir() {
                bail!("cannot plant {rel}: {} is not a folder", dir.display());
            }
        }
        let path = self.repo.join(rel_path);
        match path.symlink_metadata() {
            Ok(meta) if meta.file_type().is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(_) => Ok(()),
        }
        .with_context(|| format!("cannot clear {}", path.display()))?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        file.write_all(contents.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot chmod {}", path.display()))?;
        Ok(())
    }

    /// The private directory holding the clone; everything we write goes below it.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Keeps the work dir on disk (for debugging) and returns its path.
    pub fn keep(self) -> PathBuf {
        self.dir.keep()
    }

    /// The paths the head changes relative to `base`, or why the head does not apply there.
    pub fn changes_since(&self, base: &str) -> anyhow::Result<Result<Vec<Change>, ApplyError>> {
        if git(
            &self.repo,
            &["cat-file", "-e", &format!("{base}^{{commit}}")],
        )
        .is_err()
        {
            return Ok(Err(ApplyError(format!(
                "the task's base commit {base} is not in the submission's history"
            ))));
        }
        if git(
            &self.repo,
            &["merge-base", "--is-ancestor", base, &self.head],
        )
        .is_err()
        {
            return Ok(Err(ApplyError(format!(
                "the head {} is not built on the task's base commit {base}",
                self.head
            ))));
        }
        let out = git(
            &self.repo,
            &[
                "diff",
                "--name-status",
                "--no-renames",
                "-z",
                base,
                &self.head,
            ],
        )?;
        let mut fields = out.split('\0').filter(|s| !s.is_empty());
        let mut changes = Vec::new();
        while let (Some(status), Some(path)) = (fields.next(), fields.next()) {
            changes.push(Change {
                status: status.chars().next().unwrap_or('M'),
                path: path.to_owned(),
            });
        }
        Ok(Ok(changes))
    }

    /// The text of `path` at `commit`, if it exists there.
    pub fn read_at(&self, commit: &str, path: &str) -> Option<String> {
        // Byte for byte (not trimmed like other git output): compared with files on disk.
        let out = Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["show", &format!("{commit}:{path}")])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether `commit` exists in the clone.
    pub fn has_commit(&self, commit: &str) -> bool {
        git(
            &self.repo,
            &["cat-file", "-e", &format!("{commit}^{{commit}}")],
        )
        .is_ok()
    }

    /// Sets `path` in the work tree to its content at `commit`, or removes it when it does not
    /// exist there.
    pub fn reset_path(&self, commit: &str, path: &str) -> anyhow::Result<()> {
        if git(&self.repo, &["cat-file", "-e", &format!("{commit}:{path}")]).is_ok() {
            git(&self.repo, &["checkout", "--quiet", commit, "--", path])?;
        } else {
            let full = self.repo.join(path);
            // A dangling symlink does not `exist`, but it is there and must go too.
            if full.symlink_metadata().is_ok() {
                std::fs::remove_file(&full)
                    .with_context(|| format!("cannot remove {}", full.display()))?;
            }
        }
        Ok(())
    }
}

/// Runs git in `dir` and returns its trimmed stdout; a non-zero exit is an error with stderr.
fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .context("cannot run git (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .trim_end_matches('\n')
        .to_owned())
}

/// What a path of the work tree holds, for comparing versions of it, without following a
/// symlink (its target is read as its content, as git stores it) and without reading more
/// than `MAX_COMPARED` bytes (a larger file, a device or a FIFO is a marker, never read).
pub fn read_tree_file(path: &Path) -> Option<String> {
    use std::io::Read;
    let meta = path.symlink_metadata().ok()?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).ok()?;
        return Some(format!("symlink -> {}", target.display()));
    }
    if !meta.file_type().is_file() {
        return Some("not a regular file".to_owned());
    }
    if meta.len() > MAX_COMPARED {
        return Some(format!("a file of {} bytes", meta.len()));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_COMPARED)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The most of a file the guard reads.
const MAX_COMPARED: u64 = 4 << 20;
