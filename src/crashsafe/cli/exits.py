"""The exit statuses of every command (docs/production.md says when each comes)."""

from __future__ import annotations

OK = 0
ERROR = 1  # the command could not do its work: the message says why
USAGE = 2  # click's: an option or argument it cannot take
SPEND_CAP = 3  # batch: stopped before a spend cap would be passed
FAILED = 4  # done, but work is left in a dead letter (pages, batches, webhook deliveries)
WAITING = 5  # crawl: stopped waiting, all that is left waits on unreachable origins
CANCELLED = 6  # crawl: `crashsafe cancel` ended the run; run the same command to resume
INTERRUPTED = 130  # Ctrl-C or SIGTERM: run the same command again to resume
