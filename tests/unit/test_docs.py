"""Every command is documented, and every setting too."""

from __future__ import annotations

import re
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


def command_lines(markdown: str, *, fence: str = "sh") -> list[str]:
    """The ``crashsafe ...`` command lines of the fenced blocks of ``markdown`` whose language
    is one of ``fence`` (``|``-separated; an empty name: a block with no language), without
    the ``crashsafe`` itself and comments; continuations (a trailing backslash, or the
    indented line of a synopsis) joined, spaces collapsed."""
    commands = []
    for lang, block in re.findall(r"^```(\w*)\n(.*?)^```", markdown, re.S | re.M):
        if lang not in fence.split("|"):
            continue
        lines: list[str] = []
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*", "", line)
            if line[:1].isspace() and lines:
                lines[-1] += " " + line
            elif found := re.match(r"(?:\.venv/bin/)?crashsafe (.*)", line):
                lines.append(found.group(1))
        commands += [" ".join(line.split()) for line in lines]
    return commands


def options_of(words: list[str]) -> tuple[list[str], set[str]]:
    """The command path (``["batch", "run"]``) that ``words`` start with, and its options."""
    ctx = click.Context(cli)
    command: click.Command | None = cli
    path: list[str] = []
    while isinstance(command, click.Group) and len(path) < len(words):
        command = command.get_command(ctx, words[len(path)])
        assert command is not None, f"no command `crashsafe {' '.join(words[: len(path) + 1])}`"
        path.append(words[len(path)])
    assert command is not None and not isinstance(command, click.Group), words
    names = {"--help", "-h"}
    for param in command.params:
        names.update(param.opts + param.secondary_opts)
    return path, names


def assert_real_command(line: str, where: str) -> None:
    """``line`` (what follows ``crashsafe``) names a command and only its options."""
    words = re.findall(r"[^\s\[\]|]+", line)
    path, names = options_of(words)
    for option in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", line):
        assert option.split("=")[0] in names, (
            f"{where}: `crashsafe {line}`: `crashsafe {' '.join(path)}` has no option {option}"
        )


def test_every_readme_command_names_a_command_and_its_real_options() -> None:
    """Each ``.venv/bin/crashsafe ...`` line of the README's shell blocks: the command exists
    and every option it uses is one of that command's options."""
    lines = command_lines((DOCS.parent / "README.md").read_text(), fence="sh")
    assert len(lines) >= 8
    for line in lines:
        assert_real_command(line, "README.md")


def test_every_docs_command_names_a_command_and_its_real_options() -> None:
    """The same for docs/*.md: the shell blocks, and the synopses of docs/cli.md."""
    checked = 0
    for page in sorted(DOCS.glob("*.md")):
        for line in command_lines(page.read_text(), fence="sh|"):
            assert_real_command(line, f"docs/{page.name}")
            checked += 1
    assert checked >= 15  # the synopses of every command and the examples of batch.md


def test_the_command_checker_catches_a_wrong_option() -> None:
    import pytest

    with pytest.raises(AssertionError, match="has no option --price"):
        assert_real_command("batch classify x --labels a,b --price 3", "here")
    with pytest.raises(AssertionError, match="no command `crashsafe batch clasify`"):
        assert_real_command("batch clasify x", "here")
    assert command_lines("```sh\ncrashsafe status \\\n  --db x  # comment\n```\n") == [
        "status --db x"
    ]
    synopsis = "```\ncrashsafe export [--db URL]\n                 [--csv-raw]\n```\n"
    assert command_lines(synopsis, fence="sh|") == ["export [--db URL] [--csv-raw]"]
