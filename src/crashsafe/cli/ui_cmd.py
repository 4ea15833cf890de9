"""ui: the operator's console, a local web page over one database (``crashsafe/console``)."""

from __future__ import annotations

from pathlib import Path

import click

from crashsafe.cli.options import db_option, open_db, serve_until_interrupted
from crashsafe.errors import ConfigError, CrashsafeError
from crashsafe.store import masked

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MIN_TOKEN = 16  # characters of --token at least


@click.command()
@db_option()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; any but 127.0.0.1 needs --token.")  # fmt: skip
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option("--token", envvar="CRASHSAFE_UI_TOKEN", default=None, metavar="TOKEN",
              help="Needed by every request (env CRASHSAFE_UI_TOKEN): open "
                   "/login?token=TOKEN once in the browser; scripts send "
                   "'Authorization: Bearer TOKEN'.")  # fmt: skip
@click.option("--read-only", is_flag=True, help="Show, never act: no pause, resume, retry.")
@click.option("--checkpoint", "checkpoints", multiple=True, metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path),
              help="A batch job's checkpoint to show too (repeat for several).")  # fmt: skip
def ui(
    db_url: str,
    host: str,
    port: int,
    token: str | None,
    read_only: bool,
    checkpoints: tuple[Path, ...],
) -> None:
    """Serve the operator's console: every crawl of the database live (state, counts,
    workers, errors, records, the audit), pause/resume/cancel/retry, and Prometheus
    metrics at /metrics. Ctrl-C stops it; the jobs go on."""
    from crashsafe.console.app import make_app
    from crashsafe.console.guard import Guard
    from crashsafe.console.snapshot import Hub

    if host not in LOOPBACK and not token:
        raise ConfigError(
            f"--host {host} lets other machines reach the console: give --token (or set "
            "CRASHSAFE_UI_TOKEN) so that only those who know it can"
        )
    if token is not None and len(token) < MIN_TOKEN:
        raise ConfigError(
            f"--token: {len(token)} characters, at least {MIN_TOKEN} are needed (one that "
            "cannot be guessed: python3 -c 'import secrets; print(secrets.token_urlsafe())')"
        )
    try:
        open_db(db_url, readonly=True).close()  # a database that is not there: said now
    except CrashsafeError as exc:
        if not checkpoints:
            raise
        click.echo(f"{exc}: showing the batch jobs only", err=True)
        hub = Hub(None, checkpoints=checkpoints)
    else:
        hub = Hub(lambda: open_db(db_url, readonly=read_only), checkpoints=checkpoints)
    guard = Guard(host=host, token=token)
    app = make_app(hub, guard, read_only=read_only)

    def announce(bound: int) -> str:
        guard.bound(bound)
        shown = "127.0.0.1" if host in ("127.0.0.1", "localhost") else host
        where = f"http://{f'[{shown}]' if ':' in shown else shown}:{bound}/"
        login = "login?token=... (the token)" if token else ""
        mode = " (read-only)" if read_only else ""
        what = masked(db_url) if hub.has_database else "batch jobs only"
        return (f"console of {what}{mode}: {where}{login}  metrics: {where}metrics  "
                "Ctrl-C stops it.")  # fmt: skip

    try:
        serve_until_interrupted(app, port, announce=announce, name="console", host=host)
    finally:
        hub.close()
