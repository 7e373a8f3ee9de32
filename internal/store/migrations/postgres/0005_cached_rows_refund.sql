-- Rows whose every prediction came from the prediction cache are refunded
-- at the end of the job: how many of refunded_rows they are, so
-- the status and the result can say it.
ALTER TABLE jobs ADD COLUMN refunded_cached_rows INTEGER NOT NULL DEFAULT 0;
