"""Where the data that ships with dpsim lives: topology presets and calibration profiles.

pyproject's ``package-dir`` maps the checkout's top-level ``topologies/`` and
``calibration/profiles/`` into the package as ``dpsim.topologies`` and ``dpsim.profiles``, so
a wheel or an editable install finds them by import. A checkout imported without that mapping
(``python`` run in the clone's root after a regular ``pip install .``, whose working directory
shadows the installed package; ``PYTHONPATH=.``) has no such packages: there the data is read
from the checkout's own folders, the ones the mapping names.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from dpsim.errors import DpsimError

CHECKOUT_FOLDERS: dict[str, str] = {"dpsim.topologies": "topologies", "dpsim.profiles": "calibration/profiles"}
"""Each shipped data package and its folder in a source checkout (pyproject's ``package-dir``;
tests/test_install.py keeps the two equal)."""


def shipped_dir(package: str) -> Traversable:
    """The folder of ``package`` (a key of :data:`CHECKOUT_FOLDERS`), installed or in the checkout."""
    try:
        return resources.files(package)
    except ModuleNotFoundError:
        folder = Path(__file__).resolve().parent.parent / CHECKOUT_FOLDERS[package]
        if folder.is_dir():
            return folder
        raise DpsimError(f"dpsim's data package {package} is missing from {Path(__file__).parent}: "
                         f"reinstall dpsim (python -m pip install .)") from None
