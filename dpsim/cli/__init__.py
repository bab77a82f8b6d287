"""The ``dpsim`` command line: one typer app, every command registered here, in one table.

Each command is a plain function in its own module (``dpsim.cli.<name>``); this table is
the only place that turns functions into commands, so ``dpsim --help`` lists exactly
what it names. :func:`~dpsim.cli.app.main` is the error boundary (one line, exit 2).
"""

from __future__ import annotations

from dpsim.cli.app import app, main, run
from dpsim.cli.calibrate import calibrate
from dpsim.cli.collective import collective
from dpsim.cli.goodput import goodput_command
from dpsim.cli.layout_plan import plan_command
from dpsim.cli.memory import memory
from dpsim.cli.models import models
from dpsim.cli.plan import report, sweep_command
from dpsim.cli.predict import predict
from dpsim.cli.testbed import testbed_app
from dpsim.cli.validate import validate

COMMANDS = {
    "predict": predict,
    "memory": memory,
    "collective": collective,
    "models": models,
    "report": report,
    "sweep": sweep_command,
    "goodput": goodput_command,
    "plan": plan_command,
    "calibrate": calibrate,
    "validate": validate,
}
"""Command name -> function (typer builds the options from its signature)."""

SUBAPPS = {"testbed": testbed_app}
"""Command groups with subcommands of their own."""

for _name, _fn in COMMANDS.items():
    app.command(_name)(_fn)
for _name, _sub in SUBAPPS.items():
    app.add_typer(_sub, name=_name)

__all__ = ["app", "main", "run", "COMMANDS", "SUBAPPS"]
