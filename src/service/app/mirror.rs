//! Local bare mirrors of graded repositories: a PR head is fetched into the mirror with the
//! installation token, and graded from there. The token is handed to git through its
//! environment (never the command line, never a config file), so it reaches neither the
//! mirror's config nor the sandbox, which only ever sees a private clone of the mirror.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use secrecy::{ExposeSecret, SecretString};

pub struct Mirrors {
    dir: PathBuf,
    rewrites: BTreeMap<String, String>,
    /// One fetch at a time per mirror: workers and dispatchers fetch side by side, and two
    /// fetches of one commit into one repository would race for its ref.
    locks: Mutex<BTreeMap<String, Arc<Mutex<()>>>>,
}

impl Mirrors {
    pub fn new(dir: PathBuf, rewrites: BTreeMap<String, String>) -> Self {
        Mirrors {
            dir,
            rewrites,
            locks: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self, repo: &str) -> Arc<Mutex<()>> {
        self.locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(repo.to_owned())
            .or_default()
            .clone()
    }

    /// Fetches `commits` of `repo` (`owner/name`) from `clone_url` into its mirror and returns
    /// the mirror's path. Commits already there are not fetched again.
    pub fn fetch(
        &self,
        repo: &str,
        clone_url: &str,
        token: Option<&SecretString>,
        commits: &[&str],
    ) -> anyhow::Result<PathBuf> {
        let lock = self.lock(repo);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let mirror = self.dir.join(format!("{repo}.git"));
        if !mirror.join("HEAD").is_file() {
            std::fs::create_dir_all(&mirror)
                .with_context(|| format!("cannot create {}", mirror.display()))?;
            git(&mirror, None, &["init", "--quiet", "--bare"])?;
        }
        let url = self.rewrite(clone_url);
        let missing: Vec<&str> = commits
            .iter()
            .copied()
            .filter(|c| !has_commit(&mirror, c))
            .collect();
        if missing.is_empty() {
            return Ok(mirror);
        }
        let token = token.filter(|_| url.starts_with("https://") || url.starts_with("http://"));
        // Each commit gets a ref of its own, so the mirror is not empty to clone and gc keeps it.
        let refspecs: Vec<String> = missing
            .iter()
            .map(|c| format!("{c}:refs/infradev/{c}"))
            .collect();
        let mut args = vec!["fetch", "--quiet", "--no-tags", url.as_str()];
        args.extend(refspecs.iter().map(String::as_str));
        git(&mirror, token, &args).with_context(|| {
            format!(
                "cannot fetch {} from {}",
                missing.join(", "),
                redact_url(&url)
            )
        })?;
        Ok(mirror)
    }

    fn rewrite(&self, url: &str) -> String {
        // The longest matching prefix wins, as with git's insteadOf.
        let best = self
            .rewrites
            .iter()
            .filter(|(from, _)| url.starts_with(from.as_str()))
            .max_by_key(|(from, _)| from.len());
        match best {
            Some((from, to)) => format!("{to}{}", &url[from.len()..]),
            None => url.to_owned(),
        }
    }
}

fn has_commit(mirror: &Path, sha: &str) -> bool {
    git(
        mirror,
        None,
        &["cat-file", "-e", &format!("{sha}^{{commit}}")],
    )
    .is_ok()
}

fn git(dir: &Path, token: Option<&SecretString>, args: &[&str]) -> anyhow::Result<()> {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0");
    if let Some(token) = token {
        use base64::Engine;
        let basic = base64::engine::general_purpose::STANDARD
            .encode(format!("x-access-token:{}", token.expose_secret()));
        cmd.env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraHeader")
            .env(
                "GIT_CONFIG_VALUE_0",
                format!("Authorization: Basic {basic}"),
            );
    }
    let out = cmd.output().context("cannot run git")?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn redact_url(url: &str) -> String {
    match url.split_once('@') {
        Some((scheme_and_user, host)) if scheme_and_user.contains("://") => {
            format!(
                "{}://[credentials]@{host}",
                scheme_and_user.split("://").next().unwrap_or("")
            )
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_rewrite_wins() {
        let m = Mirrors::new(
            PathBuf::from("/x"),
            BTreeMap::from([
                ("https://github.com/".to_owned(), "file:///m/".to_owned()),
                (
                    "https://github.com/acme/".to_owned(),
                    "file:///acme/".to_owned(),
                ),
            ]),
        );
        assert_eq!(
            m.rewrite("https://github.com/acme/vllm.git"),
            "file:///acme/vllm.git"
        );
        assert_eq!(
            m.rewrite("https://github.com/other/x.git"),
            "file:///m/other/x.git"
        );
        assert_eq!(
            m.rewrite("https://gitlab.com/x.git"),
            "https://gitlab.com/x.git"
        );
    }

    #[test]
    fn credentials_in_urls_are_not_echoed() {
        assert_eq!(
            redact_url("https://x:tok@github.com/a/b"),
            "https://[credentials]@github.com/a/b"
        );
    }
}
