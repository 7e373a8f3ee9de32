-- The oldest binary that may run on this schema. oldest_reader is the id of
-- the newest applied migration marked `-- breaks-older-binaries` in its
-- header ('' while none is): a kinflow that finds migrations recorded that
-- it does not know starts only if it knows this one (Store.Migrate), so a
-- release rolled back past a breaking change refuses to start instead of
-- misreading the schema. Additive migrations leave it alone: an older
-- binary ignores a table or column it does not know. One row, id 1.
CREATE TABLE schema_compat (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    oldest_reader VARCHAR(255) NOT NULL DEFAULT ''
);
INSERT INTO schema_compat (id, oldest_reader) VALUES (1, '');
