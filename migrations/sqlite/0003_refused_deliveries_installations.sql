-- Deliveries this service refused with a 4xx, and the App installations it knows.

-- A delivery we refused (the intake's 400 for a signed payload it cannot read, or a 4xx that
-- GitHub's delivery log shows): recorded so that reconcile never asks GitHub to redeliver it,
-- and so that the operator can see it (docs/github-app.md).
CREATE TABLE refused_deliveries (
    delivery_id TEXT    NOT NULL PRIMARY KEY,       -- X-GitHub-Delivery (the GUID)
    event       TEXT,                               -- X-GitHub-Event, when known
    status      INTEGER NOT NULL,                   -- the HTTP status answered
    reason      TEXT    NOT NULL,
    source      TEXT    NOT NULL CHECK (source IN ('intake', 'github_log')),
    refused_at  INTEGER NOT NULL
) STRICT;

-- Installations of the App, from installation and installation_repositories events; with the
-- installations of known pull requests, what the resync on start reads.
CREATE TABLE installations (
    installation_id INTEGER NOT NULL PRIMARY KEY,
    active          INTEGER NOT NULL CHECK (active IN (0, 1)),
    updated_at      INTEGER NOT NULL
) STRICT;
