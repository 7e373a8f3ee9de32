-- How a job shares the task queues with other keys' jobs: its class
-- (interactive, normal or bulk; Temporal serves them in that order) and
-- its key's fairness weight (NULL: the default, 1), by which Temporal
-- shares dispatch between keys of one class. '' is a job submitted before
-- classes, which started at Temporal's default priority.
ALTER TABLE jobs ADD COLUMN priority TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN fairness_weight DOUBLE PRECISION;
