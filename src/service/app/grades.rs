//! Stored grades as the pages, the dashboard and `infradev stats --store` read them: a
//! finished job becomes a statistics [`Sample`] (one aggregation for every reader), a job
//! becomes a [`GradePage`], the store's figures become a [`Dashboard`].

use std::path::Path;

use anyhow::Context;
use chrono::{NaiveDate, Utc};

use crate::analysis::stats::{Labels, Sample, aggregate, categories_by_agent, series};
use crate::grade::report::Report;
use crate::service::store::{GradedJob, JobId, Store};
use crate::service::web::{Dashboard, GradePage, HistoryRow, QueueRow, RecentGrade};

/// Most finished jobs the dashboard and `stats --store` read (the newest).
pub const MAX_GRADES: u32 = 100_000;
/// Grades listed as recent on the dashboard.
const RECENT: usize = 20;

/// The report of a finished job, when it has one that parses.
pub fn report_of(job: &GradedJob) -> Option<Report> {
    serde_json::from_str(job.job.result_json.as_deref()?).ok()
}

/// A finished job as a statistics sample, with the day it finished: its report's sample
/// (labelled with the PR author, the agent account), or an infra sample when it could not be
/// graded. The repository is the one the PR was opened against. `None` for an unfinished job.
pub fn sample_of(job: &GradedJob) -> Option<(NaiveDate, Sample)> {
    let day = job.finished_at?.date_naive();
    let author = job.author.clone().unwrap_or_else(|| "unknown".to_owned());
    let labels = Labels {
        agent: author.clone(),
        model: None,
        account: Some(author),
    };
    let mut sample = match report_of(job) {
        Some(report) => Sample::from_report(&report, labels),
        None => Sample::infra(&job.job.task_id, &job.job.repo, labels),
    };
    sample.repository = job.job.repo.clone();
    Some((day, sample))
}

/// Every finished job's sample, oldest first.
pub async fn samples(store: &Store) -> anyhow::Result<Vec<(NaiveDate, Sample)>> {
    let jobs = store
        .finished_jobs(None, MAX_GRADES)
        .await
        .context("cannot read the finished grades")?;
    Ok(jobs.iter().filter_map(sample_of).collect())
}

/// Every finished job's sample with what identifies the grade behind it (the job id and the
/// SHA-256 of its stored report), oldest first: what `infradev stats --store` and `infradev
/// skill export --store` count and record.
pub async fn sourced_samples(store: &Store) -> anyhow::Result<Vec<(i64, String, Sample)>> {
    use sha2::{Digest, Sha256};
    let jobs = store
        .finished_jobs(None, MAX_GRADES)
        .await
        .context("cannot read the finished grades")?;
    Ok(jobs
        .iter()
        .filter_map(|job| {
            let (_, sample) = sample_of(job)?;
            let report = job.job.result_json.as_deref().unwrap_or_default();
            Some((
                job.job.id.0,
                hex::encode(Sha256::digest(report.as_bytes())),
                sample,
            ))
        })
        .collect())
}

/// The grade page of job `id`, or `None` when there is no such job.
pub async fn grade_page(
    store: &Store,
    id: i64,
    web_url: &str,
    root: &Path,
) -> anyhow::Result<Option<GradePage>> {
    let Some(job) = store.graded_job(JobId(id)).await? else {
        return Ok(None);
    };
    let history = store
        .graded_jobs_for_pull(&job.job.repo, job.job.number)
        .await?
        .iter()
        .map(|h| HistoryRow {
            id: h.job.id.0,
            head_sha: h.job.head_sha.clone(),
            task_id: h.job.task_id.clone(),
            state: h.job.state.as_str().to_owned(),
            verdict: report_of(h).map(|r| r.grade.verdict),
            finished_at: h.finished_at,
        })
        .collect();
    let author = match &job.author {
        Some(a) => Some(a.clone()),
        None => store
            .get_pull(&job.job.repo, job.job.number)
            .await?
            .map(|p| p.author),
    };
    Ok(Some(GradePage {
        id,
        repo: job.job.repo.clone(),
        number: job.job.number,
        head_sha: job.job.head_sha.clone(),
        task_id: job.job.task_id.clone(),
        state: job.job.state.as_str().to_owned(),
        author,
        created_at: job.job.created_at,
        finished_at: job.finished_at,
        backend: job.job.backend.clone(),
        attempts: job.job.attempts,
        error: job.job.error.clone(),
        report: report_of(&job),
        history,
        web_url: web_url.to_owned(),
        root: root.display().to_string(),
    }))
}

/// The dashboard's figures, now. Periods are days while the grades span at most 31 days,
/// weeks after that.
pub async fn dashboard(store: &Store) -> anyhow::Result<Dashboard> {
    let jobs = store
        .finished_jobs(None, MAX_GRADES)
        .await
        .context("cannot read the finished grades")?;
    let dated: Vec<(NaiveDate, Sample)> = jobs.iter().filter_map(sample_of).collect();
    let samples: Vec<Sample> = dated.iter().map(|(_, s)| s.clone()).collect();
    let span = match (dated.first(), dated.last()) {
        (Some((a, _)), Some((b, _))) => (*b - *a).num_days(),
        _ => 0,
    };
    let queue = store
        .count_jobs_by_backend()
        .await?
        .into_iter()
        .map(|b| QueueRow {
            backend: b.backend,
            queued: b.counts.queued,
            running: b.counts.running,
            finished: b.counts.finished,
            cancelled: b.counts.cancelled,
        })
        .collect();
    let recent = jobs
        .iter()
        .rev()
        .take(RECENT)
        .map(|j| RecentGrade {
            id: j.job.id.0,
            repo: j.job.repo.clone(),
            number: j.job.number,
            task_id: j.job.task_id.clone(),
            author: j.author.clone().unwrap_or_default(),
            verdict: report_of(j).map(|r| r.grade.verdict),
            finished_at: j.finished_at,
        })
        .collect();
    Ok(Dashboard {
        generated_at: Utc::now(),
        stats: aggregate(&samples),
        agent_categories: categories_by_agent(&samples),
        periods: series(&dated, if span > 31 { 7 } else { 1 }),
        queue,
        outbox_pending: store.pending_outbox_count().await?,
        refused_deliveries: store.count_refused_deliveries().await?,
        recent,
    })
}
