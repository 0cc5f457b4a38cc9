"""The README's Commands block is the command line's synopsis (issue 54): every command and flag it shows is
in that command's `--help`, and every command, subcommand and option `--help` lists is in the block (the
emulator's `serve`, whose fault options fill docs/emulator.md, aside)."""

from __future__ import annotations

import re
from collections import defaultdict

import click
from click.testing import CliRunner

from etl.cli.app import cli
from tests.support import ROOT

FLAG = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")
OWN_PAGE = {("emulator", "serve")}  # dozens of fault options, each in docs/emulator.md


def block() -> list[str]:
    """The Commands block's command lines, a continuation line joined to its command, comments cut."""
    text = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Commands\n", 1)[1]
    lines: list[str] = []
    for line in text.split("```\n", 2)[1].splitlines():
        code = line.split("  #", 1)[0].rstrip()
        if line.startswith("etl"):
            lines.append(code)
        else:
            assert line.startswith(" ") and lines, line
            lines[-1] += " " + code.strip()
    return lines


def synopsis() -> dict[tuple[str, ...], set[str]]:
    """(command path) -> the flags the block shows for it; `a|b` alternatives of a subcommand each."""
    context = click.Context(cli)
    shown: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for line in block():
        words = line.split()[1:]
        paths: list[tuple[str, ...]] = [()]
        command: click.Command = cli
        while isinstance(command, click.Group) and words and re.fullmatch(r"[a-z][a-z|-]*", words[0]):
            names = words.pop(0).split("|")
            found = [command.get_command(context, name) for name in names]
            assert all(found), (line, names)
            paths = [(*path, name) for path in paths for name in names]
            command = found[0]  # alternatives are siblings: the last level is walked no further
        for path in paths:
            shown[path] |= set(FLAG.findall(" ".join(words)))
    return shown


def help_text(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="etl")
    assert result.exit_code == 0, (path, result.output)
    return result.output


def commands(group: click.Group, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], click.Command]:
    context = click.Context(group)
    found: dict[tuple[str, ...], click.Command] = {path: group}
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            found.update(commands(command, (*path, name)))
        else:
            found[(*path, name)] = command
    return found


def test_every_command_and_flag_of_the_block_is_in_its_help():
    for path, flags in synopsis().items():
        text = help_text(path)
        for flag in flags:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), (path, flag)


def test_every_command_and_option_of_the_cli_is_in_the_block():
    shown = synopsis()
    for path, command in commands(cli).items():
        if isinstance(command, click.Group) and path:
            continue  # a group's commands are what the block lists
        assert path in shown, f"{' '.join(['etl', *path])} is not in README.md's Commands block"
        if path in OWN_PAGE:
            continue
        for param in command.params:
            if not isinstance(param, click.Option) or param.hidden or "--help" in param.opts:
                continue
            for names in (param.opts, param.secondary_opts):
                assert not names or set(names) & shown[path], (path, names)
