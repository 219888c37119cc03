//! Queries of the job queue: enqueue, claim with a lease, renew, finish, fail, release, cancel.

use super::*;

/// Must run inside a transaction (`Store::enqueue_job` opens one).
pub(crate) async fn enqueue_job(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
    number: u64,
    head_sha: &str,
    task_id: &str,
    installation_id: u64,
) -> Result<Enqueued> {
    let number = to_i64(number, "pull number")?;
    let installation_id = to_i64(installation_id, "installation id")?;
    let now = micros(Utc::now());

    // Serialize enqueues of one pull request: the upsert takes (and holds until the
    // transaction ends) the row lock on PostgreSQL. SQLite runs one writer at a time anyway.
    sqlx::query(
        "INSERT INTO job_locks (repo, number, locked_at) VALUES ($1, $2, $3) \
         ON CONFLICT (repo, number) DO UPDATE SET locked_at = excluded.locked_at",
    )
    .bind(repo)
    .bind(number)
    .bind(now)
    .execute(&mut *conn)
    .await
    .map_err(StoreError::db("locking a pull request's jobs"))?;

    // A pull request is graded for one (head, task) at a time: the grades of another head,
    // or of a task it no longer names, are superseded.
    let rows = sqlx::query(concat!(
        "UPDATE jobs SET state = 'cancelled', lease_until = NULL, updated_at = $4 \
         WHERE repo = $1 AND number = $2 AND (head_sha <> $3 OR task_id <> $5) \
         AND state IN ('queued', 'running') RETURNING ",
        job_cols!()
    ))
    .bind(repo)
    .bind(number)
    .bind(head_sha)
    .bind(now)
    .bind(task_id)
    .fetch_all(&mut *conn)
    .await
    .map_err(StoreError::db("cancelling superseded jobs"))?;
    let mut cancelled = all(rows, job)?;
    cancelled.sort_by_key(|j| j.id);

    let existing = sqlx::query(concat!(
        "SELECT ",
        job_cols!(),
        " FROM jobs WHERE repo = $1 AND number = $2 AND head_sha = $3 AND task_id = $4 \
         AND state IN ('queued', 'running')"
    ))
    .bind(repo)
    .bind(number)
    .bind(head_sha)
    .bind(task_id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(StoreError::db("looking for an active job"))?;
    if let Some(row) = existing {
        return Ok(Enqueued {
            job: job(&row)?,
            created: false,
            cancelled,
        });
    }

    let row = sqlx::query(concat!(
        "INSERT INTO jobs (repo, number, head_sha, task_id, installation_id, state, attempts, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, 'queued', 0, $6, $6) RETURNING ",
        job_cols!()
    ))
    .bind(repo)
    .bind(number)
    .bind(head_sha)
    .bind(task_id)
    .bind(installation_id)
    .bind(now)
    .fetch_one(&mut *conn)
    .await
    .map_err(StoreError::db("enqueueing a job"))?;
    Ok(Enqueued {
        job: job(&row)?,
        created: true,
        cancelled,
    })
}

macro_rules! claim_job_sql {
    ($lock:literal) => {
        concat!(
            "UPDATE jobs SET state = 'running', lease_owner = $1, lease_until = $2, attempts = attempts + 1, \
             updated_at = $3 WHERE id = (SELECT id FROM jobs WHERE backend = 'local' AND (state = 'queued' \
             OR (state = 'running' AND lease_until < $3)) ORDER BY id LIMIT 1",
            $lock,
            ") RETURNING ",
            job_cols!()
        )
    };
}

pub(crate) async fn claim_job(
    conn: &mut AnyConnection,
    backend: Backend,
    owner: &str,
    lease: std::time::Duration,
) -> Result<Option<Job>> {
    let now = Utc::now();
    let sql = match backend {
        // One statement: SQLite takes the write lock before it reads, so the row it picks is
        // not picked by anyone else.
        Backend::Sqlite => claim_job_sql!(""),
        // Concurrent claimers skip each other's locked row instead of queueing behind it.
        Backend::Postgres => claim_job_sql!(" FOR UPDATE SKIP LOCKED"),
    };
    sqlx::query(sql)
        .bind(owner)
        .bind(micros(lease_until(now, lease)?))
        .bind(micros(now))
        .fetch_optional(conn)
        .await
        .map_err(StoreError::db("claiming a job"))?
        .as_ref()
        .map(job)
        .transpose()
}

pub(crate) async fn renew_lease(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    owner: &str,
    lease: std::time::Duration,
) -> Result<bool> {
    let now = Utc::now();
    let done = sqlx::query(
        "UPDATE jobs SET lease_until = $3, updated_at = $4 WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
    )
    .bind(id.0)
    .bind(owner)
    .bind(micros(lease_until(now, lease)?))
    .bind(micros(now))
    .execute(conn)
    .await
    .map_err(StoreError::db("renewing a lease"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn finish_job(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    owner: &str,
    verdict: &str,
    result_json: &str,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE jobs SET state = 'finished', verdict = $3, result_json = $4, error = NULL, lease_until = NULL, \
         updated_at = $5, finished_at = $5, author = (SELECT p.author FROM pull_requests p \
         WHERE p.repo = jobs.repo AND p.number = jobs.number) \
         WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
    )
    .bind(id.0)
    .bind(owner)
    .bind(verdict)
    .bind(result_json)
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("finishing a job"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn fail_job(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    owner: &str,
    error: &str,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE jobs SET state = 'finished', verdict = NULL, result_json = NULL, error = $3, lease_until = NULL, \
         updated_at = $4, finished_at = $4, author = (SELECT p.author FROM pull_requests p \
         WHERE p.repo = jobs.repo AND p.number = jobs.number) \
         WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
    )
    .bind(id.0)
    .bind(owner)
    .bind(error)
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("failing a job"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn release_job(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    owner: &str,
    error: Option<&str>,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_until = NULL, error = $3, updated_at = $4 \
         WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
    )
    .bind(id.0)
    .bind(owner)
    .bind(error)
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("releasing a job"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn hand_back_job(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    owner: &str,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_until = NULL, \
         attempts = attempts - 1, updated_at = $3 WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
    )
    .bind(id.0)
    .bind(owner)
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("handing a job back"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn cancel_job(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
) -> Result<Option<Job>> {
    sqlx::query(concat!(
        "UPDATE jobs SET state = 'cancelled', lease_until = NULL, updated_at = $2 \
         WHERE id = $1 AND state IN ('queued', 'running') RETURNING ",
        job_cols!()
    ))
    .bind(id.0)
    .bind(micros(Utc::now()))
    .fetch_optional(conn)
    .await
    .map_err(StoreError::db("cancelling a job"))?
    .as_ref()
    .map(job)
    .transpose()
}

pub(crate) async fn cancel_jobs_for_pull(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
    number: u64,
) -> Result<Vec<Job>> {
    let rows = sqlx::query(concat!(
        "UPDATE jobs SET state = 'cancelled', lease_until = NULL, updated_at = $3 \
         WHERE repo = $1 AND number = $2 AND state IN ('queued', 'running') RETURNING ",
        job_cols!()
    ))
    .bind(repo)
    .bind(to_i64(number, "pull number")?)
    .bind(micros(Utc::now()))
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("cancelling a pull request's jobs"))?;
    let mut jobs = all(rows, job)?;
    jobs.sort_by_key(|j| j.id);
    Ok(jobs)
}

/// Cancels the active jobs of a pull request that grade another head than `head_sha`, or
/// another task than `task_id` (all of them when `task_id` is `None`).
pub(crate) async fn supersede_jobs(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
    number: u64,
    head_sha: &str,
    task_id: Option<&str>,
) -> Result<Vec<Job>> {
    let number = to_i64(number, "pull number")?;
    let now = micros(Utc::now());
    let rows = match task_id {
        Some(task_id) => {
            sqlx::query(concat!(
                "UPDATE jobs SET state = 'cancelled', lease_until = NULL, updated_at = $5 \
                 WHERE repo = $1 AND number = $2 AND (head_sha <> $3 OR task_id <> $4) \
                 AND state IN ('queued', 'running') RETURNING ",
                job_cols!()
            ))
            .bind(repo)
            .bind(number)
            .bind(head_sha)
            .bind(task_id)
            .bind(now)
            .fetch_all(conn)
            .await
        }
        None => {
            sqlx::query(concat!(
                "UPDATE jobs SET state = 'cancelled', lease_until = NULL, updated_at = $3 \
                 WHERE repo = $1 AND number = $2 AND state IN ('queued', 'running') RETURNING ",
                job_cols!()
            ))
            .bind(repo)
            .bind(number)
            .bind(now)
            .fetch_all(conn)
            .await
        }
    }
    .map_err(StoreError::db("cancelling superseded jobs"))?;
    let mut jobs = all(rows, job)?;
    jobs.sort_by_key(|j| j.id);
    Ok(jobs)
}

/// Cancels every active job of an installation (`repos` empty), or of those of its
/// repositories (full names) only.
pub(crate) async fn cancel_jobs_for_installation(
    conn: &mut AnyConnection,
    _: Backend,
    installation_id: u64,
    repos: &[String],
) -> Result<Vec<Job>> {
    let installation_id = to_i64(installation_id, "installation id")?;
    let now = micros(Utc::now());
    let mut jobs = Vec::new();
    if repos.is_empty() {
        let rows = sqlx::query(concat!(
            "UPDATE jobs SET state = 'cancelled', lease_until = NULL, updated_at = $2 \
             WHERE installation_id = $1 AND state IN ('queued', 'running') RETURNING ",
            job_cols!()
        ))
        .bind(installation_id)
        .bind(now)
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::db("cancelling an installation's jobs"))?;
        jobs = all(rows, job)?;
    }
    for repo in repos {
        // GitHub's names are case-insensitive; the store keeps them as GitHub sent them.
        let rows = sqlx::query(concat!(
            "UPDATE jobs SET state = 'cancelled', lease_until = NULL, updated_at = $3 \
             WHERE installation_id = $1 AND LOWER(repo) = LOWER($2) \
             AND state IN ('queued', 'running') RETURNING ",
            job_cols!()
        ))
        .bind(installation_id)
        .bind(repo)
        .bind(now)
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::db("cancelling a repository's jobs"))?;
        jobs.extend(all(rows, job)?);
    }
    jobs.sort_by_key(|j| j.id);
    Ok(jobs)
}

/// Every job of any pull request of `repo` that grades commit `head_sha`, by id.
pub(crate) async fn jobs_for_head(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
    head_sha: &str,
) -> Result<Vec<Job>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        job_cols!(),
        " FROM jobs WHERE repo = $1 AND head_sha = $2 ORDER BY id"
    ))
    .bind(repo)
    .bind(head_sha)
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("reading a commit's jobs"))?;
    all(rows, job)
}

pub(crate) async fn set_check_run_id(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    check_run_id: u64,
) -> Result<bool> {
    let done = sqlx::query("UPDATE jobs SET check_run_id = $2, updated_at = $3 WHERE id = $1")
        .bind(id.0)
        .bind(to_i64(check_run_id, "check run id")?)
        .bind(micros(Utc::now()))
        .execute(conn)
        .await
        .map_err(StoreError::db("storing a check run id"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn get_job(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
) -> Result<Option<Job>> {
    sqlx::query(concat!("SELECT ", job_cols!(), " FROM jobs WHERE id = $1"))
        .bind(id.0)
        .fetch_optional(conn)
        .await
        .map_err(StoreError::db("reading a job"))?
        .as_ref()
        .map(job)
        .transpose()
}

pub(crate) async fn active_jobs_for_pull(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
    number: u64,
) -> Result<Vec<Job>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        job_cols!(),
        " FROM jobs WHERE repo = $1 AND number = $2 AND state IN ('queued', 'running') ORDER BY id"
    ))
    .bind(repo)
    .bind(to_i64(number, "pull number")?)
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("reading a pull request's jobs"))?;
    all(rows, job)
}

pub(crate) async fn jobs_for_pull(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
    number: u64,
) -> Result<Vec<Job>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        job_cols!(),
        " FROM jobs WHERE repo = $1 AND number = $2 ORDER BY id"
    ))
    .bind(repo)
    .bind(to_i64(number, "pull number")?)
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("reading a pull request's jobs"))?;
    all(rows, job)
}

pub(crate) async fn count_jobs_by_state(conn: &mut AnyConnection, _: Backend) -> Result<JobCounts> {
    let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")
        .fetch_all(conn)
        .await
        .map_err(StoreError::db("counting jobs"))?;
    let mut counts = JobCounts::default();
    for row in &rows {
        let state: String = get(row, "state")?;
        let state: JobState = state
            .parse()
            .map_err(|e| StoreError::invalid("jobs.state", e))?;
        counts.set(state, get_u64(row, "n")?);
    }
    Ok(counts)
}
