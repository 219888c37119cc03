//! The result endpoint's logic: a remote run posts its grade with the token minted for its
//! dispatch. The token is checked against its stored hash, may be used once and expires; a
//! result for a cancelled, superseded or finished job is recorded and ignored; an accepted one
//! finishes the job and queues its reports in the same transaction, exactly as a local grade.

use chrono::Utc;

use super::outbox::Message;
use crate::service::backend::ResultBody;
use crate::service::backend::token;
use crate::service::store::{Disposition, Job, JobId, JobState, Store, StoreError, remote_owner};

/// Runs lost (or reporting our own faults) before a job is reported neutral instead of being
/// dispatched again: one re-dispatch, then a neutral check.
pub const MAX_LOST_RUNS: u32 = 1;

/// What the endpoint answers a run with a valid token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The job finished with this result.
    Accepted,
    /// The result reports an infrastructure fault; the job goes back for a re-dispatch.
    Retried(String),
    /// Recorded, not used.
    Ignored(String),
    /// This token's result was already received; nothing changed.
    Duplicate,
}

impl Answer {
    pub fn status(&self) -> &'static str {
        match self {
            Answer::Accepted => "accepted",
            Answer::Retried(_) => "retried",
            Answer::Ignored(_) => "ignored",
            Answer::Duplicate => "duplicate",
        }
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            Answer::Retried(r) | Answer::Ignored(r) => Some(r),
            _ => None,
        }
    }
}

/// Why a result was refused.
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    /// No token, a token not minted for this job, or an expired one (401).
    #[error("{0}")]
    Unauthorized(String),
    /// The body is not a result for this job and dispatch (400).
    #[error("{0}")]
    BadBody(String),
    /// Ours: the store failed (503; the run retries).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What to do with a result for dispatch `dispatch` of `job` (pure).
pub fn dispose(job: &Job, dispatch: u32, infra_fault: Option<&str>) -> Answer {
    match job.state {
        JobState::Cancelled => return Answer::Ignored("the job was cancelled".into()),
        JobState::Finished => return Answer::Ignored("the job already finished".into()),
        JobState::Queued => {
            return Answer::Ignored(format!(
                "dispatch {dispatch} was already given up; the job waits for another"
            ));
        }
        JobState::Running => {}
    }
    if job.dispatches != dispatch {
        return Answer::Ignored(format!(
            "dispatch {dispatch} was superseded by dispatch {}",
            job.dispatches
        ));
    }
    match infra_fault {
        Some(fault) if job.lost_runs < MAX_LOST_RUNS => Answer::Retried(fault.to_owned()),
        _ => Answer::Accepted,
    }
}

/// Checks the token, records the result and applies it. Wake the outbox (and the dispatcher on
/// [`Answer::Retried`]) afterwards.
pub async fn receive(
    store: &Store,
    job_id: i64,
    bearer: Option<&str>,
    body: &[u8],
) -> Result<Answer, ResultError> {
    let token = bearer
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ResultError::Unauthorized("no bearer token".into()))?;
    let hash = token::hash(token);
    let id = JobId(job_id);
    let found = store
        .find_job_token(id, &hash)
        .await?
        .ok_or_else(|| ResultError::Unauthorized(format!("no such token for job {job_id}")))?;
    if found.used_at.is_some() {
        return Ok(Answer::Duplicate);
    }
    if found.expires_at < Utc::now() {
        return Err(ResultError::Unauthorized(format!(
            "the token of job {job_id} dispatch {} expired at {}",
            found.dispatch, found.expires_at
        )));
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ResultError::BadBody("the body is not UTF-8".into()))?;
    let de = &mut serde_json::Deserializer::from_str(text);
    let result: ResultBody = serde_path_to_error::deserialize(de)
        .map_err(|e| ResultError::BadBody(format!("the body is not a result: {e}")))?;
    if result.job_id != job_id || result.dispatch != found.dispatch {
        return Err(ResultError::BadBody(format!(
            "the body is for job {} dispatch {}, the token for job {job_id} dispatch {}",
            result.job_id, result.dispatch, found.dispatch
        )));
    }

    let mut tx = store.begin().await?;
    if !tx.use_job_token(&hash).await? {
        tx.rollback().await?;
        return Ok(Answer::Duplicate);
    }
    let job = tx
        .get_job(id)
        .await?
        .ok_or_else(|| ResultError::Unauthorized(format!("no job {job_id}")))?;
    let infra = result.infra_fault();
    let answer = dispose(&job, found.dispatch, infra.as_deref());
    let owner = remote_owner(&job.backend);
    let answer = match answer {
        Answer::Accepted => {
            let applied = match &result.report {
                Some(report) => {
                    let verdict = report.grade.verdict.as_str().to_owned();
                    let json = serde_json::to_string(report).expect("a report serializes");
                    tx.finish_job(id, &owner, &verdict, &json).await?
                }
                None => {
                    let error = result.error.as_deref().unwrap_or("no result");
                    tx.fail_job(id, &owner, error).await?
                }
            };
            if applied {
                tx.close_remote(id, found.dispatch).await?;
                tx.push_outbox(&Message::CheckCompleted { job_id }.to_row())
                    .await?;
                tx.push_outbox(&Message::StickyComment { job_id }.to_row())
                    .await?;
                Answer::Accepted
            } else {
                Answer::Ignored("the job is no longer this dispatch's".into())
            }
        }
        Answer::Retried(fault) => {
            let why = format!(
                "infrastructure fault on dispatch {}: {fault}",
                found.dispatch
            );
            match tx
                .requeue_remote(id, found.dispatch, true, &why, None)
                .await?
            {
                Some(_) => Answer::Retried(fault),
                None => Answer::Ignored("the job is no longer this dispatch's".into()),
            }
        }
        other => other,
    };
    let disposition = match &answer {
        Answer::Accepted => Disposition::Accepted,
        Answer::Retried(_) => Disposition::Retried,
        _ => Disposition::Ignored,
    };
    tx.insert_job_result(id, found.dispatch, disposition, answer.reason(), text)
        .await?;
    tx.commit().await?;
    metrics::counter!("infradev_remote_results", "status" => answer.status()).increment(1);
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: JobState, dispatches: u32, lost_runs: u32) -> Job {
        let now = Utc::now();
        Job {
            id: JobId(1),
            repo: "o/r".into(),
            number: 1,
            head_sha: "h".into(),
            task_id: "t".into(),
            installation_id: 1,
            state,
            attempts: dispatches,
            lease_owner: None,
            lease_until: None,
            check_run_id: None,
            verdict: None,
            result_json: None,
            error: None,
            created_at: now,
            updated_at: now,
            backend: "slurm".into(),
            dispatches,
            external_id: None,
            remote_open: true,
            lost_runs,
            remote_restarts: 0,
        }
    }

    #[test]
    fn results_are_used_only_for_the_running_dispatch() {
        use JobState::*;
        // state, dispatches, lost_runs, the result's dispatch, infra fault, answer
        type Row = (JobState, u32, u32, u32, Option<&'static str>, &'static str);
        let table: &[Row] = &[
            (Running, 1, 0, 1, None, "accepted"),
            (Running, 2, 1, 2, None, "accepted"),
            (Running, 2, 1, 1, None, "ignored"), // superseded dispatch
            (Cancelled, 1, 0, 1, None, "ignored"),
            (Finished, 1, 0, 1, None, "ignored"),
            (Queued, 1, 1, 1, None, "ignored"),
            (Running, 1, 0, 1, Some("docker died"), "retried"),
            (Running, 2, 1, 2, Some("docker died"), "accepted"), // reported neutral
        ];
        for (state, dispatches, lost, dispatch, infra, want) in table {
            let got = dispose(&job(*state, *dispatches, *lost), *dispatch, *infra);
            assert_eq!(
                got.status(),
                *want,
                "{state:?} dispatches={dispatches} lost={lost} result for {dispatch} infra={infra:?}: {got:?}"
            );
        }
    }
}
