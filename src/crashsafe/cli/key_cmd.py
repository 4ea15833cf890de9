"""secret-key: a new key for CRASHSAFE_SECRET_KEY (crashsafe/sealed.py)."""

from __future__ import annotations

import click


@click.command("secret-key")
def secret_key() -> None:
    """Print a new key for CRASHSAFE_SECRET_KEY: the secrets a stored request carries
    (credential headers, cookies, a proxy's password) are sealed with it. Give every
    worker of a crawl the same key; without one, an SQLite database keeps its own in
    <database>.key beside it."""
    from crashsafe.sealed import new_key

    click.echo(new_key())
