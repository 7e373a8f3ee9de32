-- A running job's claim on an ephemeral artefact: Cleanup deletes a file only
-- when no other job still claims it.
CREATE TABLE artefact_claims (
    path        TEXT NOT NULL,
    job_id      VARCHAR(40) NOT NULL,
    stage_index INTEGER NOT NULL,
    created_at  DATETIME NOT NULL,
    PRIMARY KEY (path, job_id, stage_index)
);
CREATE INDEX idx_artefact_claims_job ON artefact_claims (job_id, stage_index);
