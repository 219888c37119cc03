-- InfraDev service schema, PostgreSQL dialect. Applied by src/store/migrations.rs.
-- Same tables, columns and meaning as migrations/sqlite/0001_init.sql. Timestamps are BIGINT
-- microseconds since the Unix epoch (UTC): sqlx's Any driver cannot read TIMESTAMPTZ.

-- Every webhook delivery, stored before the server answers 202.
CREATE TABLE deliveries (
    delivery_id  TEXT   NOT NULL PRIMARY KEY,       -- X-GitHub-Delivery
    event        TEXT   NOT NULL,                   -- X-GitHub-Event
    action       TEXT,
    payload      BYTEA  NOT NULL,                   -- the raw body, byte for byte
    received_at  BIGINT NOT NULL,
    processed_at BIGINT,
    error        TEXT
);
CREATE INDEX deliveries_unprocessed ON deliveries (received_at, delivery_id) WHERE processed_at IS NULL;

-- The pull requests we know about.
CREATE TABLE pull_requests (
    repo              TEXT    NOT NULL,             -- "owner/name"
    number            BIGINT  NOT NULL,
    head_sha          TEXT    NOT NULL,
    base_ref          TEXT    NOT NULL,
    task_id           TEXT,
    is_agent          BOOLEAN NOT NULL,
    author            TEXT    NOT NULL,
    installation_id   BIGINT  NOT NULL,
    draft             BOOLEAN NOT NULL,
    open              BOOLEAN NOT NULL,
    sticky_comment_id BIGINT,
    grade_requested   BOOLEAN NOT NULL DEFAULT FALSE,
    updated_at        BIGINT  NOT NULL,
    PRIMARY KEY (repo, number)
);

-- head SHA -> pull numbers (check events from forks carry an empty pull_requests list).
CREATE TABLE heads (
    repo     TEXT   NOT NULL,
    head_sha TEXT   NOT NULL,
    number   BIGINT NOT NULL,
    PRIMARY KEY (repo, head_sha, number)
);

-- One row per pull request that ever had a job enqueued: enqueue_job locks it so that two
-- enqueues for the same pull request serialize.
CREATE TABLE job_locks (
    repo      TEXT   NOT NULL,
    number    BIGINT NOT NULL,
    locked_at BIGINT NOT NULL,
    PRIMARY KEY (repo, number)
);

-- Grading jobs. An id is never reused (it is the check run's external_id).
CREATE TABLE jobs (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    repo            TEXT   NOT NULL,
    number          BIGINT NOT NULL,
    head_sha        TEXT   NOT NULL,
    task_id         TEXT   NOT NULL,
    installation_id BIGINT NOT NULL,
    state           TEXT   NOT NULL CHECK (state IN ('queued', 'running', 'finished', 'cancelled')),
    attempts        BIGINT NOT NULL DEFAULT 0,
    lease_owner     TEXT,
    lease_until     BIGINT,
    check_run_id    BIGINT,
    verdict         TEXT,
    result_json     TEXT,
    error           TEXT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
-- At most one active job per (pull request, head, task).
CREATE UNIQUE INDEX jobs_active_key ON jobs (repo, number, head_sha, task_id)
    WHERE state IN ('queued', 'running');
CREATE INDEX jobs_pull ON jobs (repo, number);
CREATE INDEX jobs_claimable ON jobs (id) WHERE state IN ('queued', 'running');

-- Reports to send to GitHub, committed in the same transaction as the job change they report.
CREATE TABLE outbox (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id          BIGINT REFERENCES jobs (id) ON DELETE SET NULL,
    kind            TEXT   NOT NULL,
    payload         TEXT   NOT NULL,                -- JSON
    state           TEXT   NOT NULL CHECK (state IN ('pending', 'done', 'dead')),
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    last_error      TEXT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX outbox_pending ON outbox (id) WHERE state = 'pending';
CREATE INDEX outbox_job ON outbox (job_id, id);
