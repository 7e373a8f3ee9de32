-- The newest workflow code that has run on this deployment: a CPU worker
-- raises it to its own level at start (workflows.Level: one more for every
-- workflow change), and a worker of a lower level refuses to start, so a
-- rollback can never leave a job that a newer worker began waiting for a
-- workflow task that the older code cannot replay. `kinflow migrate
-- --accept-older-workflows` lowers it again once no job is unfinished.
ALTER TABLE schema_compat ADD COLUMN workflow_level INTEGER NOT NULL DEFAULT 0;
