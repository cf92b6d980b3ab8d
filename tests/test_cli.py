"""The command line a user meets first: --version, and help text on every option of every command, the plugin's
(edge_verl/cli.py) and the lab's (edge_verl_lab/cli.py)."""

import argparse

import pytest

from edge_verl.cli import LAB_COMMANDS, _parser, main
from edge_verl_lab.cli import build_parser as lab_parser


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


def test_reproduce_help_names_every_row_and_its_model_per_backend(capsys):
    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    text = capsys.readouterr().out
    assert "grpo_7b        Qwen/Qwen2.5-Math-7B" in text
    assert "gepo           Qwen/Qwen2.5-7B / Qwen/Qwen3.5-9B" in text
