-- crashsafe schema, version 6 (PostgreSQL): when each worker was last seen working
-- (SQLite's 0008 says more).
ALTER TABLE workers ADD COLUMN last_seen timestamptz;
