-- crashsafe schema, version 11 (SQLite): recrawls that cost only what changed (#29).

-- What a done page's last fetch showed, to ask the next pass for changes only: its
-- validators and body digest, as JSON ({"etag", "last_modified", "sha256", "spider"};
-- crawl/revisits.py), NULL for a page fetched before this version or not fetched (robots).
ALTER TABLE frontier ADD COLUMN validators TEXT;
-- How that fetch went in a recrawl: 'not-modified' (a 304 answered the validators),
-- 'unchanged' (the same body: not parsed), NULL (parsed). A page found unchanged yielded
-- its records again as far as mark_gone is concerned.
ALTER TABLE frontier ADD COLUMN revisit TEXT;
-- Body bytes that fetch downloaded (0 for a 304).
ALTER TABLE frontier ADD COLUMN body_bytes INTEGER;
