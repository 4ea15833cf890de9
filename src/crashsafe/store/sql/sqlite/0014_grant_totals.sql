-- crashsafe schema, version 14 (SQLite): lease grants that stop piling up.
--
-- lease_grants kept a row per lease for good (about 100 bytes a page fetched): a crawl
-- recrawled every few hours grew by its size each pass, and the figures that count the
-- grants (status, the live line, the workers' pages) slowed down with it. Now grants
-- fold into counts per crawl, owner and outcome (store/sql_retention.py, fold_grants):
-- each grant a newer grant of the same run and page stands for (the newest stays, and
-- the newest done: what a run's own figures look at), and every grant of a run that is
-- over (none of its workers alive) ten minutes after it was last at work. A current
-- lease never folds. Figures add these counts to the rows still kept: they stay what
-- they were (but for one: a lost lease folded counts as lost, not as stale, if its
-- paused worker comes back to commit it; both are repeats).
CREATE TABLE grant_totals (
    crawl   TEXT    NOT NULL,
    owner   TEXT    NOT NULL,
    outcome TEXT    NOT NULL,  -- a grant's outcome, '' for none (lost to a crash)
    n       INTEGER NOT NULL,
    PRIMARY KEY (crawl, owner, outcome)
) WITHOUT ROWID;
