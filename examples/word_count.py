"""A batch task: count the words of each item.

    crashsafe batch run reviews.jsonl --task examples/word_count.py:count_words \\
        --checkpoint counts.jsonl

A task gets a list of items (``.id``, ``.text``, ``.data``) and returns one JSON-able
result per item, in order. ``EXAMPLE_SLEEP`` (seconds per batch) makes it slow enough to
interrupt by hand.
"""

import os
import time


def count_words(items):
    time.sleep(float(os.environ.get("EXAMPLE_SLEEP", "0")))
    return [{"words": len(item.text.split())} for item in items]
