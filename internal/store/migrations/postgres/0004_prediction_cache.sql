-- The prediction cache (internal/predcache, DESIGN.md §8): one row per
-- prediction unit ever computed, keyed by the SHA-256 of everything that
-- determined its value. Exactly one of value and error is set: the raw
-- engine value, or why the engine gave none. method and model_version are
-- kept in the clear for `kinflow cache predictions purge`.
CREATE TABLE prediction_cache (
    unit_key      BYTEA PRIMARY KEY,
    method        VARCHAR(64) NOT NULL,
    model_version VARCHAR(64) NOT NULL,
    value         DOUBLE PRECISION,
    error         TEXT,
    created_at    TIMESTAMPTZ NOT NULL
);
CREATE INDEX idx_prediction_cache_method ON prediction_cache (method, model_version);
