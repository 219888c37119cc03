//! GitHub Actions calls on one repository: dispatch a workflow, read a run, find a run again by
//! its name, cancel a run. The scale-out backend uses them on the private grader repository,
//! whose `grade.yml` (runners/github-actions/) grades one PR head on a self-hosted GPU runner and
//! posts the result back to the server.

use http::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::client::{PER_PAGE, RepoClient, has_next};
use super::error::GitHubError;
use super::transport::{api_error, decode, enc};
use super::types::WorkflowRunSummary;

/// The most inputs a workflow dispatch may carry (GitHub answers 422 beyond).
pub const MAX_DISPATCH_INPUTS: usize = 25;

/// Pages read by [`RepoClient::find_workflow_run`]. The run looked for was dispatched moments
/// before the server lost track of it, so it is among the newest; reading further would only
/// cost rate limit (and GitHub stops at 1,000 results for a filtered listing anyway).
const FIND_PAGES: usize = 3;

#[derive(Deserialize)]
struct DispatchReply {
    workflow_run_id: u64,
}

#[derive(Deserialize)]
struct RunReply {
    id: u64,
    status: Option<String>,
    conclusion: Option<String>,
    display_title: String,
    html_url: String,
    run_attempt: Option<u32>,
}

impl From<RunReply> for WorkflowRunSummary {
    fn from(r: RunReply) -> WorkflowRunSummary {
        WorkflowRunSummary {
            id: r.id,
            status: r.status.unwrap_or_default(),
            conclusion: r.conclusion,
            display_title: r.display_title,
            html_url: r.html_url,
            run_attempt: r.run_attempt.unwrap_or(1),
        }
    }
}

#[derive(Deserialize)]
struct RunList {
    total_count: u64,
    workflow_runs: Vec<RunReply>,
}

impl RepoClient {
    /// Start `workflow` (a file name such as `grade.yml`, or its numeric id) on `git_ref` (a
    /// branch or tag of this repository) with `inputs`
    /// (`POST /repos/{o}/{r}/actions/workflows/{workflow}/dispatches`). Asks GitHub for the run's
    /// details (`return_run_details`) and returns the new run's id; `None` when GitHub answers
    /// 204 without them (an older API or GitHub Enterprise Server), and the caller has to find
    /// the run by its name ([`RepoClient::find_workflow_run`]).
    ///
    /// Input values must be strings and there may be at most [`MAX_DISPATCH_INPUTS`]: GitHub
    /// rejects anything else with a 422, so we refuse to send it.
    pub async fn dispatch_workflow(
        &self,
        workflow: &str,
        git_ref: &str,
        inputs: &Map<String, Value>,
    ) -> Result<Option<u64>, GitHubError> {
        check_dispatch(workflow, git_ref, inputs)?;
        let body = json!({
            "ref": git_ref,
            "inputs": inputs,
            "return_run_details": true,
        });
        let path = self.path(&format!("/actions/workflows/{}/dispatches", enc(workflow)));
        let reply = self.call_ok(Method::POST, &path, Some(&body)).await?;
        if reply.status == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        let created: DispatchReply = decode(&Method::POST, &path, &reply)?;
        Ok(Some(created.workflow_run_id))
    }

    /// One workflow run (`GET /repos/{o}/{r}/actions/runs/{run_id}`).
    pub async fn workflow_run(&self, run_id: u64) -> Result<WorkflowRunSummary, GitHubError> {
        let path = self.path(&format!("/actions/runs/{run_id}"));
        let reply = self.call_ok(Method::GET, &path, None).await?;
        let run: RunReply = decode(&Method::GET, &path, &reply)?;
        Ok(run.into())
    }

    /// Ask GitHub to cancel a workflow run (`POST /repos/{o}/{r}/actions/runs/{run_id}/cancel`;
    /// cancelling is asynchronous: the run reports `completed`/`cancelled` a little later). A run
    /// that has already completed cannot be cancelled (409): that is what the caller wanted, so
    /// it is not an error.
    pub async fn cancel_workflow_run(&self, run_id: u64) -> Result<(), GitHubError> {
        let path = self.path(&format!("/actions/runs/{run_id}/cancel"));
        let reply = self.call(Method::POST, &path, None).await?;
        if reply.status.is_success() {
            return Ok(());
        }
        if reply.status == StatusCode::CONFLICT {
            // "Cannot cancel a workflow run that is completed." is the only conflict GitHub
            // describes for this operation.
            tracing::debug!(run_id, body = %reply.body, "workflow run already completed");
            return Ok(());
        }
        Err(api_error(&Method::POST, &path, &reply))
    }

    /// The newest run of `workflow` started by a dispatch whose `display_title` is exactly
    /// `display_title`
    /// (`GET /repos/{o}/{r}/actions/workflows/{workflow}/runs?event=workflow_dispatch`). Used
    /// after a crash between dispatching and recording the run id, and when GitHub did not return
    /// the id: the grading workflow's `run-name` is the dispatch's unique `name` input. Only the
    /// newest few hundred runs are searched.
    pub async fn find_workflow_run(
        &self,
        workflow: &str,
        display_title: &str,
    ) -> Result<Option<WorkflowRunSummary>, GitHubError> {
        let mut seen = 0u64;
        for page in 1..=FIND_PAGES {
            let path = self.path(&format!(
                "/actions/workflows/{}/runs?event=workflow_dispatch&per_page={PER_PAGE}&page={page}",
                enc(workflow)
            ));
            let reply = self.call_ok(Method::GET, &path, None).await?;
            let list: RunList = decode(&Method::GET, &path, &reply)?;
            let count = list.workflow_runs.len();
            seen += count as u64;
            // GitHub lists the newest first; the largest id is the newest whatever the order.
            let newest = list
                .workflow_runs
                .into_iter()
                .filter(|r| r.display_title == display_title)
                .max_by_key(|r| r.id);
            if let Some(run) = newest {
                return Ok(Some(run.into()));
            }
            if count == 0 || seen >= list.total_count || !has_next(&reply, count) {
                break;
            }
        }
        Ok(None)
    }
}

/// What GitHub would reject with a 422 (or cannot route), refused before sending.
fn check_dispatch(
    workflow: &str,
    git_ref: &str,
    inputs: &Map<String, Value>,
) -> Result<(), GitHubError> {
    if workflow.is_empty() {
        return Err(GitHubError::InvalidInput(
            "workflow dispatch: the workflow file name is empty".into(),
        ));
    }
    if git_ref.is_empty() {
        return Err(GitHubError::InvalidInput(format!(
            "workflow dispatch of {workflow}: the git ref is empty"
        )));
    }
    if inputs.len() > MAX_DISPATCH_INPUTS {
        return Err(GitHubError::InvalidInput(format!(
            "workflow dispatch of {workflow}: {} inputs, GitHub accepts at most {MAX_DISPATCH_INPUTS}",
            inputs.len()
        )));
    }
    if let Some((name, value)) = inputs.iter().find(|(_, v)| !v.is_string()) {
        return Err(GitHubError::InvalidInput(format!(
            "workflow dispatch of {workflow}: input {name:?} is {value}, but every input must be a string"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(pairs: &[(&str, Value)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn dispatch_inputs_are_checked_before_sending() {
        let ok = inputs(&[("name", json!("infradev-1-1")), ("pr", json!("7"))]);
        assert!(check_dispatch("grade.yml", "main", &ok).is_ok());
        assert!(check_dispatch("grade.yml", "main", &Map::new()).is_ok());

        let refused =
            |workflow: &str, git_ref: &str, inputs: &Map<String, Value>| match check_dispatch(
                workflow, git_ref, inputs,
            ) {
                Err(GitHubError::InvalidInput(message)) => message,
                other => panic!("expected a refusal, got {other:?}"),
            };
        assert!(refused("", "main", &ok).contains("workflow file name is empty"));
        assert!(refused("grade.yml", "", &ok).contains("git ref is empty"));
        let many: Map<String, Value> = (0..26).map(|i| (format!("k{i}"), json!("v"))).collect();
        assert!(refused("grade.yml", "main", &many).contains("26 inputs"));
        let number = inputs(&[("pr", json!(7))]);
        assert!(refused("grade.yml", "main", &number).contains(r#"input "pr" is 7"#));
        let list = inputs(&[("runs_on", json!(["self-hosted"]))]);
        assert!(refused("grade.yml", "main", &list).contains("must be a string"));
        let exactly_25: Map<String, Value> =
            (0..25).map(|i| (format!("k{i}"), json!("v"))).collect();
        assert!(check_dispatch("grade.yml", "main", &exactly_25).is_ok());
    }
}
