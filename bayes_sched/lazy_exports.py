"""Names a package exports but imports on first use (PEP 562), so that importing the package
stays light: ``import bayes_sched`` loads no torch, and a light part of the simulator (a law, the
workload reader) does not load the run driver.

A package declares ``_EXPORTS`` (public name -> module that defines it) and binds the pair this
module makes::

    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], namespace: dict[str, Any]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``: a name of ``exports`` is
    imported from its module on first use and kept in ``namespace`` (the package's globals), so
    later uses cost nothing; ``__dir__`` lists the package's ``__all__``."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(namespace.get("__all__", exports))

    return getattr_, dir_
