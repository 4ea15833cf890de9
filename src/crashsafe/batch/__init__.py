"""Resumable batch jobs: a fixed input, a task per batch, an append-only JSONL checkpoint."""
