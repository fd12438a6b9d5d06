"""The collector loop: drift-free sampling, buffered appends, bounded memory, flush on signal.

Timing: sample ``k`` is due at ``start + k * interval`` on the monotonic clock, so the schedule
never drifts however long each sample takes; a sample that overruns makes the loop skip the
instants it missed (counted in ``skipped``) rather than bunch samples up, and a wake that comes
late by an interval or more counts the instants it missed too. So sample ``k`` starts within
``[start + k * interval, start + (k + 1) * interval)`` on the monotonic clock, and samples taken
plus ``skipped`` is one more than the last sample's instant. Each sample is stamped with the wall
clock at the moment it was taken. A store's times only increase, so where the wall clock steps
back (an NTP step, a restored VM) the samples stamped at or before the last stored one are not
stored, as Prometheus refuses out-of-order samples: they are counted (``out_of_order``, the
``collector_out_of_order_samples_total`` metric) and logged once per step, and the exporter
still serves them. "Stored" counts the store's own samples once the writer knows them: an
in-process writer on opening, a child committer from the first commit on (a restarted
collector's samples journalled before that are left out by the commit, and counted then).

Storage: each sample is journalled as it is taken (:meth:`counters.storedir.StoreJournal.log`:
one ``write`` of one record, synced within a second), so SIGKILL loses nothing journalled and a
power loss at most the last second. Every ``flush_every`` samples the journal segment is sealed
and a writer thread commits the sealed segments as a store part -- by name, not by handing over
samples: what is committed is what is on disk, and a commit that lags holds nothing in memory
(the segments wait on disk and the next commit takes them all), so a slow disk never delays a
sample nor drops one. ``collect --out`` commits in a short-lived child process
(:class:`counters.committer.ChildCommitWriter`), so this process never imports xarray; an
in-process :class:`counters.store.StoreWriter` works the same. Samples the disk refuses stay in
memory, at most ``2 x flush_every`` of them (the oldest dropped past that, counted), and are
journalled once it takes them again.

Stopping: :meth:`Collector.run` returns when ``stop`` is set -- :func:`install_signal_handlers`
sets it on SIGTERM and SIGINT (and gives back a function that restores the handlers before it)
-- then flushes, so every sample taken before the signal is on disk.
"""

from __future__ import annotations

import datetime
import logging
import math
import resource
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING

import numpy as np

from collectors.base import CollectorError, Devices, Discovery, Source, Values
from collectors.buffer import SampleBuffer
from collectors.prometheus import LatestSampleCollector
from counters.catalog import CATALOG
from counters.errors import CountersError
from counters.names import whole_microseconds

if TYPE_CHECKING:
    from counters.storedir import StoreJournal

PRODUCER = "bayes-sched collectors 0.1.0"
LOG = logging.getLogger(__name__)


@dataclass
class RunStats:
    """What a run did: samples taken, flushed, skipped and dropped, and sample latencies (s).

    Latencies go to a preallocated ring of ``keep_latencies`` entries, so a long run does not grow.
    """

    samples: int = 0
    flushed: int = 0
    skipped: int = 0
    dropped: int = 0
    flush_errors: list[str] = field(default_factory=list)
    journal_errors: int = 0  # samples that could not be journalled
    #: Samples not stored because the wall clock had stepped back, stamped at or before the
    #: last stored sample: refused when taken (this process's samples, and the store's newest
    #: once a commit has told it), and left out by a commit (journalled before this process
    #: knew the store's newest sample: a restarted collector, until its first commit).
    refused_out_of_order: int = 0
    committed_out_of_order: int = 0
    last_journal_error: str = ""
    source_errors: dict[str, int] = field(default_factory=dict)  # error -> times seen
    keep_latencies: int = 10_000
    _latencies: np.ndarray = field(default_factory=lambda: np.empty(0))

    def record_latency(self, seconds: float) -> None:
        if self._latencies.size != self.keep_latencies:
            self._latencies = np.full(self.keep_latencies, np.nan)
        self._latencies[(self.samples - 1) % self.keep_latencies] = seconds

    @property
    def out_of_order(self) -> int:
        """Samples not stored because the wall clock had stepped back (both kinds)."""
        return self.refused_out_of_order + self.committed_out_of_order

    @property
    def latencies_s(self) -> np.ndarray:
        """The latest (up to ``keep_latencies``) sample latencies in seconds, unordered."""
        return self._latencies[np.isfinite(self._latencies)]


class Collector:
    """Samples ``sources`` every ``interval_s`` into a store and/or a Prometheus collector."""

    def __init__(
        self,
        sources: Sequence[Source],
        interval_s: float,
        writer: StoreJournal | None = None,
        exporter: LatestSampleCollector | None = None,
        node: str | None = None,
        flush_every: int = 60,
        keep_latencies: int = 10_000,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not math.isfinite(interval_s) or interval_s <= 0:
            raise CollectorError(f"interval must be a positive number of seconds, not {interval_s}")
        if flush_every < 1:
            raise CollectorError(f"flush_every must be at least 1 sample, not {flush_every}")
        self.sources = list(sources)
        self.interval_s = interval_s
        self.writer = writer
        self.exporter = exporter
        self.node = node or socket.gethostname()
        self.flush_every = flush_every
        #: Seconds since the epoch, what each sample is stamped with (the system's wall clock).
        self.wall_clock = wall_clock
        self.discoveries: list[Discovery] = []
        self.devices: Devices | None = None
        self.buffer: SampleBuffer | None = None
        self.stats = RunStats(keep_latencies=keep_latencies)
        #: Source name -> whether its latest read gave at least one finite value (false when
        #: it raised, or discovery found nothing it can read).
        self.sources_up: dict[str, bool] = {}
        self._attrs: dict[str, object] = {}
        # Writer thread state: the sealed journal segments (indices below this) not yet committed.
        self._commit_below: int | None = None
        self._commit_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._closing = False
        # The last stored sample's stamp as the store keeps it (whole microseconds,
        # counters.names.whole_microseconds): a later sample must be later there.
        self._last_micros: float = -math.inf
        # What the writer's commits left out before this collector journalled (an in-process
        # writer recovers a stopped run's journal on opening): not this run's samples.
        self._left_out_before = 0 if writer is None else writer.left_out
        self._stored_since_step = True  # whether one was stored since the clock last stepped back

    def discover(self) -> list[Discovery]:
        """Discover every source; fix the counters and devices the run records."""
        self.discoveries = [source.discover() for source in self.sources]
        node_counters: list[str] = []
        device_counters: list[str] = []
        for found in self.discoveries:
            if found.devices is not None and found.counters and self.devices is None:
                self.devices = found.devices
            for name in found.counters:
                counter = CATALOG.get(name)
                if counter is None or name in node_counters or name in device_counters:
                    continue
                (device_counters if counter.per_device else node_counters).append(name)
        if device_counters and self.devices is None:
            raise CollectorError("per-device counters discovered without a device list")
        unavailable = [f"{name}: {why}" for found in self.discoveries
                       for name, why in found.unavailable.items()]
        self._attrs = {
            "producer": PRODUCER,
            "interval_s": float(self.interval_s),
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "sources": ", ".join(f.source for f in self.discoveries),
            "unavailable": "\n".join(unavailable),
        }
        self.buffer = SampleBuffer(self.node, node_counters, device_counters, self.devices,
                                   capacity=2 * self.flush_every, attrs=self._attrs)
        if self.writer is not None:
            self.writer.journal_layout = self.buffer.layout
            self.writer.max_unwritten = self.buffer.capacity
        return self.discoveries

    @property
    def counters(self) -> list[str]:
        assert self.buffer is not None
        return [*self.buffer.node_counters, *self.buffer.device_counters]

    def sample_once(self) -> Values:
        """Read every source once, buffer the sample, update the exporter; returns the values."""
        if self.buffer is None:
            self.discover()
        assert self.buffer is not None
        started = time.perf_counter()
        stamp = self.wall_clock()
        values: Values = {}
        for position, source in enumerate(self.sources):
            try:
                read = source.sample()
            except Exception as error:  # one source failing must not stop the others
                key = f"{source.name}: {type(error).__name__}: {error}"
                self.stats.source_errors[key] = self.stats.source_errors.get(key, 0) + 1
                read = {}
            values.update(read)
            self.sources_up[source.name] = (bool(self.discoveries[position].counters)
                                            and any_finite(read))
        micros = float(whole_microseconds(stamp))
        last = self._last_stored_micros()
        if micros > last:
            self._store(stamp, micros, values)
        else:  # the wall clock stepped back: not after the last stored sample
            if self._stored_since_step:  # once per step
                LOG.warning("the wall clock stepped back %.3f s; samples are not stored until "
                            "it passes the last stored sample's time again",
                            (last - micros) / 1e6)
            self.stats.refused_out_of_order += 1
            self._stored_since_step = False
        latency = time.perf_counter() - started
        self.stats.samples += 1
        self.stats.record_latency(latency)
        if self.exporter is not None:
            self.exporter.update(values, self._health(latency), self.sources_up)
        if self.buffer.size >= self.flush_every:
            self.flush()
        return values

    def _last_stored_micros(self) -> float:
        """The newest sample stored or to be stored, in whole microseconds since the epoch: this
        process's last, or the store's newest where the writer knows it to be later (a restarted
        collector's store holds samples of its earlier run)."""
        known = None if self.writer is None else self.writer.stored_until_us
        return self._last_micros if known is None else max(self._last_micros, float(known))

    def _store(self, stamp: float, micros: float, values: Values) -> None:
        """Buffer the sample stamped ``stamp`` (``micros``: as the store keeps it) and journal
        it (one the disk refuses stays in memory)."""
        assert self.buffer is not None
        row = self.buffer.add(stamp, values)
        self._last_micros = micros
        self._stored_since_step = True
        if self.writer is not None:
            try:
                self.writer.log(row)
            except CountersError as error:  # the disk refuses: the sample stays in memory
                self.stats.journal_errors += 1
                self.stats.last_journal_error = str(error)

    def _health(self, latency: float) -> dict[str, float]:
        return {
            "samples_total": float(self.stats.samples),
            "skipped_samples_total": float(self.stats.skipped),
            "dropped_samples_total": float(self.stats.dropped),
            "out_of_order_samples_total": float(self.stats.out_of_order),
            "sample_duration_seconds": latency,
            "resident_memory_bytes": resident_bytes(),
        }

    def flush(self, wait: bool = False) -> None:
        """Seal the journal and have the writer thread commit what is sealed (so sampling never
        waits on the disk).

        With ``wait`` it also waits until everything sealed is committed (or failed).
        """
        if self.buffer is None:
            return
        self.buffer.clear()
        if self.writer is not None:
            below = self.writer.seal()
            with self._commit_lock:
                self._commit_below = max(below, self._commit_below or 0)
            self._start_writer()
            self._wake.set()
        self.stats.dropped = self._dropped()
        if wait:
            if self._thread is not None:
                self._closing = True
                self._wake.set()
                self._thread.join()
                self._thread = None
                self._closing = False
            if self._commit_below is not None:  # the last commit failed: try once more, here
                self._commit_pending()

    def _dropped(self) -> int:
        return (self.buffer.dropped if self.buffer else 0) + (self.writer.dropped if self.writer
                                                                else 0)

    def _start_writer(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._writer_loop, name="counters-writer",
                                            daemon=True)
            self._thread.start()

    def _writer_loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._commit_below is not None:
                self._commit_pending()
            if self._closing:
                return

    def _commit_pending(self) -> None:
        below = self._commit_below
        assert below is not None and self.writer is not None
        try:
            self.stats.flushed += self.writer.commit(below)
        except (OSError, CountersError) as error:
            # The segments stay on disk; the next flush (or the last, on stopping) tries again.
            self.stats.flush_errors.append(str(error))
            return
        finally:  # a commit that failed part-way may have left samples out already
            left_out = self.writer.left_out - self._left_out_before
            if left_out > self.stats.committed_out_of_order:
                LOG.warning("a commit left out %d sample(s) journalled at or before the store's "
                            "newest sample (the wall clock had stepped back before this "
                            "collector started); later ones are not stored until it passes it",
                            left_out - self.stats.committed_out_of_order)
            self.stats.committed_out_of_order = left_out
        with self._commit_lock:
            if self._commit_below == below:
                self._commit_below = None

    def run(self, stop: threading.Event, duration_s: float | None = None,
            max_samples: int | None = None) -> RunStats:
        """Sample until ``stop`` is set, ``duration_s`` passes or ``max_samples`` are taken."""
        if self.buffer is None:
            self.discover()
        start = time.monotonic()
        k = 0  # the instant the next sample is for: due at start + k * interval
        try:
            while not stop.is_set():
                # A wake that comes late (a busy machine, a stalled thread) by a whole interval
                # or more has missed instants: count them before the sample (so a run's last
                # sample is counted too, and the exporter serves it with this sample) and take
                # this one for the instant whose interval it starts in.
                now_at = math.floor((time.monotonic() - start) / self.interval_s)
                self.stats.skipped += max(0, now_at - k)
                k = max(k, now_at)
                self.sample_once()
                if max_samples is not None and self.stats.samples >= max_samples:
                    break
                if any(getattr(s, "exhausted", False) for s in self.sources):
                    break
                now = time.monotonic()
                due = math.floor((now - start) / self.interval_s) + 1
                self.stats.skipped += max(0, due - k - 1)
                k = due
                deadline = start + k * self.interval_s
                if duration_s is not None and deadline - start > duration_s + 1e-9:
                    break
                stop.wait(max(0.0, deadline - time.monotonic()))
        finally:
            self.flush(wait=True)
            self.stats.dropped = self._dropped()
        return self.stats

    def close(self) -> None:
        for source in self.sources:
            source.close()
        if self.writer is not None:
            self.writer.close()


def install_signal_handlers(stop: threading.Event) -> Callable[[], None]:
    """Set ``stop`` on SIGTERM and SIGINT (main thread only), so the loop ends with a flush.

    Returns a function that puts back the handlers these replaced: a caller that runs the
    collector in-process (a test, an embedding program) calls it when collection ends, or a
    later Ctrl-C would only set this stale ``stop``. A handler not set from Python
    (:func:`signal.getsignal` gives ``None``) is left as these set it."""

    def handler(signum: int, frame: FrameType | None) -> None:
        # Not ``stop.set()`` here: the handler runs on the main thread between bytecodes, and if
        # that thread is inside ``stop.wait()`` holding the event's (non-reentrant) lock, setting
        # it from the handler deadlocks. A short-lived thread takes the lock once it is free.
        threading.Thread(target=stop.set, name="stop-signal", daemon=True).start()

    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    for signum in previous:
        signal.signal(signum, handler)

    def restore() -> None:
        for signum, before in previous.items():
            if before is not None:
                signal.signal(signum, before)

    return restore


def any_finite(values: Values) -> bool:
    """Whether one sample of a source holds at least one finite reading."""
    return any(bool(np.isfinite(value).any()) for value in values.values())


def resident_bytes() -> float:
    """Current resident set size of this process (bytes), from /proc/self/statm."""
    try:
        with open("/proc/self/statm") as handle:
            return float(handle.read().split()[1]) * resource.getpagesize()
    except OSError:
        return float("nan")
