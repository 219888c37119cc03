-- Scale-out backends (Slurm, GitHub Actions): which engine grades a job, the engine's id of
-- the current dispatch, the per-dispatch result tokens (stored hashed) and every result posted.

-- 'local' (this server's workers) or the name of a configured remote backend.
ALTER TABLE jobs ADD COLUMN backend TEXT NOT NULL DEFAULT 'local';
-- Dispatches to the remote engine so far; the current one is number `dispatches`.
ALTER TABLE jobs ADD COLUMN dispatches BIGINT NOT NULL DEFAULT 0;
-- The engine's id of the current dispatch (Slurm job id, workflow run id).
ALTER TABLE jobs ADD COLUMN external_id TEXT;
-- 1 while the current dispatch may still be alive in the engine: followed while the job runs,
-- cancelled there once the job is cancelled here.
ALTER TABLE jobs ADD COLUMN remote_open BOOLEAN NOT NULL DEFAULT FALSE;
-- Runs that ended without a result (lost runner, node failure, cancelled or timed-out run).
ALTER TABLE jobs ADD COLUMN lost_runs BIGINT NOT NULL DEFAULT 0;
-- Times the engine requeued the current dispatch by itself (node failure, preemption).
ALTER TABLE jobs ADD COLUMN remote_restarts BIGINT NOT NULL DEFAULT 0;
CREATE INDEX jobs_remote_queued ON jobs (backend, id) WHERE state = 'queued';
CREATE INDEX jobs_remote_open ON jobs (backend, id) WHERE remote_open;

-- One token per dispatch, minted when it is dispatched; only its SHA-256 is kept.
CREATE TABLE job_tokens (
    token_hash TEXT    NOT NULL PRIMARY KEY,        -- hex SHA-256 of the token
    job_id     BIGINT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    dispatch   BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at    BIGINT
);
CREATE INDEX job_tokens_job ON job_tokens (job_id);

-- Every result posted with a valid token, whatever became of it.
CREATE TABLE job_results (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      BIGINT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    dispatch    BIGINT NOT NULL,
    disposition TEXT    NOT NULL CHECK (disposition IN ('accepted', 'retried', 'ignored')),
    reason      TEXT,
    body        TEXT    NOT NULL,
    received_at BIGINT NOT NULL
);
CREATE INDEX job_results_job ON job_results (job_id, id);
