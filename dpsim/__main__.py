"""``python -m dpsim`` works like ``dpsim``."""

from dpsim.cli.app import run

run()
