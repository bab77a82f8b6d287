"""``python -m dpsim`` works like ``dpsim``."""

from dpsim.cli import run

run()
