-- crashsafe schema, version 9 (PostgreSQL): recrawls that cost only what changed (SQLite's
-- 0011 says more).
ALTER TABLE frontier ADD COLUMN validators text;
ALTER TABLE frontier ADD COLUMN revisit text;
ALTER TABLE frontier ADD COLUMN body_bytes bigint;
