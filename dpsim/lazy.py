"""Lazy package exports (PEP 562): ``from dpsim.predict import predict`` without importing every submodule first.

A package lists ``name -> submodule`` and gets a module ``__getattr__`` that imports the
submodule on first use, so importing ``dpsim.predict.config`` does not drag in the whole
prediction chain, and ``dpsim --help`` starts near the interpreter's own start-up time.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` exporting ``exports`` (name -> submodule of ``package``)."""
    for name, module in exports.items():
        assert module.startswith(package + "."), f"{package}.{name}: exports only come from the package itself"
        # Importing a submodule sets an attribute of the same name on its package, which
        # would shadow an export of that name once the submodule is loaded.
        assert f"{package}.{name}" not in exports.values(), f"{package}.{name}: an export may not be named like a submodule"

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__


def callable_package(package: str, target: str) -> None:
    """Make the imported package ``package`` callable as ``target`` (``module:function``, imported
    on the first call).

    ``dpsim.predict`` and ``dpsim.plan`` are subpackages named like the public functions
    ``dpsim`` exports: once a subpackage is imported Python binds its name on the parent to the
    subpackage, whatever the parent exports. So the subpackage calls the function, and
    ``dpsim.predict(config)`` and ``dpsim.predict.run`` both work.
    """
    module, name = target.split(":")

    class CallablePackage(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return getattr(importlib.import_module(module), name)(*args, **kwargs)

        def __reduce_ex__(self, protocol: Any) -> tuple:
            # Pickled as the function it calls: ``Pool().map(dpsim.predict, configs)`` failed "cannot pickle
            # 'CallablePackage' object" (a module pickles by nothing); copy.copy gives the function too.
            return _imported, (module, name)

    CallablePackage.__call__.__doc__ = f"Call :func:`{module}.{name}`."
    sys.modules[package].__class__ = CallablePackage


def _imported(module: str, name: str) -> Any:
    """``module.name``, imported: what a callable package unpickles as (:func:`callable_package`)."""
    return getattr(importlib.import_module(module), name)
