-- crashsafe schema, version 12 (PostgreSQL): lease grants fold into counts per crawl,
-- owner and outcome instead of a row per lease for good (SQLite's 0014 says more).
CREATE TABLE grant_totals (
    crawl   text   NOT NULL,
    owner   text   NOT NULL,
    outcome text   NOT NULL,  -- '' for none (lost to a crash)
    n       bigint NOT NULL,
    PRIMARY KEY (crawl, owner, outcome)
);
