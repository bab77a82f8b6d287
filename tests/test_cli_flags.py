"""Every command's flags and the ``--help`` panel each is shown in, frozen in tests/data/cli_flags.json.

A flag added, removed, renamed or moved to another panel fails here until the list is
rewritten, so the change is seen in review. When it is intended: give a new
``PredictConfig`` field its panel in ``CONFIG_PANELS`` (dpsim/cli/panels.py), or a
command's own option ``rich_help_panel=``, then ``python tests/test_cli_flags.py``
rewrites the list; commit it with the change.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

FROZEN = Path(__file__).resolve().parent / "data" / "cli_flags.json"
UPDATE = "python tests/test_cli_flags.py"

UNGROUPED = ("models", "testbed")
"""Commands with a handful of flags, left in typer's one "Options" panel."""


def _spelling(param) -> str:
    if param.param_type_name == "argument":
        return param.name.upper()
    return "/".join([*param.opts, *param.secondary_opts])


def _panel(param) -> str:
    default = "Arguments" if param.param_type_name == "argument" else "Options"
    return getattr(param, "rich_help_panel", None) or default


def _walk(name: str, command) -> dict[str, dict[str, str]]:
    if hasattr(command, "commands"):  # a group (testbed): each subcommand on its own
        out = {}
        for sub in command.list_commands(None):
            out.update(_walk(f"{name} {sub}", command.commands[sub]))
        return out
    return {name: {_spelling(p): _panel(p) for p in command.params}}


def current() -> dict[str, dict[str, str]]:
    """Command (``testbed up`` for a subcommand) -> {flag spelling: panel}, in ``--help`` order."""
    from dpsim.cli import COMMANDS, app

    group = typer.main.get_command(app)
    out: dict[str, dict[str, str]] = {}
    for name in COMMANDS:
        out.update(_walk(name, group.commands[name]))
    return out


def _changes(frozen: dict, now: dict) -> list[str]:
    lines = []
    for command in sorted(set(frozen) | set(now)):
        old, new = frozen.get(command), now.get(command)
        if old is None or new is None:
            lines.append(f"command {command}: {'new' if old is None else 'removed'}")
            continue
        for flag in sorted(set(old) | set(new)):
            if flag not in old:
                lines.append(f"{command} {flag}: new, in panel {new[flag]!r}")
            elif flag not in new:
                lines.append(f"{command} {flag}: removed (was in {old[flag]!r})")
            elif old[flag] != new[flag]:
                lines.append(f"{command} {flag}: panel {old[flag]!r} -> {new[flag]!r}")
    return lines


def test_flags_and_panels_equal_the_frozen_list():
    changes = _changes(json.loads(FROZEN.read_text()), current())
    assert not changes, (
        "the command-line flags differ from tests/data/cli_flags.json:\n  " + "\n  ".join(changes)
        + f"\nIf intended: a new PredictConfig field gets its panel in CONFIG_PANELS (dpsim/cli/panels.py), a "
          f"command's own flag rich_help_panel=...; then run `{UPDATE}` and commit tests/data/cli_flags.json.")


def test_every_config_field_has_one_panel():
    from dpsim.cli.panels import CONFIG_PANELS, PANEL_ORDER
    from dpsim.predict.config import SETTINGS

    listed = [name for names in CONFIG_PANELS.values() for name in names]
    fields = list(SETTINGS)
    missing, unknown = sorted(set(fields) - set(listed)), sorted(set(listed) - set(fields))
    assert not missing, f"give the PredictConfig fields {missing} a panel in CONFIG_PANELS (dpsim/cli/panels.py)"
    assert not unknown, f"CONFIG_PANELS names {unknown}, which PredictConfig does not have"
    assert len(listed) == len(set(listed)), "a field is in two panels"
    assert set(CONFIG_PANELS) <= set(PANEL_ORDER)


def test_grouped_commands_leave_no_flag_in_the_catch_all_panel():
    from dpsim.cli.panels import PANEL_ORDER

    for command, flags in current().items():
        panels = set(flags.values())
        if command.split()[0] in UNGROUPED:
            assert panels <= {"Options", "Arguments"}, command
            continue
        ungrouped = sorted(flag for flag, panel in flags.items() if panel == "Options")
        assert not ungrouped, f"{command}: give {ungrouped} a rich_help_panel= (dpsim/cli/panels.py)"
        assert panels - {"Arguments"} <= set(PANEL_ORDER), f"{command}: add its panels to PANEL_ORDER"


def test_help_shows_the_panels_in_their_order(capsys, monkeypatch):
    from dpsim.cli import main
    from dpsim.cli.panels import PANEL_ORDER

    monkeypatch.setenv("COLUMNS", "200")
    assert main(["predict", "--help"]) == 0
    titles = [line.split("─ ", 1)[1].split(" ─", 1)[0] for line in capsys.readouterr().out.splitlines()
              if line.startswith("╭─ ")]
    assert titles[0] == "Options" and titles[1:] == [p for p in PANEL_ORDER if p in titles], titles
    assert {"Cluster", "Workload", "Parallelism", "Precision & memory", "Calibration", "Variability & failures",
            "Output"} <= set(titles)


def main() -> None:
    FROZEN.write_text(json.dumps(current(), indent=1) + "\n")
    print(f"{sum(map(len, current().values()))} flags of {len(current())} commands -> {FROZEN}")


if __name__ == "__main__":
    main()
