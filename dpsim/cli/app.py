"""The one typer application, its JSON output and the error boundary of the command line.

Every :class:`~dpsim.errors.DpsimError` and every bad flag is caught once, in :func:`main`,
and printed as one line on stderr (exit status 2); nothing prints a traceback. Commands
live in their own modules and are registered in :mod:`dpsim.cli` (one table).
"""

from __future__ import annotations

import json
import math
import sys

import typer

from dpsim.errors import DpsimError

try:  # typer >= 0.22 parses with its own vendored copy of click (the click package may be absent)
    from typer._click import exceptions as _click_exceptions
except ImportError:  # older typer uses click itself
    from click import exceptions as _click_exceptions  # type: ignore[no-redef]
_CLICK_ERRORS = (_click_exceptions.ClickException,)
_ABORTS = tuple({typer.Abort, getattr(_click_exceptions, "Abort", typer.Abort)})

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Discrete-event simulator of data-parallel GPU training clusters.")


def _json_safe(obj):
    # JSON has no inf/nan (e.g. the ring bandwidth of a 1-GPU "ring" is inf): write null.
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _emit_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(_json_safe(obj), indent=2, allow_nan=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning every user error into one line on stderr."""
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="dpsim", standalone_mode=False)
    except _ABORTS:
        print("dpsim: aborted", file=sys.stderr)
        return 130
    except _CLICK_ERRORS as exc:
        message = " ".join(exc.format_message().split())
        if type(exc).__name__ == "NoArgsIsHelpError":
            # Bare ``dpsim``: typer's rich help is already on stdout (or is the message).
            if message:
                print(exc.format_message())
            message = f"missing command; choose one of {', '.join(sorted(command.commands))}"
        print(f"dpsim: error: {message}", file=sys.stderr)
        return 2
    except DpsimError as exc:
        print(f"dpsim: error: {exc}", file=sys.stderr)
        return 2
    return 0


def run() -> None:
    """Console-script entry point (``dpsim``)."""
    sys.exit(main())
