-- crashsafe schema, version 4 (PostgreSQL): a record's key and data read back exactly
-- (SQLite's 0006 says more).
ALTER TABLE records ADD COLUMN key_json text;
ALTER TABLE records ADD COLUMN data_exact text;
ALTER TABLE records ADD COLUMN is_item boolean NOT NULL DEFAULT false;
-- json, not jsonb: jsonb refuses the escapes \u0000 and a lone surrogate's, which carry
-- what a spider yielded exactly, and reorders an item's fields. Nothing queries into it.
ALTER TABLE records ALTER COLUMN data TYPE json USING data::json;
ALTER TABLE outbox ALTER COLUMN data TYPE json USING data::json;

ALTER TABLE robots ADD COLUMN failing_why text;

ALTER TABLE frontier ADD COLUMN links_cut integer NOT NULL DEFAULT 0;
