"""Stand-in for torchvision (see tests/stubs/README.md)."""

from . import models  # noqa: F401

__version__ = "0.0-stub"
