-- The prediction cache (internal/predcache): one row per
-- prediction unit ever computed, keyed by the SHA-256 of everything that
-- determined its value. Exactly one of value and error is set: the raw
-- engine value, or why the engine gave none. method and model_version are
-- kept in the clear for `kinflow cache predictions purge`; created_at_ms is
-- the first computation's time in Unix milliseconds (an integer reads back
-- several times faster than a timestamp in a 10,000-key lookup). WITHOUT ROWID
-- keeps each key once, in the table's own b-tree.
CREATE TABLE prediction_cache (
    unit_key      BLOB PRIMARY KEY,
    method        VARCHAR(64) NOT NULL,
    model_version VARCHAR(64) NOT NULL,
    value         REAL,
    error         TEXT,
    created_at_ms BIGINT NOT NULL
) WITHOUT ROWID;
CREATE INDEX idx_prediction_cache_method ON prediction_cache (method, model_version);
-- A job's usePredictionCache option, and the units served from the cache
-- (predictionsCached in the status payload), per job and per stage.
ALTER TABLE jobs ADD COLUMN use_prediction_cache BOOLEAN NOT NULL DEFAULT TRUE;
ALTER TABLE jobs ADD COLUMN predictions_cached INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_stages ADD COLUMN predictions_cached INTEGER NOT NULL DEFAULT 0;
-- Bumped by every purge of the prediction cache: a worker's memory tier in
-- front of the table drops its entries when it sees another value.
CREATE TABLE prediction_cache_epoch (
    id    INTEGER PRIMARY KEY,
    epoch BIGINT NOT NULL
);
INSERT INTO prediction_cache_epoch (id, epoch) VALUES (1, 0);
