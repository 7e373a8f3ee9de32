-- The name of the file a job's input was uploaded as (its base name, as the
-- client sent it), so that a list of jobs can say which input each one is;
-- '' for a job submitted as JSON, or before names were kept.
ALTER TABLE jobs ADD COLUMN input_name TEXT NOT NULL DEFAULT '';
