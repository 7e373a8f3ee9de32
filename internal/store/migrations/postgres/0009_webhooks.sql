-- Webhooks: a job's notify URL (the submit's notifyUrl, else its
-- key's default), and per key the default URL and the secret that signs
-- every notice (HMAC-SHA256), made on first use.
ALTER TABLE jobs ADD COLUMN notify_url TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN notify_url TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN webhook_secret VARCHAR(80) NOT NULL DEFAULT '';
-- Every write to a job's row, stages or events announces the job on the
-- channel kinflow_job_changed (delivered at commit, once per job and
-- transaction), so that an API process learns of a worker's writes at
-- once (store.ListenJobChanges) instead of at its status cache's expiry.
CREATE OR REPLACE FUNCTION kinflow_notify_job() RETURNS trigger AS $$ BEGIN PERFORM pg_notify('kinflow_job_changed', NEW.id); RETURN NULL; END $$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION kinflow_notify_job_child() RETURNS trigger AS $$ BEGIN PERFORM pg_notify('kinflow_job_changed', NEW.job_id); RETURN NULL; END $$ LANGUAGE plpgsql;
CREATE TRIGGER jobs_changed AFTER INSERT OR UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION kinflow_notify_job();
CREATE TRIGGER job_stages_changed AFTER INSERT OR UPDATE ON job_stages FOR EACH ROW EXECUTE FUNCTION kinflow_notify_job_child();
CREATE TRIGGER job_events_changed AFTER INSERT OR UPDATE ON job_events FOR EACH ROW EXECUTE FUNCTION kinflow_notify_job_child();
