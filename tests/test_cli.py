"""The command line a user meets first: --version, and help text on every option of every command, the plugin's
(edge_verl/cli.py) and the lab's (edge_verl_lab/cli.py, which the lab adds to ``edge-verl`` through the entry-point
group ``edge_verl.commands``: lab/pyproject.toml). The lab's commands need the lab installed beside the plugin, as
scripts/setup.sh installs it (``pip install -e . -e ./lab``)."""

import argparse
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from edge_verl.cli import COMMAND_GROUP, COMMANDS, LAB_COMMANDS, _parser, added_commands, main
from edge_verl_lab.cli import Command, build_parser as lab_parser

ROOT = Path(__file__).resolve().parents[1]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return dict(action.choices)


def test_version(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == "edge-verl 0.1.0"


def test_every_option_of_every_command_has_help():
    plugin, lab = _subcommands(_parser()), _subcommands(lab_parser())
    assert {"doctor", "preflight", "cpu-overrides", "run-identity", "method", "method-overrides"} <= set(plugin)
    # the plugin's parser lists the lab's commands (for --help) and the lab's parser defines each of them
    assert set(lab) == set(LAB_COMMANDS) <= set(plugin)
    commands = {name: command for name, command in plugin.items() if name not in LAB_COMMANDS} | lab
    missing = [
        f"{name} {action.option_strings or action.dest}"
        for name, command in commands.items()
        for action in command._actions
        if not isinstance(action, argparse._HelpAction) and not action.help
    ]
    assert not missing, missing


def test_the_lab_adds_its_commands_through_the_entry_point_group():
    added = added_commands()
    assert set(added) == set(LAB_COMMANDS), f"the lab's entry points are not installed: {sorted(added)} (pip install -e ./lab)"
    for name, entry in added.items():
        command = entry.load()
        assert isinstance(command, Command) and command.name == name and command.help
        assert entry.dist.name == "edge-verl-lab"


def test_reproduce_help_names_every_row_and_its_model_per_backend(capsys):
    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    text = capsys.readouterr().out
    assert "grpo_7b        Qwen/Qwen2.5-Math-7B" in text
    assert "gepo           Qwen/Qwen2.5-7B / Qwen/Qwen3.5-9B" in text


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A package installed for this test only (a folder on sys.path with its module and dist-info), whose
    entry points of ``edge_verl.commands`` are the text it is called with."""

    def install(entry_points: str) -> None:
        (tmp_path / "hello_command.py").write_text(textwrap.dedent('''
            class Hello:
                help = "say hello"

                def run(self, argv):
                    print("hello", *argv)
                    return 7


            HELLO = Hello()
            '''))
        info = tmp_path / "hello_command-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hello-command\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[{COMMAND_GROUP}]\n{entry_points}")
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "hello_command", raising=False)

    return install


def test_a_command_an_installed_package_adds_is_listed_and_handed_its_arguments(installed, capsys):
    installed("hello = hello_command:HELLO\noptions = hello_command:HELLO\nbroken = no_such_module:X\n")
    added = added_commands()
    assert {"hello", "broken"} <= set(added) and "options" not in added  # a command of the plugin's own stays its own
    assert main(["hello", "--to", "you"]) == 7 and capsys.readouterr().out == "hello --to you\n"
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "hello say hello" in text and "broken (no_such_module:X cannot be loaded: ModuleNotFoundError" in text
    assert main(["options"]) == 0 and capsys.readouterr().out.startswith("#")  # the plugin's options page


def test_a_command_of_the_plugin_never_loads_the_added_ones(installed, capsys):
    installed("broken = no_such_module:X\n")
    assert set(COMMANDS) >= {"method"}
    assert main(["method", "edge", "--field", "gec"]) == 0 and capsys.readouterr().out == "True\n"
    assert "no_such_module" not in sys.modules


def test_the_lab_is_its_own_distribution_of_the_plugins_version():
    tomllib = pytest.importorskip("tomllib", reason="pyproject.toml is read with Python 3.11's tomllib")
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lab = tomllib.loads((ROOT / "lab" / "pyproject.toml").read_text())["project"]
    assert lab["name"] == "edge-verl-lab" and lab["version"] == core["version"] == metadata.version("edge-verl")
    assert f"edge-verl=={core['version']}" in lab["dependencies"]
    assert set(lab["entry-points"][COMMAND_GROUP]) == set(LAB_COMMANDS)
    assert "lab" not in core.get("optional-dependencies", {})
