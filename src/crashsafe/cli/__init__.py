"""The ``crashsafe`` command. Thin: parses options, calls the API, maps errors to exits.

Exit codes: 0 done, 1 error (message on stderr), 2 usage, 130 interrupted.
"""

from __future__ import annotations

import importlib
import sys

import click

from crashsafe.errors import CrashsafeError

# command name -> "module:attribute"; a command's module is imported only when it runs,
# so `crashsafe crawl` does not pay for the batch machinery's imports (nor the reverse).
COMMANDS = {
    "crawl": "crawl_cmds:crawl",
    "status": "status_cmd:status",
    "failed": "failed_cmds:failed",
    "retry": "failed_cmds:retry",
    "pause": "steer_cmds:pause",
    "resume": "steer_cmds:resume",
    "cancel": "steer_cmds:cancel",
    "audit": "steer_cmds:audit",
    "ui": "ui_cmd:ui",
    "export": "export_cmd:export",
    "history": "history_cmd:history",
    "recrawl": "effects_cmds:recrawl",
    "deliver": "deliver_cmd:deliver",
    "parse": "try_cmds:parse_cmd",
    "shell": "try_cmds:shell",
    "demo-site": "demo_cmds:demo_site",
    "demo": "demo_cmds:demo",
    "killtest": "killtest_cmd:killtest",
    "batch": "batch_cmds:batch",
    "secret-key": "key_cmd:secret_key",
    "vacuum": "vacuum_cmd:vacuum",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(f"crashsafe.cli.{module}"), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="crashsafe")
def cli() -> None:
    """Data jobs that survive being killed: run the same command again to resume."""


def main() -> None:
    from crashsafe.cli.pipes import PipeSafe
    from crashsafe.logs import configure

    # A reader that goes away (`| head`) must not end a job half-way through its work.
    sys.stdout = PipeSafe(sys.stdout)
    sys.stderr = PipeSafe(sys.stderr)
    configure("INFO", "text")  # commands with --log-level / --log-format set their own
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
