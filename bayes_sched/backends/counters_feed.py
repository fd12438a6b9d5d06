"""The nodes' collector counters for a real cluster's rounds: the latest window of their stores.

Each node's collector (``bayes-sched collect --out STORE``) journals into a counters store
(:mod:`counters.store`); on a cluster, the stores sit under one directory (a shared file system,
as the job directories do), one per node. Every round the backend reads the newest
``window_seconds`` of each (:func:`counters.store.open_store`, lazily, then only the window), and
puts several nodes on one time grid (:func:`counters.align.align`: their clocks and sampling
schedules differ). The result is what :attr:`bayes_sched.cluster.ClusterState.counters` holds:
a counters dataset, ``(time, node[, device])``, its time axis wall-clock time (the cluster's time
0 is :attr:`RealCluster.epoch <bayes_sched.backends.real_cluster.RealCluster.epoch>`).

Each window is read inside :func:`counters.store.reading`, so no commit deletes a part under it.
A store that cannot be read this round (a collector just starting, a damaged part, a commit
holding it longer than :data:`STORE_WAIT_SECONDS`) is left out with a warning, never an error:
counters inform the policy, they must not stop the scheduler.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import xarray as xr

from bayes_sched.errors import InputError
from counters import schema
from counters.align import align
from counters.errors import CountersError
from counters.store import open_store, reading
from counters.storedir import is_store

LOG = logging.getLogger(__name__)

#: Seconds of counters a round's cluster state holds by default (the newest sample's time back).
DEFAULT_WINDOW_SECONDS = 300.0
#: Seconds a round waits for a store a commit holds (a commit takes a few): past it, the store is
#: left out of the round rather than holding the scheduler up.
STORE_WAIT_SECONDS = 10.0


class CountersFeed:
    """Reads the latest counters of the nodes' collectors.

    Args:
        root: one counters store, or a directory holding one store per node (any names).
        window_seconds: how far before each store's newest sample the window reaches.
        flag: how the operator named ``root`` (for the error message).

    Raises:
        InputError: ``root`` is not a directory.
    """

    def __init__(self, root: str | Path, window_seconds: float = DEFAULT_WINDOW_SECONDS,
                 flag: str = "--counters") -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise InputError(f"{flag} {self.root}: not a directory; expected a counters store "
                             "or a directory of them (bayes-sched collect --out)", column=flag)
        if not window_seconds > 0:
            raise InputError(f"counters window {window_seconds!r}: expected seconds > 0")
        self.window_seconds = float(window_seconds)
        self.problems: list[str] = []

    def stores(self) -> list[Path]:
        """The stores under :attr:`root` (itself, where it is one), by name."""
        if is_store(self.root):
            return [self.root]
        return sorted(p for p in self.root.iterdir() if is_store(p))

    def read(self, aliases: Mapping[str, str] | None = None) -> xr.Dataset | None:
        """The newest ``window_seconds`` of every readable store, several nodes aligned onto
        one grid (the coarsest median sample interval among them); ``None`` where no store
        holds samples yet. ``aliases`` (the launcher's :meth:`node_aliases
        <bayes_sched.backends.launcher.Launcher.node_aliases>`) renames the ``node``
        coordinate from the names the collectors recorded (host names) to the cluster's node
        ids, so the counters are keyed as the cluster's nodes are (:func:`name_nodes`)."""
        windows = []
        for store in self.stores():
            try:
                windows.append(self._window(store))
            except CountersError as error:
                self._note(f"counters store left out this round: {error}")
        if len(windows) <= 1:
            merged = windows[0] if windows else None
        else:
            interval = max(_median_interval(w) for w in windows)
            try:
                merged = align(windows, interval)
            except CountersError as error:
                self._note(f"counters of {len(windows)} stores not aligned this round: {error}")
                return None
        if merged is None or aliases is None:
            return merged
        named, unknown = name_nodes(merged, aliases)
        if unknown:
            self._note(f"counters of node(s) {', '.join(unknown)} match no node of the cluster "
                       "(expected a node's host name, address or id: collect --node)")
        return named

    def _window(self, store: Path) -> xr.Dataset:
        with reading(store, timeout_s=STORE_WAIT_SECONDS):
            ds = open_store(store)
            times = ds[schema.TIME].values
            newest = times[-1]
            start = newest - np.timedelta64(int(self.window_seconds * 1e9), "ns")
            return ds.sel({schema.TIME: slice(start, newest)}).load()

    def _note(self, problem: str) -> None:
        LOG.warning("%s", problem)
        self.problems.append(problem)
        del self.problems[:-20]  # the latest few, for status


def name_nodes(ds: xr.Dataset, aliases: Mapping[str, str]) -> tuple[xr.Dataset, list[str]]:
    """``ds`` with its ``node`` coordinate mapped through ``aliases`` (recorded name -> the
    cluster's node id), and the recorded names that match none (kept as they are). Two names
    that map to one node (two collectors on it) keep their recorded names, and count as
    unmatched."""
    names = [str(n) for n in ds[schema.NODE].values.tolist()]
    mapped = [aliases.get(name, name) for name in names]
    taken = list(mapped)
    unknown = []
    for i, (name, target) in enumerate(zip(names, mapped, strict=True)):
        if name not in aliases or taken.count(target) > 1:
            mapped[i] = name
            unknown.append(name)
    return ds.assign_coords({schema.NODE: np.asarray(mapped, dtype=str)}), unknown


def _median_interval(ds: xr.Dataset) -> float:
    """Median seconds between samples (1 s where there is one sample)."""
    seconds = schema.time_to_seconds(ds[schema.TIME].values)
    return float(np.median(np.diff(seconds))) if seconds.size > 1 else 1.0
