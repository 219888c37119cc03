//! The resync of open pull requests: PRs opened before the App was installed on a repository,
//! or while the service was down for longer than GitHub keeps deliveries for redelivery, get
//! the grades (or neutral checks) a push would have given them.
//!
//! It runs on start for every installation the store knows, and when an installation is
//! created or gains repositories. For each open PR (`GET /repos/{o}/{r}/pulls?state=open`) it
//! decides as on a push ([`decide_resync`]) unless the store already saw the PR in that state,
//! so a second resync changes nothing; a PR the store has as open but GitHub no longer lists
//! is read again, and its grades are cancelled if it was closed meanwhile.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use super::decide::{Known, decide_resync};
use super::processor::{Failure, Processor, from_api, github_failure, state_of};
use crate::service::webhook::{PullRequest, Repo};

impl Processor {
    /// The resync on start, once it succeeds: every repository of every installation the
    /// store knows. A failure is logged by the caller and tried again on the next pass.
    pub async fn resync_on_start(&self) -> anyhow::Result<()> {
        if self.resynced.load(Ordering::Acquire) {
            return Ok(());
        }
        for installation_id in self.store.known_installations().await? {
            match self.resync(installation_id, &[]).await {
                Ok(()) => {}
                // An installation that is gone (deleted, suspended) has nothing to resync.
                Err(Failure::Permanent(e)) => {
                    tracing::warn!(installation_id, error = %format!("{e:#}"), "cannot resync an installation");
                }
                Err(Failure::Transient(e)) => return Err(e),
            }
        }
        self.resynced.store(true, Ordering::Release);
        Ok(())
    }

    /// Resyncs `repos` (full names) of an installation; none: every repository it can access.
    pub(super) async fn resync(
        &self,
        installation_id: u64,
        repos: &[String],
    ) -> Result<(), Failure> {
        let repos = if repos.is_empty() {
            self.github
                .installation_repositories(installation_id)
                .await
                .map_err(github_failure)?
        } else {
            repos.to_vec()
        };
        for full_name in repos {
            let Some((owner, name)) = full_name.split_once('/') else {
                tracing::warn!(%full_name, "not a repository's full name: not resynced");
                continue;
            };
            let repo = Repo {
                owner: owner.to_owned(),
                name: name.to_owned(),
            };
            let found = self.resync_repo(installation_id, &repo).await?;
            tracing::info!(repo = %full_name, installation_id, open_pulls = found, "resynced");
        }
        Ok(())
    }

    /// Resyncs one repository; returns how many open PRs GitHub listed.
    async fn resync_repo(&self, installation_id: u64, repo: &Repo) -> Result<usize, Failure> {
        let client = self
            .github
            .client(installation_id, &repo.owner, &repo.name)
            .await
            .map_err(github_failure)?;
        let open = client.open_pull_requests().await.map_err(github_failure)?;
        let listed: BTreeSet<u64> = open.iter().map(|p| p.number).collect();
        let count = open.len();
        for pull in open {
            self.resync_pull(installation_id, repo, from_api(pull))
                .await?;
        }
        // Closed while nobody listened: read it again (closed → its grades are cancelled).
        let stored_open = self
            .store
            .open_pull_numbers(&repo.full_name())
            .await
            .map_err(|e| Failure::Transient(e.into()))?;
        for number in stored_open.into_iter().filter(|n| !listed.contains(n)) {
            let pr = self.fetch_pull(repo, installation_id, number).await?;
            self.resync_pull(installation_id, repo, pr).await?;
        }
        Ok(count)
    }

    async fn resync_pull(
        &self,
        installation_id: u64,
        repo: &Repo,
        pr: PullRequest,
    ) -> Result<(), Failure> {
        let stored = self
            .store
            .get_pull(&repo.full_name(), pr.number)
            .await
            .map_err(|e| Failure::Transient(e.into()))?;
        let known = Known {
            pulls: stored
                .iter()
                .map(|p| (p.number, state_of(p)))
                .collect::<BTreeMap<_, _>>(),
            installation_id: Some(installation_id),
            ..Known::default()
        };
        let decided = self
            .with_settings(|settings| decide_resync(repo, installation_id, &pr, settings, &known));
        for decision in decided.decisions {
            tracing::debug!(pr = pr.number, ?decision, "resync");
            self.apply(decision).await?;
        }
        // After the decisions, so that a resync cut short is done again.
        if let Some(state) = decided.pull {
            self.store_pull(repo, installation_id, &pr, &state).await?;
        }
        Ok(())
    }
}
