"""Worlds: the simulated settings policies run in, each an object owning its defaults and truth.

:data:`WORLDS` maps a name to a :class:`~bayes_sched.worlds.base.World`:

================  ================================================================================
``pollux``        Pollux's artifact: adaptive jobs on measured profiles, 16 nodes of 4 T4s
``typed_pollux``  the same jobs on several GPU types, per-type profiles measured or derived (Sia)
``gavel``         Gavel's throughput table: fixed jobs at measured steps/s per type, 6-min rounds
``shockwave``     Shockwave's world: jobs whose batch size changes, its tacc table, 32 V100s
================  ================================================================================

:func:`world_of` tells which world a job source (a trace or workload file, or a shipped name)
belongs to. The world objects are light (their modules import the simulator only to read jobs
or run), so listing them costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from bayes_sched.errors import InputError
from bayes_sched.worlds.base import World
from bayes_sched.worlds.pollux import POLLUX, POLLUX_WORLD_POLICIES, TYPED_POLLUX
from bayes_sched.worlds.table import (
    GAVEL,
    GAVEL_TRACES,
    SHOCKWAVE,
    TABLE_WORLD_POLICIES,
    TIME_SHARING_POLICIES,
)

#: Every world by name.
WORLDS: Mapping[str, World] = MappingProxyType(
    {world.name: world for world in (POLLUX, TYPED_POLLUX, GAVEL, SHOCKWAVE)})


def get_world(name: str, flag: str = "--world") -> World:
    """The world ``name``, or a one-line error naming ``flag`` and the worlds."""
    world = WORLDS.get(name)
    if world is None:
        raise InputError(f"{flag} {name}: unknown world; expected one of {', '.join(WORLDS)}")
    return world


def world_of(source: str, flag: str = "--trace") -> World:
    """The world whose jobs ``source`` holds: a Pollux workload (CSV with its columns, or a
    shipped name), a Shockwave trace (12 columns, or ``tacc_120``), else a Gavel trace; a typed
    cluster's Pollux runs are told apart by their cluster, not their jobs (``pollux``).

    Raises:
        InputError: ``source`` is none of these (one line naming ``flag``).
    """
    for world in (POLLUX, SHOCKWAVE, GAVEL):
        if world.accepts(source):
            return world
    raise InputError(f"{flag} {source}: no such workload or trace; expected a Pollux workload, a "
                     f"Gavel .trace file or one of {', '.join(GAVEL_TRACES)}, or a Shockwave "
                     "trace")


__all__ = ["GAVEL", "POLLUX", "POLLUX_WORLD_POLICIES", "SHOCKWAVE", "TABLE_WORLD_POLICIES",
           "TIME_SHARING_POLICIES", "TYPED_POLLUX", "WORLDS", "World", "get_world", "world_of"]
