-- A submit's Idempotency-Key (hashed), scoped to the API key: the primary key
-- makes concurrent retries with one key create one job. A row lives as long as
-- its job's submit stands (a refunded submit deletes it in the same
-- transaction) and at most 24 hours; the reconciler removes expired rows.
CREATE TABLE idempotency_keys (
    key_id       BIGINT NOT NULL,
    key_hash     VARCHAR(64) NOT NULL,
    request_hash VARCHAR(64) NOT NULL,
    job_id       VARCHAR(40) NOT NULL,
    created_at   DATETIME NOT NULL,
    PRIMARY KEY (key_id, key_hash)
);
CREATE INDEX idx_idempotency_keys_job ON idempotency_keys (job_id);
CREATE INDEX idx_idempotency_keys_created ON idempotency_keys (created_at);
-- The list of one's own jobs, newest first (GET /api/v1/jobs/).
CREATE INDEX idx_jobs_key_submitted ON jobs (key_id, submitted_at, id);
