-- InfraDev service schema, SQLite dialect. Applied by src/store/migrations.rs.
-- Timestamps are INTEGER microseconds since the Unix epoch (UTC); booleans are INTEGER 0/1
-- (sqlx's Any driver reads neither SQLite's BOOLEAN nor DATETIME declarations).
-- STRICT tables: SQLite enforces the declared types.

-- Every webhook delivery, stored before the server answers 202.
CREATE TABLE deliveries (
    delivery_id  TEXT    NOT NULL PRIMARY KEY,      -- X-GitHub-Delivery
    event        TEXT    NOT NULL,                  -- X-GitHub-Event
    action       TEXT,
    payload      BLOB    NOT NULL,                  -- the raw body, byte for byte
    received_at  INTEGER NOT NULL,
    processed_at INTEGER,
    error        TEXT
) STRICT;
CREATE INDEX deliveries_unprocessed ON deliveries (received_at, delivery_id) WHERE processed_at IS NULL;

-- The pull requests we know about.
CREATE TABLE pull_requests (
    repo              TEXT    NOT NULL,             -- "owner/name"
    number            INTEGER NOT NULL,
    head_sha          TEXT    NOT NULL,
    base_ref          TEXT    NOT NULL,
    task_id           TEXT,
    is_agent          INTEGER NOT NULL CHECK (is_agent IN (0, 1)),
    author            TEXT    NOT NULL,
    installation_id   INTEGER NOT NULL,
    draft             INTEGER NOT NULL CHECK (draft IN (0, 1)),
    open              INTEGER NOT NULL CHECK (open IN (0, 1)),
    sticky_comment_id INTEGER,
    grade_requested   INTEGER NOT NULL DEFAULT 0 CHECK (grade_requested IN (0, 1)),
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (repo, number)
) STRICT;

-- head SHA -> pull numbers (check events from forks carry an empty pull_requests list).
CREATE TABLE heads (
    repo     TEXT    NOT NULL,
    head_sha TEXT    NOT NULL,
    number   INTEGER NOT NULL,
    PRIMARY KEY (repo, head_sha, number)
) STRICT;

-- One row per pull request that ever had a job enqueued: enqueue_job locks it so that two
-- enqueues for the same pull request serialize (PostgreSQL; SQLite serializes all writers).
CREATE TABLE job_locks (
    repo      TEXT    NOT NULL,
    number    INTEGER NOT NULL,
    locked_at INTEGER NOT NULL,
    PRIMARY KEY (repo, number)
) STRICT;

-- Grading jobs. AUTOINCREMENT: an id is never reused (it is the check run's external_id).
CREATE TABLE jobs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    repo            TEXT    NOT NULL,
    number          INTEGER NOT NULL,
    head_sha        TEXT    NOT NULL,
    task_id         TEXT    NOT NULL,
    installation_id INTEGER NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('queued', 'running', 'finished', 'cancelled')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    lease_owner     TEXT,
    lease_until     INTEGER,
    check_run_id    INTEGER,
    verdict         TEXT,
    result_json     TEXT,
    error           TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;
-- At most one active job per (pull request, head, task).
CREATE UNIQUE INDEX jobs_active_key ON jobs (repo, number, head_sha, task_id)
    WHERE state IN ('queued', 'running');
CREATE INDEX jobs_pull ON jobs (repo, number);
CREATE INDEX jobs_claimable ON jobs (id) WHERE state IN ('queued', 'running');

-- Reports to send to GitHub, committed in the same transaction as the job change they report.
CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id          INTEGER REFERENCES jobs (id) ON DELETE SET NULL,
    kind            TEXT    NOT NULL,
    payload         TEXT    NOT NULL,               -- JSON
    state           TEXT    NOT NULL CHECK (state IN ('pending', 'done', 'dead')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;
CREATE INDEX outbox_pending ON outbox (id) WHERE state = 'pending';
CREATE INDEX outbox_job ON outbox (job_id, id);
