-- A stage's counts (its rows, the units it sends, the distinct sequences
-- among them) are recorded in its row by the plan, in the UPDATE it already
-- makes, instead of in a counts.json file beside the stage's work files:
-- one file fewer per stage to create and make durable, and a status read
-- that needs no file. NULL: not recorded in the row (a stage not
-- planned yet, or planned by a worker from before this migration, whose
-- counts.json the api still reads).
ALTER TABLE job_stages ADD COLUMN count_rows INTEGER;
ALTER TABLE job_stages ADD COLUMN count_units INTEGER;
ALTER TABLE job_stages ADD COLUMN count_sequences INTEGER;
