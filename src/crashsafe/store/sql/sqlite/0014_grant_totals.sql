-- crashsafe schema, version 14 (SQLite): lease grants that stop piling up.
--
-- lease_grants kept a row per lease for good (about 100 bytes a page fetched): a crawl
-- recrawled every few hours grew by its size each pass, and the figures that count the
-- grants (status, the live line, the workers' pages) slowed down with it. Now grants
-- fold into counts per crawl, owner and outcome (store/sql_retention.py, fold_grants):
-- every grant of a run that is over (none of its workers is alive), and of a running
-- one each grant a newer grant of the same worker and page stands for (the newest stays,
-- and the newest done: what a run's own figures look at). A current lease never folds.
-- Figures add these counts to the rows still kept: they stay what they were.
CREATE TABLE grant_totals (
    crawl   TEXT    NOT NULL,
    owner   TEXT    NOT NULL,
    outcome TEXT    NOT NULL,  -- a grant's outcome, '' for none (lost to a crash)
    n       INTEGER NOT NULL,
    PRIMARY KEY (crawl, owner, outcome)
) WITHOUT ROWID;
