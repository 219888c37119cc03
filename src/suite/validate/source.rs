//! The validation repository: the base, the reference (with its follow-up fixes) and a null
//! patch as commits of a private git repository, from a local clone or from release sdists.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::suite::fetch::fetch_sdist;
use crate::suite::git::{git, git_env};
use crate::task::{FollowUpRelease, Release, Task, UpstreamSource};

use super::{SourceRecord, ValidateOptions};

/// A private git repository holding the base, the reference and a null patch.
pub(crate) struct Source {
    _dir: tempfile::TempDir,
    pub(crate) repo: PathBuf,
    pub(crate) base: String,
    pub(crate) reference: String,
    pub(crate) null: String,
    pub(crate) record: SourceRecord,
}

impl Source {
    pub(crate) async fn prepare(task: &Task, opts: &ValidateOptions) -> anyhow::Result<Source> {
        let dir = tempfile::tempdir().context("cannot create a work dir")?;
        let repo = dir.path().join("upstream");
        let (base, reference, record) = match &task.upstream.source {
            UpstreamSource::Git => {
                let clone = opts
                    .git
                    .clone()
                    .unwrap_or_else(|| opts.cache.upstream_git(&task.repository));
                if !clone.exists() {
                    bail!(
                        "task `{}` is validated from git, and there is no clone of {} at {} \
                         (pass --git <clone>, or clone it there)",
                        task.id,
                        task.repository,
                        clone.display()
                    );
                }
                git(
                    dir.path(),
                    &[
                        "clone",
                        "--quiet",
                        "--shared",
                        "--no-checkout",
                        &clone.display().to_string(),
                        "upstream",
                    ],
                )?;
                for (field, sha) in [
                    ("base_commit", &task.base_commit),
                    ("reference_commit", &task.reference_commit),
                ] {
                    git(&repo, &["cat-file", "-e", &format!("{sha}^{{commit}}")])
                        .with_context(|| format!("{field} {sha} is not in {}", clone.display()))?;
                }
                let reference =
                    with_follow_ups(&repo, &task.reference_commit, &task.upstream.follow_up)
                        .with_context(|| format!("task `{}`: upstream.follow_up", task.id))?;
                let record = SourceRecord {
                    kind: "git".into(),
                    base: task.base_commit.clone(),
                    reference: task.reference_commit.clone(),
                    base_commit: task.base_commit.clone(),
                    reference_commit: reference,
                    follow_up: task.upstream.follow_up.clone(),
                    note: task.upstream.note.clone(),
                };
                let reference = record.reference_commit.clone();
                (task.base_commit.clone(), reference, record)
            }
            UpstreamSource::Release { base, reference } => {
                let base_sdist = fetch_sdist(base, &opts.cache).await?;
                let reference_sdist = fetch_sdist(reference, &opts.cache).await?;
                std::fs::create_dir_all(&repo)?;
                git(&repo, &["init", "--quiet"])?;
                let base_sha = commit_sdist(&repo, &base_sdist, base, None)?;
                let mut reference_sha =
                    commit_sdist(&repo, &reference_sdist, reference, Some(&base_sha))?;
                let mut follow_up = Vec::new();
                for fix in &task.upstream.follow_up_releases {
                    let sdist = fetch_sdist(&fix.release, &opts.cache).await?;
                    reference_sha = with_release_follow_up(&repo, &reference_sha, &sdist, fix)
                        .with_context(|| {
                            format!(
                                "task `{}`: upstream.follow_up_release {}",
                                task.id, fix.release
                            )
                        })?;
                    follow_up.extend(fix.paths.iter().map(|p| format!("{}:{p}", fix.release)));
                }
                let record = SourceRecord {
                    kind: "release".into(),
                    base: base.to_string(),
                    reference: reference.to_string(),
                    base_commit: base_sha.clone(),
                    reference_commit: reference_sha.clone(),
                    follow_up,
                    note: task.upstream.note.clone(),
                };
                (base_sha, reference_sha, record)
            }
        };
        let null = git(
            &repo,
            &[
                "commit-tree",
                &format!("{base}^{{tree}}"),
                "-p",
                &base,
                "-m",
                "null patch: no change",
            ],
        )?;
        Ok(Source {
            _dir: dir,
            repo,
            base,
            reference,
            null,
            record,
        })
    }
}

/// The reference with the upstream fixes of `follow_up` applied in order, each as a commit of
/// our own (fixed author and date, so the same fixes always make the same commit): what a
/// cherry-pick makes, computed without a work tree (`git merge-tree`). A fix that does not
/// apply cleanly is an error naming it.
fn with_follow_ups(repo: &Path, reference: &str, follow_up: &[String]) -> anyhow::Result<String> {
    let mut head = reference.to_owned();
    for fix in follow_up {
        git(repo, &["cat-file", "-e", &format!("{fix}^{{commit}}")])
            .with_context(|| format!("{fix} is not in the clone"))?;
        let merged = git(
            repo,
            &[
                "merge-tree",
                "--write-tree",
                "--no-messages",
                "--merge-base",
                &format!("{fix}^"),
                &head,
                fix,
            ],
        )
        .with_context(|| format!("{fix} does not apply cleanly on top of {head}"))?;
        let tree = merged.lines().next().unwrap_or_default().trim().to_owned();
        head = git(
            repo,
            &[
                "commit-tree",
                &tree,
                "-p",
                &head,
                "-m",
                &format!("follow-up {fix} applied to the reference"),
            ],
        )?
        .trim()
        .to_owned();
    }
    Ok(head)
}

/// The reference with `fix.paths` replaced by their content in the later release `sdist`, as
/// one commit on top of it: what upstream's fix made of those files. A path the fix release
/// does not ship is an error naming it.
fn with_release_follow_up(
    repo: &Path,
    reference: &str,
    sdist: &Path,
    fix: &FollowUpRelease,
) -> anyhow::Result<String> {
    let work = tempfile::tempdir()?;
    // `*` stands for the sdist's top folder only: a deeper file of the same name is not it.
    let mut only = vec![
        "--wildcards".to_owned(),
        "--no-wildcards-match-slash".to_owned(),
    ];
    only.extend(fix.paths.iter().map(|p| format!("*/{p}")));
    let unpacked = untar(sdist, work.path(), &only)?;
    let index = repo
        .join(".git")
        .join(format!("index-follow-up-{}", fix.release.version));
    let env = [("GIT_INDEX_FILE", index.as_os_str())];
    let run = |args: &[&str]| git_env(repo, &env, args);
    run(&["read-tree", reference])?;
    for path in &fix.paths {
        let file = work.path().join(path);
        if !file.is_file() {
            bail!("{} ships no file {path}", fix.release);
        }
        let blob = run(&["hash-object", "-w", &file.display().to_string()])?;
        run(&[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("100644,{blob},{path}"),
        ])?;
    }
    // Every path is there, so a failure is something else.
    unpacked?;
    let tree = run(&["write-tree"])?;
    let message = format!("follow-up from {}: {}", fix.release, fix.paths.join(", "));
    run(&["commit-tree", &tree, "-p", reference, "-m", &message])
}

/// Unpacks `sdist` into `dest` without its top folder (`members`: tar's member selection,
/// empty for all). The outer error is not running tar; the inner one, tar's failure, with its
/// words.
fn untar(sdist: &Path, dest: &Path, members: &[String]) -> anyhow::Result<anyhow::Result<()>> {
    let out = Command::new("tar")
        .arg("-xzf")
        .arg(sdist)
        .arg("--strip-components=1")
        .arg("--no-same-owner")
        .arg("-C")
        .arg(dest)
        .args(members)
        .output()
        .context("cannot run tar")?;
    Ok(if out.status.success() {
        Ok(())
    } else {
        Err(anyhow::anyhow!(
            "cannot unpack {}: {}",
            sdist.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    })
}

/// Commits an sdist's tree (its top folder stripped) on top of `parent`, replacing the tree.
fn commit_sdist(
    repo: &Path,
    sdist: &Path,
    release: &Release,
    parent: Option<&str>,
) -> anyhow::Result<String> {
    let work = tempfile::tempdir()?;
    untar(sdist, work.path(), &[])??;
    let index = repo.join(".git").join(format!("index-{}", release.version));
    let env = [
        ("GIT_INDEX_FILE", index.as_os_str()),
        ("GIT_WORK_TREE", work.path().as_os_str()),
    ];
    let run = |args: &[&str]| git_env(repo, &env, args);
    run(&["add", "--all", "--force", "."])?;
    let tree = run(&["write-tree"])?;
    let message = format!("{release} (sdist)");
    let mut args = vec!["commit-tree", tree.as_str(), "-m", message.as_str()];
    if let Some(p) = parent {
        args.extend(["-p", p]);
    }
    run(&args)
}

#[cfg(test)]
mod follow_up_tests {
    use super::{git, with_follow_ups};

    fn commit(repo: &std::path::Path, file: &str, text: &str, message: &str) -> String {
        std::fs::write(repo.join(file), text).unwrap();
        git(repo, &["add", "-A"]).unwrap();
        git(repo, &["commit", "-q", "-m", message]).unwrap();
        git(repo, &["rev-parse", "HEAD"]).unwrap().trim().to_owned()
    }

    #[test]
    fn fixes_apply_on_top_of_the_reference_and_conflicts_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path();
        git(repo, &["init", "-q"]).unwrap();
        commit(repo, "a.py", "def f():\n    return 1\n", "base");
        let reference = commit(
            repo,
            "a.py",
            "def f():\n    return get_device()\n",
            "the PR",
        );
        // Unrelated later work, then the fix of the PR's code.
        commit(repo, "b.py", "other = 1\n", "later");
        let fix = commit(
            repo,
            "a.py",
            "def f():\n    return device_name()\n",
            "the fix",
        );

        let fixed = with_follow_ups(repo, &reference, std::slice::from_ref(&fix)).unwrap();
        let show = |rev: &str, path: &str| git(repo, &["show", &format!("{rev}:{path}")]);
        assert_eq!(
            show(&fixed, "a.py").unwrap().trim_end(),
            "def f():\n    return device_name()"
        );
        assert!(
            show(&fixed, "b.py").is_err(),
            "only the fix is applied, not later work"
        );
        assert_eq!(
            git(repo, &["rev-parse", &format!("{fixed}^")])
                .unwrap()
                .trim(),
            reference
        );
        // The same fixes always make the same commit.
        assert_eq!(
            with_follow_ups(repo, &reference, std::slice::from_ref(&fix)).unwrap(),
            fixed
        );
        assert_eq!(with_follow_ups(repo, &reference, &[]).unwrap(), reference);

        // A fix that does not apply on the reference is named.
        let clash = commit(repo, "a.py", "def f():\n    return 3\n", "clash");
        let base = git(repo, &["rev-list", "--max-parents=0", "HEAD"]).unwrap();
        let err = with_follow_ups(repo, base.trim(), std::slice::from_ref(&clash)).unwrap_err();
        assert!(
            format!("{err:#}").contains(&format!("{clash} does not apply cleanly")),
            "{err:#}"
        );
    }
}

#[cfg(test)]
mod follow_up_release_tests {
    use super::{commit_sdist, git, with_release_follow_up};
    use crate::task::{FollowUpRelease, Release};
    use std::path::Path;

    fn release(version: &str) -> Release {
        Release {
            name: "pkg".into(),
            version: version.into(),
            sha256: "0".repeat(64),
        }
    }

    /// An sdist as PyPI ships it: one top folder holding the tree.
    fn sdist(dir: &Path, version: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        let top = dir.join(format!("pkg-{version}"));
        for (path, text) in files {
            let file = top.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        let out = dir.join(format!("pkg-{version}.tar.gz"));
        let status = std::process::Command::new("tar")
            .arg("-czf")
            .arg(&out)
            .arg("-C")
            .arg(dir)
            .arg(format!("pkg-{version}"))
            .status()
            .unwrap();
        assert!(status.success());
        out
    }

    #[test]
    fn only_the_named_files_come_from_the_fix_release() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q"]).unwrap();
        let base = sdist(dir.path(), "1.0", &[("pkg/lru.py", "old\n")]);
        let reference = sdist(
            dir.path(),
            "1.1",
            &[("pkg/lru.py", "buggy\n"), ("pkg/other.py", "1.1\n")],
        );
        // The fix release also changed other files, and ships a deeper file of the same name.
        let later = sdist(
            dir.path(),
            "2.0",
            &[
                ("pkg/lru.py", "fixed\n"),
                ("pkg/other.py", "2.0\n"),
                ("vendored/pkg/lru.py", "not this one\n"),
            ],
        );
        let base_sha = commit_sdist(&repo, &base, &release("1.0"), None).unwrap();
        let reference_sha =
            commit_sdist(&repo, &reference, &release("1.1"), Some(&base_sha)).unwrap();
        let fix = FollowUpRelease {
            release: release("2.0"),
            paths: vec!["pkg/lru.py".into()],
            note: None,
        };
        let fixed = with_release_follow_up(&repo, &reference_sha, &later, &fix).unwrap();
        let show = |path: &str| git(&repo, &["show", &format!("{fixed}:{path}")]);
        assert_eq!(show("pkg/lru.py").unwrap(), "fixed");
        assert_eq!(show("pkg/other.py").unwrap(), "1.1", "only the named file");
        assert!(show("vendored/pkg/lru.py").is_err());
        assert_eq!(
            git(&repo, &["rev-parse", &format!("{fixed}^")]).unwrap(),
            reference_sha
        );
        // Deterministic: the same fix makes the same commit.
        assert_eq!(
            with_release_follow_up(&repo, &reference_sha, &later, &fix).unwrap(),
            fixed
        );

        // A path the fix release does not ship is named.
        let missing = FollowUpRelease {
            paths: vec!["pkg/gone.py".into()],
            ..fix
        };
        let err = with_release_follow_up(&repo, &reference_sha, &later, &missing).unwrap_err();
        assert!(
            format!("{err:#}").contains("pkg==2.0 ships no file pkg/gone.py"),
            "{err:#}"
        );
    }
}
