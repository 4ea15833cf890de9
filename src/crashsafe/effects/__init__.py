"""Side effects beyond records: files, the WARC archive, the outbox and its webhooks."""
