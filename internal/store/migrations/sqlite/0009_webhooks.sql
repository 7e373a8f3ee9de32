-- Webhooks: a job's notify URL (the submit's notifyUrl, else its
-- key's default), and per key the default URL and the secret that signs
-- every notice (HMAC-SHA256), made on first use.
ALTER TABLE jobs ADD COLUMN notify_url TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN notify_url TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN webhook_secret VARCHAR(80) NOT NULL DEFAULT '';
