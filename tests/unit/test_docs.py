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


def test_the_readme_spider_is_the_example_file() -> None:
    """README's 30-second spider is examples/shop.py (which test_cli crawls), up to
    comments and layout."""
    import ast
    import re

    readme = (DOCS.parent / "README.md").read_text()
    [block] = re.findall(r"```python\n# examples/shop.py\n(.*?)```", readme, re.S)
    example = (DOCS.parent / "examples" / "shop.py").read_text()

    def classes(source: str) -> list[str]:
        tree = ast.parse(source)
        return [ast.dump(node) for node in tree.body if isinstance(node, ast.ClassDef)]

    assert classes(block) == classes(example)


def test_every_readme_command_names_a_command_and_its_real_options() -> None:
    """Each `.venv/bin/crashsafe ...` line of the README: the command exists and every
    --option it uses is one of that command's options."""
    import re
    import shlex

    from click.testing import CliRunner

    readme = (DOCS.parent / "README.md").read_text().replace("\\\n", " ")
    lines = [m.group(1) for m in re.finditer(r"\.venv/bin/crashsafe ([^\n#&]*)", readme)]
    assert len(lines) >= 6
    for line in lines:
        words = shlex.split(line)
        command = [words[0]] + ([words[1]] if words[0] == "batch" else [])
        result = CliRunner().invoke(cli, [*command, "--help"])
        assert result.exit_code == 0, (line, result.output)
        for option in (w.split("=")[0] for w in words if w.startswith("--")):
            assert option in result.output, f"README: `crashsafe {line}`: no option {option}"
