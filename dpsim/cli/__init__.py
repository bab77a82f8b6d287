"""The ``dpsim`` command line: one typer app over the table of :mod:`dpsim.cli.commands`.

Each command is a plain function in its own module (``dpsim.cli.<name>``), imported when
the command is first looked up. :func:`~dpsim.cli.app.main` is the error boundary (one
line, exit 2).
"""

from __future__ import annotations

from dpsim.cli.app import app, main, run
from dpsim.cli.commands import COMMANDS

__all__ = ["COMMANDS", "app", "main", "run"]
