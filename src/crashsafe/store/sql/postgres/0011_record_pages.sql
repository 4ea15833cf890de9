-- crashsafe schema, version 11 (PostgreSQL): each page's listing, the records its last
-- parse yielded; a record is gone only when no page lists it (SQLite's 0013 says more).
CREATE TABLE record_pages (
    crawl  text   NOT NULL,
    record text   NOT NULL,
    page   bigint NOT NULL,
    PRIMARY KEY (crawl, record, page)
);
CREATE INDEX record_pages_page ON record_pages (page);
ALTER TABLE frontier ADD COLUMN listed boolean NOT NULL DEFAULT false;

INSERT INTO record_pages (crawl, record, page)
SELECT r.crawl, r.id, r.page FROM records r
WHERE r.gone_at IS NULL AND r.page IS NOT NULL
  AND r.seen_pass >= coalesce((SELECT done_pass FROM frontier WHERE id = r.page), 0)
ON CONFLICT DO NOTHING;
INSERT INTO record_pages (crawl, record, page)
SELECT f.crawl, j.value, f.id
FROM frontier f, jsonb_array_elements_text(f.validators::jsonb -> 'records') AS j(value)
WHERE f.state = 'done' AND f.validators IS NOT NULL
  AND jsonb_typeof(f.validators::jsonb -> 'records') = 'array'
  AND EXISTS (SELECT 1 FROM records r
              WHERE r.crawl = f.crawl AND r.id = j.value AND r.gone_at IS NULL)
ON CONFLICT DO NOTHING;
UPDATE frontier SET listed = true WHERE id IN (SELECT page FROM record_pages);
