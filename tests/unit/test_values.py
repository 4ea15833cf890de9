"""The values that cross to the store process survive pickling whole."""

from __future__ import annotations

import pickle

from crashsafe.store import Lease, NewUrl, PageOutcome
from crashsafe.store.values import RecordRow


def test_store_values_pickle_to_equal_values() -> None:
    lease = Lease(frontier_id=7, url="http://a/x", depth=2, attempts=1, callback="item", grant_id=9)
    row = RecordRow.build(id="i", source="s", key="k", url="http://a/x", data={"p": [1, "é"]})
    outcome = PageOutcome(
        lease, "retry", 503, "HTTP 503", (row,), (NewUrl("http://a/y", 3, "cb", 1),), 12.5
    )
    for value in (lease, row, outcome, NewUrl("http://a/z")):
        copy = pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        assert copy == value and type(copy) is type(value)
