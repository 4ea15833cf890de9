"""The ``crashsafe`` command. Thin: parses options, calls the API, maps errors to exits.

Exit codes: 0 done, 1 error (message on stderr), 2 usage, 130 interrupted.
"""

from __future__ import annotations

import sys

import click

from crashsafe.cli.batch_cmds import batch
from crashsafe.cli.crawl_cmds import crawl, export, failed, retry, status
from crashsafe.cli.demo_cmds import demo, demo_site
from crashsafe.cli.killtest_cmd import killtest
from crashsafe.errors import CrashsafeError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="crashsafe")
def cli() -> None:
    """Data jobs that survive being killed: run the same command again to resume."""


for command in (crawl, status, failed, retry, export, demo_site, demo, killtest, batch):
    cli.add_command(command)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except CrashsafeError as exc:
        click.secho(f"Error: {exc}", err=True, fg="red")
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
