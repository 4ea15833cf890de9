"""The operator's console (``crashsafe ui``): a local web page over one database, live
while jobs run, with the steering actions of ``crashsafe pause|resume|cancel|retry``, and
Prometheus metrics at ``/metrics``.

Everything shown is computed from the store's rows (``snapshot.py``), so the page,
``/metrics`` and ``crashsafe status`` agree; the page (``static/``) renders every value
as text, never as markup. ``app.py`` serves it; ``guard.py`` keeps it local unless a
token is given.
"""
