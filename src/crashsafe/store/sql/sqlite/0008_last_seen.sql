-- crashsafe schema, version 8 (SQLite): when each worker was last seen working.

-- Set by the worker every few seconds while it runs (crawl/upkeep.py): the console shows
-- it beside the worker's liveness (its lock), which says alive or dead but not since when.
ALTER TABLE workers ADD COLUMN last_seen REAL;
