"""Counter definitions, the counters dataset schema, rates, alignment and storage.

Depends on nothing else in bayes-sched. The main objects are importable from here (``from counters
import open_store``); they load on first use, so ``import counters`` imports no xarray.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the exported names, for type checkers
    from counters.align import align
    from counters.catalog import CATALOG, Counter
    from counters.errors import CountersError
    from counters.rates import counter_rate
    from counters.schema import build, validate
    from counters.store import (
        StoreWriter,
        export_netcdf,
        open_store,
        write_store,
    )

#: Public name -> module that defines it (imported on first use).
_EXPORTS: dict[str, str] = {
    "CATALOG": "counters.catalog",
    "Counter": "counters.catalog",
    "build": "counters.schema",
    "validate": "counters.schema",
    "StoreWriter": "counters.store",
    "open_store": "counters.store",
    "write_store": "counters.store",
    "export_netcdf": "counters.store",
    "align": "counters.align",
    "counter_rate": "counters.rates",
    "CountersError": "counters.errors",
}


def __getattr__(name: str) -> Any:
    # The main objects, imported on first use so that importing the package stays light.
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "CATALOG",
    "Counter",
    "build",
    "validate",
    "StoreWriter",
    "open_store",
    "write_store",
    "export_netcdf",
    "align",
    "counter_rate",
    "CountersError",
]
