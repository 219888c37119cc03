//! The `github-actions` backend: each grade is a `workflow_dispatch` of the grading workflow in a
//! private grader repository (which holds the hidden probes), on self-hosted GPU runners picked
//! by `runs-on` labels. The run posts its result to the server with the dispatch's token.
//!
//! Following a run: `workflow_run` / `workflow_job` webhooks wake the server's follower, which
//! reads the run (`GET …/actions/runs/{id}`); polling is the backstop for lost webhooks.

use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{BackendError, Outcome, Placement, RemoteState, Submission};
use crate::service::github::{GitHubApp, GitHubError, RepoClient, Retry, WorkflowRunSummary};

/// `[backends.github_actions]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionsConfig {
    /// The private grader repository, `owner/name`; the App must be installed on it with
    /// `actions: write` and subscribed to `workflow_run` and `workflow_job`.
    pub repository: String,
    /// The workflow file in it (runners/github-actions/grade.yml is the example).
    #[serde(default = "default_workflow")]
    pub workflow: String,
    /// The branch or tag of the grader repository the workflow runs from.
    #[serde(default = "default_ref", rename = "ref")]
    pub git_ref: String,
    /// Labels every grading runner has; `gpus-N` (N GPUs) and the task's labels are added.
    #[serde(default = "default_runner_labels")]
    pub runner_labels: Vec<String>,
    /// The App's installation on the grader repository (looked up when not given).
    #[serde(default)]
    pub installation_id: Option<u64>,
}

fn default_workflow() -> String {
    "grade.yml".into()
}
fn default_ref() -> String {
    "main".into()
}
fn default_runner_labels() -> Vec<String> {
    vec!["self-hosted".into(), "gpu".into()]
}

/// The `runs-on` labels of a grade (pure).
pub fn runs_on(base: &[String], placement: &Placement) -> Vec<String> {
    let mut labels = base.to_vec();
    if placement.gpus > 0 {
        labels.push(format!("gpus-{}", placement.gpus));
    }
    for label in &placement.labels {
        if !labels.contains(label) {
            labels.push(label.clone());
        }
    }
    labels
}

/// The workflow's inputs for one dispatch (pure). All strings: GitHub passes inputs as such.
pub fn inputs(sub: &Submission, token: &SecretString, labels: &[String]) -> Map<String, Value> {
    let mut m = Map::new();
    let mut put = |k: &str, v: String| {
        m.insert(k.to_owned(), Value::String(v));
    };
    put("name", sub.name());
    put("mirror_repo", sub.repo.clone());
    put("pr", sub.number.to_string());
    put("head_sha", sub.head_sha.clone());
    put("task", sub.task_id.clone());
    put("job_id", sub.job_id.to_string());
    put("dispatch", sub.dispatch.to_string());
    put("result_url", sub.result_url.clone());
    put("result_token", token.expose_secret().to_owned());
    put(
        "runs_on",
        serde_json::to_string(labels).expect("strings serialize"),
    );
    m
}

/// A workflow run as the engine state the follower works with (pure).
pub fn remote_state(run: &WorkflowRunSummary) -> RemoteState {
    let detail = |what: &str| {
        format!(
            "workflow run {} ({}) {what}",
            run.id,
            if run.html_url.is_empty() {
                run.display_title.as_str()
            } else {
                run.html_url.as_str()
            }
        )
    };
    match run.status.as_str() {
        "completed" => {
            let conclusion = run.conclusion.as_deref().unwrap_or("unknown");
            let outcome = match conclusion {
                "success" => Outcome::Completed,
                "cancelled" => Outcome::Cancelled,
                "timed_out" => Outcome::TimedOut,
                "startup_failure" => Outcome::LaunchFailed,
                _ => Outcome::Failed,
            };
            RemoteState::Ended {
                outcome,
                detail: detail(&format!("completed: {conclusion}")),
            }
        }
        "in_progress" => RemoteState::Running { node: None },
        // queued, requested, waiting, pending
        _ => RemoteState::Queued,
    }
}

fn backend_error(e: GitHubError) -> BackendError {
    match e.retry() {
        Retry::After(_) => BackendError::Transient(e.to_string()),
        Retry::Never => BackendError::Rejected(e.to_string()),
    }
}

pub struct GitHubActions {
    config: ActionsConfig,
    github: Arc<GitHubApp>,
    /// The installation on the grader repository, configured or looked up once.
    installation: tokio::sync::OnceCell<u64>,
}

impl GitHubActions {
    pub fn new(config: ActionsConfig, github: Arc<GitHubApp>) -> GitHubActions {
        let installation = match config.installation_id {
            Some(id) => tokio::sync::OnceCell::new_with(Some(id)),
            None => tokio::sync::OnceCell::new(),
        };
        GitHubActions {
            config,
            github,
            installation,
        }
    }

    async fn client(&self) -> Result<RepoClient, BackendError> {
        let (owner, name) = self.config.repository.split_once('/').ok_or_else(|| {
            BackendError::Rejected(format!(
                "backends.github_actions.repository {:?} is not owner/name",
                self.config.repository
            ))
        })?;
        let installation = *self
            .installation
            .get_or_try_init(|| async {
                self.github
                    .repo_installation_id(owner, name)
                    .await
                    .map_err(backend_error)?
                    .ok_or_else(|| {
                        BackendError::Rejected(format!(
                            "the App is not installed on the grader repository {}",
                            self.config.repository
                        ))
                    })
            })
            .await?;
        self.github
            .client(installation, owner, name)
            .await
            .map_err(|e| BackendError::Transient(format!("{e:#}")))
    }

    /// Dispatches the grading workflow; the run's id is the external id.
    pub async fn submit(
        &self,
        sub: &Submission,
        token: &SecretString,
    ) -> Result<String, BackendError> {
        let client = self.client().await?;
        let labels = runs_on(&self.config.runner_labels, &sub.placement);
        let inputs = inputs(sub, token, &labels);
        let run = client
            .dispatch_workflow(&self.config.workflow, &self.config.git_ref, &inputs)
            .await
            .map_err(backend_error)?;
        match run {
            Some(id) => Ok(id.to_string()),
            // GitHub did not say which run it made: find it by its name (the run-name).
            None => self
                .find(&sub.name())
                .await?
                .ok_or_else(|| BackendError::Transient(format!(
                    "dispatched {} but GitHub did not say which run it started; the follower looks for it by name",
                    sub.name()
                ))),
        }
    }

    pub async fn find(&self, name: &str) -> Result<Option<String>, BackendError> {
        let client = self.client().await?;
        let run = client
            .find_workflow_run(&self.config.workflow, name)
            .await
            .map_err(backend_error)?;
        Ok(run.map(|r| r.id.to_string()))
    }

    pub async fn state(&self, id: &str) -> Result<RemoteState, BackendError> {
        let run_id = parse_id(id)?;
        let client = self.client().await?;
        match client.workflow_run(run_id).await {
            Ok(run) => Ok(remote_state(&run)),
            Err(e) if e.is_not_found() => Ok(RemoteState::Unknown),
            Err(e) => Err(BackendError::Transient(e.to_string())),
        }
    }

    pub async fn cancel(&self, id: &str) -> Result<(), BackendError> {
        let run_id = parse_id(id)?;
        let client = self.client().await?;
        match client.cancel_workflow_run(run_id).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(backend_error(e)),
        }
    }
}

fn parse_id(id: &str) -> Result<u64, BackendError> {
    id.parse()
        .map_err(|_| BackendError::Rejected(format!("{id:?} is not a workflow run id")))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn placement(gpus: u32, labels: &[&str]) -> Placement {
        Placement {
            gpus,
            memory_mb: 1,
            cpus: 1,
            time_limit: Duration::from_secs(60),
            labels: labels.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn runs_on_adds_the_gpu_count_and_task_labels_once() {
        let base = vec!["self-hosted".to_string(), "gpu".to_string()];
        assert_eq!(runs_on(&base, &placement(0, &[])), ["self-hosted", "gpu"]);
        assert_eq!(
            runs_on(&base, &placement(4, &["gpu", "h100"])),
            ["self-hosted", "gpu", "gpus-4", "h100"]
        );
    }

    #[test]
    fn inputs_are_strings_and_carry_the_job() {
        let sub = Submission {
            job_id: 42,
            dispatch: 2,
            task_id: "t".into(),
            repo: "o/r".into(),
            number: 7,
            head_sha: "abc".into(),
            placement: placement(1, &[]),
            result_url: "http://s/jobs/42/result".into(),
        };
        let m = inputs(&sub, &SecretString::from("tok".to_owned()), &["a".into()]);
        assert!(m.values().all(Value::is_string));
        assert!(m.len() <= 25, "GitHub takes at most 25 inputs");
        assert_eq!(m["name"], "infradev-42-2");
        assert_eq!(m["runs_on"], r#"["a"]"#);
        assert_eq!(m["result_token"], "tok");
        assert_eq!(m["pr"], "7");
    }

    #[test]
    fn run_status_and_conclusion_map_to_states() {
        let run = |status: &str, conclusion: Option<&str>| WorkflowRunSummary {
            id: 1,
            status: status.into(),
            conclusion: conclusion.map(str::to_owned),
            display_title: "infradev-1-1".into(),
            html_url: String::new(),
            run_attempt: 1,
        };
        let ended = |s: RemoteState| match s {
            RemoteState::Ended { outcome, .. } => Some(outcome),
            _ => None,
        };
        assert_eq!(remote_state(&run("queued", None)), RemoteState::Queued);
        assert_eq!(remote_state(&run("waiting", None)), RemoteState::Queued);
        assert_eq!(
            remote_state(&run("in_progress", None)),
            RemoteState::Running { node: None }
        );
        let table = [
            ("success", Outcome::Completed),
            ("failure", Outcome::Failed),
            ("cancelled", Outcome::Cancelled),
            ("timed_out", Outcome::TimedOut),
            ("startup_failure", Outcome::LaunchFailed),
            ("action_required", Outcome::Failed),
        ];
        for (conclusion, want) in table {
            assert_eq!(
                ended(remote_state(&run("completed", Some(conclusion)))),
                Some(want),
                "{conclusion}"
            );
        }
    }
}
