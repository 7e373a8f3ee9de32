CREATE TABLE api_users (
    ip_address  VARCHAR(64) PRIMARY KEY,
    is_blocked  BOOLEAN NOT NULL DEFAULT FALSE,
    notes       TEXT NOT NULL DEFAULT '',
    first_seen  TIMESTAMPTZ,
    last_seen   TIMESTAMPTZ
);

CREATE TABLE api_keys (
    id                 BIGSERIAL PRIMARY KEY,
    ip_address         VARCHAR(64) NOT NULL,
    key_hash           VARCHAR(64) NOT NULL,
    key_suffix         VARCHAR(6) NOT NULL,
    label              VARCHAR(200) NOT NULL DEFAULT '',
    is_active          BOOLEAN NOT NULL DEFAULT TRUE,
    custom_daily_limit INTEGER,
    created_at         TIMESTAMPTZ,
    last_used_at       TIMESTAMPTZ,
    revoked_at         TIMESTAMPTZ
);
CREATE UNIQUE INDEX idx_api_keys_key_hash ON api_keys (key_hash);
CREATE INDEX idx_api_keys_ip_address ON api_keys (ip_address);
-- At most one active key per IP, enforced by the database itself.
CREATE UNIQUE INDEX idx_api_keys_one_active_per_ip ON api_keys (ip_address) WHERE is_active;

CREATE TABLE quota_usage (
    key_id BIGINT NOT NULL,
    day    VARCHAR(10) NOT NULL,
    used   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day)
);

CREATE TABLE jobs (
    id                         VARCHAR(40) PRIMARY KEY,
    key_id                     BIGINT NOT NULL,
    ip_address                 VARCHAR(64) NOT NULL DEFAULT '',
    status                     VARCHAR(16) NOT NULL,
    prediction_type            VARCHAR(32) NOT NULL DEFAULT '',
    targets                    TEXT NOT NULL DEFAULT '[]',
    methods                    TEXT NOT NULL DEFAULT '{}',
    kcat_method                VARCHAR(64) NOT NULL DEFAULT '',
    km_method                  VARCHAR(64) NOT NULL DEFAULT '',
    kcat_km_method             VARCHAR(64) NOT NULL DEFAULT '',
    handle_long_sequences      VARCHAR(16) NOT NULL DEFAULT 'truncate',
    canonicalize_substrates    BOOLEAN NOT NULL DEFAULT TRUE,
    include_similarity_columns BOOLEAN NOT NULL DEFAULT TRUE,
    use_experimental           BOOLEAN NOT NULL DEFAULT FALSE,
    disable_gpu_precompute     BOOLEAN NOT NULL DEFAULT FALSE,
    requested_rows             INTEGER NOT NULL DEFAULT 0,
    refunded_rows              INTEGER NOT NULL DEFAULT 0,
    error_message              TEXT NOT NULL DEFAULT '',
    submitted_at               TIMESTAMPTZ NOT NULL,
    started_at                 TIMESTAMPTZ,
    completed_at               TIMESTAMPTZ,
    total_molecules            INTEGER NOT NULL DEFAULT 0,
    molecules_processed        INTEGER NOT NULL DEFAULT 0,
    invalid_rows               INTEGER NOT NULL DEFAULT 0,
    total_predictions          INTEGER NOT NULL DEFAULT 0,
    predictions_made           INTEGER NOT NULL DEFAULT 0,
    input_path                 TEXT NOT NULL DEFAULT '',
    output_path                TEXT NOT NULL DEFAULT '',
    synthetic                  BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX idx_jobs_key_id ON jobs (key_id);
CREATE INDEX idx_jobs_status_submitted ON jobs (status, submitted_at);

CREATE TABLE job_stages (
    job_id               VARCHAR(40) NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    stage_index          INTEGER NOT NULL,
    target               VARCHAR(16) NOT NULL,
    method_key           VARCHAR(64) NOT NULL,
    method_name          VARCHAR(200) NOT NULL DEFAULT '',
    status               VARCHAR(16) NOT NULL DEFAULT 'pending',
    started_at           TIMESTAMPTZ,
    completed_at         TIMESTAMPTZ,
    message              TEXT NOT NULL DEFAULT '',
    molecules_total      INTEGER NOT NULL DEFAULT 0,
    molecules_processed  INTEGER NOT NULL DEFAULT 0,
    invalid_rows         INTEGER NOT NULL DEFAULT 0,
    predictions_total    INTEGER NOT NULL DEFAULT 0,
    predictions_made     INTEGER NOT NULL DEFAULT 0,
    embedding_enabled    BOOLEAN NOT NULL DEFAULT TRUE,
    embedding_state      VARCHAR(16) NOT NULL DEFAULT 'pending',
    embedding_total      INTEGER NOT NULL DEFAULT 0,
    embedding_cached     INTEGER NOT NULL DEFAULT 0,
    embedding_need       INTEGER NOT NULL DEFAULT 0,
    embedding_computed   INTEGER NOT NULL DEFAULT 0,
    embedding_updated_at TIMESTAMPTZ,
    PRIMARY KEY (job_id, stage_index)
);

CREATE TABLE job_events (
    id          BIGSERIAL PRIMARY KEY,
    job_id      VARCHAR(40) NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    stage_index INTEGER NOT NULL DEFAULT 0,
    kind        VARCHAR(32) NOT NULL,
    method_key  VARCHAR(64) NOT NULL DEFAULT '',
    target      VARCHAR(16) NOT NULL DEFAULT '',
    attempted   BOOLEAN NOT NULL DEFAULT FALSE,
    used_gpu    BOOLEAN NOT NULL DEFAULT FALSE,
    completed   BOOLEAN NOT NULL DEFAULT FALSE,
    failed      BOOLEAN NOT NULL DEFAULT FALSE,
    reason      TEXT NOT NULL DEFAULT '',
    message     TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX idx_job_events_job_id ON job_events (job_id);
CREATE INDEX idx_job_events_kind_created ON job_events (kind, created_at);

CREATE TABLE sequences (
    id           VARCHAR(64) PRIMARY KEY,
    seq          TEXT NOT NULL,
    sha256       VARCHAR(64) NOT NULL,
    len          INTEGER NOT NULL,
    created_at   TIMESTAMPTZ,
    last_seen_at TIMESTAMPTZ,
    uses_count   BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX idx_sequences_sha256 ON sequences (sha256);
CREATE INDEX idx_sequences_len ON sequences (len);
