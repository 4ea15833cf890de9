"""Every command is documented, and every setting too."""

from __future__ import annotations

from pathlib import Path

import click

from crashsafe.cli import cli
from crashsafe.crawl.settings import CrawlSettings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_command_has_a_section_in_cli_md() -> None:
    text = (DOCS / "cli.md").read_text()
    ctx = click.Context(cli)
    names = cli.list_commands(ctx)
    assert "crawl" in names and "batch" in names
    for name in names:
        command = cli.get_command(ctx, name)  # imports it: a broken lazy entry fails here
        assert command is not None and command.name == name
        assert f"\n## {name}\n" in text, f"docs/cli.md has no section for `crashsafe {name}`"
        for sub in getattr(command, "commands", {}):
            heading = f"\n### {name} {sub}\n"
            assert heading in text, f"docs/cli.md has no section for `crashsafe {name} {sub}`"


def test_every_setting_is_in_crawling_md() -> None:
    text = (DOCS / "crawling.md").read_text()
    for name in CrawlSettings.names():
        assert f"`{name}`" in text, f"docs/crawling.md does not document setting {name}"
