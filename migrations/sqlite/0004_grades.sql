-- Finished grades as the grade pages, the dashboard and `infradev stats --store` read them.
-- The grade report itself is `jobs.result_json` (the whole redacted report, 0001).

-- When the job finished (graded, or given up on): the time axis of the statistics.
ALTER TABLE jobs ADD COLUMN finished_at INTEGER;
-- The pull request's author when the job finished: the agent account the grade counts for.
ALTER TABLE jobs ADD COLUMN author TEXT;
-- Jobs finished before this migration: their last change is when they finished.
UPDATE jobs SET finished_at = updated_at WHERE state = 'finished';
UPDATE jobs SET author = (SELECT p.author FROM pull_requests p WHERE p.repo = jobs.repo AND p.number = jobs.number)
    WHERE state = 'finished';
CREATE INDEX jobs_finished ON jobs (finished_at, id) WHERE state = 'finished';
