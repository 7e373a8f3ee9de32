-- The quota check at submit counts what a job will really charge (issue
-- 36): rows whose every prediction the prediction cache already holds are
-- refunded at the end, so a submit need not find quota for them. A row's
-- key is the SHA-256 of its target, method, model version, the options that
-- change its units and its input cells (predcache.RowKey); a job that
-- completes records the keys of its fully predicted rows. method and
-- model_version are kept in the clear so that a purge of the prediction
-- cache purges them too.
CREATE TABLE cached_rows (
    row_key       BYTEA PRIMARY KEY,
    method        VARCHAR(64) NOT NULL,
    model_version VARCHAR(64) NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX idx_cached_rows_method ON cached_rows (method, model_version);
-- Rows of a job not taken from the quota at submit because the cache held
-- them: the end of the job refunds only what it charged beyond them.
ALTER TABLE jobs ADD COLUMN quota_credit_rows INTEGER NOT NULL DEFAULT 0;
