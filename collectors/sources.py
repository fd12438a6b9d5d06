"""Collector sources by name: the built-in ones and plugins, made from what ``collect`` knows.

:func:`source_names` lists the built-in sources (``nvml``, ``pcie``, ``perf``, ``procfs``, in the
order they are made: NVML first, for device order) and then every entry point of the group
``bayes_sched.collector_sources`` that an installed distribution declares (value
``"module:attribute"``, a :class:`~collectors.base.Source` class or factory). A plugin cannot
replace a built-in of the same name: it is skipped with a warning naming its distribution.

:func:`make_source` makes one from the context ``collect`` gives: ``library`` (the NVML library
path), ``nvml`` (the NVML source made before it, or ``None``), ``pids`` (perf's process ids);
each is passed where the factory has a parameter of that name.

This module is on the collector path: it imports neither ``bayes_sched`` nor torch (nor numpy
until a source is made).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Mapping
from functools import cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy comes with them: ``collect --help`` reads the names only
    from collectors.base import Source

LOG = logging.getLogger(__name__)

#: The entry-point group of plugin sources.
GROUP = "bayes_sched.collector_sources"

#: Built-in source name -> its class, in the order sources are made.
BUILTIN: Mapping[str, str] = {
    "nvml": "collectors.nvml:NvmlSource",
    "pcie": "collectors.pcie:PcieAfterNvml",
    "perf": "collectors.perf:PerfSource",
    "procfs": "collectors.procfs:ProcfsSource",
}


@cache
def _plugins() -> dict[str, tuple[str, str]]:
    """Plugin name -> (``"module:attribute"``, its distribution)."""
    found: dict[str, tuple[str, str]] = {}
    for point in entry_points(group=GROUP):
        dist = point.dist.name if point.dist is not None else "an unknown distribution"
        if point.name in BUILTIN or point.name in found:
            LOG.warning("collector source plugin '%s' of %s skipped: a source of that name is "
                        "built in or installed already", point.name, dist)
            continue
        found[point.name] = (point.value, dist)
    return found


def source_names() -> tuple[str, ...]:
    """Every source ``--sources`` may name: the built-ins, then the plugins."""
    return (*BUILTIN, *_plugins())


def make_source(name: str, context: Mapping[str, Any]) -> Source:
    """A fresh source ``name`` given ``context`` (see the module).

    Raises:
        CollectorError: an unknown name, or a plugin that cannot be loaded (one line naming
            its distribution).
    """
    from collectors.base import CollectorError

    plugin = _plugins().get(name)
    if name in BUILTIN:
        path, dist = BUILTIN[name], ""
    elif plugin is not None:
        path, dist = plugin
    else:
        raise CollectorError(f"--sources: unknown source '{name}'; expected some of "
                             f"{', '.join(source_names())}")
    module, _, attribute = path.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as error:
        raise CollectorError(f"collector source '{name}' (plugin: {dist}): cannot load {path}: "
                             f"{error}") from None
    accepted = inspect.signature(factory).parameters
    source: Source = factory(**{key: value for key, value in context.items()
                                if key in accepted})
    return source


__all__ = ["BUILTIN", "GROUP", "make_source", "source_names"]
