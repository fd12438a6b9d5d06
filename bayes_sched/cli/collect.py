"""``bayes-sched collect`` (the node collector daemon) and ``bayes-sched counters`` (stores).

    bayes-sched collect --interval 1s --out STORE [--prometheus PORT] [--duration 10m]
    bayes-sched counters catalog [--source nvml] [--json]
    bayes-sched counters info STORE [--json]
    bayes-sched counters validate STORE [--json]
    bayes-sched counters align STORE... --interval 1s --out MERGED.nc [--clock-offset NODE=S]
                                [--force]
    bayes-sched counters export STORE OUT.nc [--force]
    bayes-sched counters repair STORE
"""

from __future__ import annotations

import argparse
import math
import os
import re
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayes_sched.cli.options import DURATION_EPILOG, duration
from collectors import DEFAULT_PROMETHEUS_PORT
from collectors.sources import BUILTIN
from counters.catalog import RESOURCES, SOURCES

# Heavy modules (numpy, xarray, the collector sources) are imported inside the functions that use
# them, so ``--help`` is instant; the collector never loads xarray or pandas (with ``--out`` its
# commits run in a child process, :mod:`counters.committer`).
if TYPE_CHECKING:
    from collections.abc import Callable

    from collectors.base import Source
    from collectors.daemon import Collector
    from collectors.prometheus import LatestSampleCollector, PrometheusEndpoint

MAX_FLUSH_SAMPLES = 3600
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)i?[bB]?\s*$")


#: ``type=`` for collect's and align's time flags: any positive duration.
parse_duration = duration(0.0, min_open=True)


def parse_size(text: str) -> int:
    """``"256M"``, ``"1G"``, ``"512k"`` or plain bytes -> bytes (binary multiples)."""
    match = _SIZE.match(text)
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size like 256M or 1G, not {text!r}")
    power = " KMGT".index(match.group(2).upper() or " ")
    return int(float(match.group(1)) * 1024**power)


def register(subparsers: argparse._SubParsersAction) -> None:
    collect = subparsers.add_parser(
        "collect", help="sample node counters into a store and/or a Prometheus endpoint",
        description="Sample NVML, PCIe (sysfs), perf and procfs counters on this node at a fixed "
                    "interval. SIGTERM or SIGINT stops it after writing every sample taken.",
        epilog=DURATION_EPILOG)
    collect.add_argument("--interval", type=parse_duration, default=1.0, metavar="DURATION",
                         help="sampling interval (default 1s)")
    collect.add_argument("--out", type=Path, help="counters store directory to append to")
    collect.add_argument("--prometheus", type=int, metavar="PORT", nargs="?",
                         const=DEFAULT_PROMETHEUS_PORT,
                         help="serve the latest sample for Prometheus on this port (without a "
                              f"value: {DEFAULT_PROMETHEUS_PORT}; 0: any free port)")
    collect.add_argument("--bind", default="127.0.0.1",
                         help="address the Prometheus endpoint listens on (default 127.0.0.1)")
    collect.add_argument("--sources",
                         help=f"comma-separated sources (default {','.join(BUILTIN)}; plugins "
                              "of the entry-point group bayes_sched.collector_sources too); "
                              "not with --replay")
    collect.add_argument("--replay", type=Path, metavar="STORE",
                         help="replay a recorded store (all its counters) instead of reading "
                              "this node")
    collect.add_argument("--duration", type=parse_duration, metavar="DURATION",
                         help="stop after this long")
    collect.add_argument("--samples", type=int, help="stop after this many samples")
    collect.add_argument("--flush-every", type=parse_duration, default=300.0, metavar="DURATION",
                         help="commit buffered samples as a store part this often (default 5m; "
                              f"at most every {MAX_FLUSH_SAMPLES} samples); every sample is "
                              "journalled to disk as it is taken whatever this is")
    collect.add_argument("--max-part-size", type=parse_size, default=parse_size("256M"),
                         help="merge small store parts only up to this size (default 256M)")
    collect.add_argument("--max-parts", type=int,
                         help="keep at most this many parts, deleting the oldest (default: all)")
    collect.add_argument("--pid", type=int, action="append", default=[],
                         help="count perf events for this process (repeatable; default: all)")
    collect.add_argument("--node", help="node name recorded in the store (default: host name)")
    collect.add_argument("--nvml-library", help="path of libnvidia-ml.so to load")
    collect.add_argument("--quiet", action="store_true", help="do not print what was discovered")
    collect.set_defaults(handler=run_collect)

    counters = subparsers.add_parser("counters", help="inspect, validate and export counters")
    sub = counters.add_subparsers(dest="counters_command", metavar="ACTION", required=True)
    catalog = sub.add_parser("catalog", help="list every counter the toolkit knows and every "
                                             "series the collector exports")
    catalog.add_argument("--source", choices=(*SOURCES, "collector"))
    catalog.add_argument("--resource", choices=RESOURCES)
    catalog.add_argument("--json", action="store_true")
    catalog.set_defaults(handler=run_catalog)
    info = sub.add_parser("info", help="summarise a counters store")
    info.add_argument("store", type=Path)
    info.add_argument("--json", action="store_true")
    info.set_defaults(handler=run_info)
    validate = sub.add_parser("validate", help="check a store against the counters schema")
    validate.add_argument("store", type=Path)
    validate.add_argument("--allow-resets", action="store_true",
                          help="do not reject counters that go backwards")
    validate.add_argument("--json", action="store_true")
    validate.set_defaults(handler=run_validate)
    merge = sub.add_parser("align", help="put several nodes' stores on one time grid (netCDF)",
                           epilog=DURATION_EPILOG)
    merge.add_argument("stores", type=Path, nargs="+", metavar="STORE")
    merge.add_argument("--interval", type=parse_duration, required=True, metavar="DURATION",
                       help="grid step")
    merge.add_argument("--clock-offset", action="append", default=[], metavar="NODE=SECONDS",
                       help="a node's clock minus the reference clock (repeatable)")
    merge.add_argument("--out", type=Path, required=True,
                       help="netCDF file to write (a new file unless --force)")
    merge.add_argument("--force", action="store_true", help="replace --out if it exists")
    merge.add_argument("--json", action="store_true")
    merge.set_defaults(handler=run_align)
    export = sub.add_parser("export", help="write a store to one netCDF file")
    export.add_argument("store", type=Path)
    export.add_argument("out", type=Path, help="netCDF file to write (a new file unless --force)")
    export.add_argument("--force", action="store_true", help="replace OUT if it exists")
    export.set_defaults(handler=run_export)
    fix = sub.add_parser("repair", help="bring a damaged store back to its last consistent point",
                         description="Remove what a crash or outside damage left in a store "
                                     "and report, one line each, what was dropped.")
    fix.add_argument("store", type=Path)
    fix.set_defaults(handler=run_repair)


#: What counters stores import (the ``store`` extra): a collector serving Prometheus only needs
#: none of them.
STORE_MODULES = ("xarray", "pandas", "zarr", "dask", "h5netcdf", "h5py")


def require_store(what: str) -> None:
    """Refuse, in one line, ``what`` (a flag or command that reads or writes a counters store)
    when the ``store`` extra is not installed, before any work."""
    import importlib.util

    from collectors.base import CollectorError

    missing = [name for name in STORE_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise CollectorError(f"{what} reads or writes a counters store, which needs the store "
                             f"extra: pip install \"bayes-sched[collector,store]\" (not installed: "
                             f"{', '.join(missing)})")


def requested_sources(text: str | None) -> list[str]:
    """The sources ``--sources`` names (default: the built-ins), each known
    (:func:`collectors.sources.source_names`)."""
    from collectors.base import CollectorError
    from collectors.sources import BUILTIN, source_names

    if text is None:
        return list(BUILTIN)
    known = source_names()
    wanted = [s.strip() for s in text.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(known))
    if unknown or not wanted:
        raise CollectorError(f"--sources: unknown source(s) {', '.join(unknown) or '(none)'}; "
                             f"expected some of {', '.join(known)}")
    return wanted


def build_sources(args: argparse.Namespace) -> list[Source]:
    """The sources named by ``--sources`` (or the replay source), in the registry's order (NVML
    first for device order; :mod:`collectors.sources`)."""
    from collectors.sources import make_source, source_names

    if args.replay is not None:
        from collectors.replay import ReplaySource

        return [ReplaySource(args.replay)]
    wanted = set(requested_sources(args.sources))
    sources: list[Source] = []
    context: dict[str, Any] = {"library": args.nvml_library, "pids": args.pid, "nvml": None}
    for name in source_names():
        if name in wanted:
            source = make_source(name, context)
            if name == "nvml":
                context["nvml"] = source  # PCIe reads the NVML devices' bus ids
            sources.append(source)
    return sources


def check_collect_options(args: argparse.Namespace) -> None:
    """Every ``collect`` option that can be checked before any work: one-line errors."""
    from collectors.base import CollectorError

    if args.out is None and args.prometheus is None:
        raise CollectorError("nothing to do: give --out STORE and/or --prometheus PORT")
    if args.prometheus is not None and not 0 <= args.prometheus <= 65535:
        raise CollectorError(f"--prometheus: port {args.prometheus} is out of range; expected "
                             "0 (any free port) to 65535")
    if args.prometheus is not None:
        check_bind_address(args.bind)
    if args.out is not None or args.replay is not None:
        require_store("--out" if args.out is not None else "--replay")
    if args.samples is not None and args.samples < 1:
        raise CollectorError(f"--samples: expected at least 1 sample, not {args.samples}")
    if args.max_parts is not None and args.max_parts < 1:
        raise CollectorError(f"--max-parts: expected at least 1 part to keep, not "
                             f"{args.max_parts}")
    if args.replay is not None:
        if args.sources is not None:
            raise CollectorError("--sources: cannot be combined with --replay, which replays "
                                 "every counter the recorded store holds")
        if args.out is not None and args.out.resolve() == args.replay.resolve():
            raise CollectorError(f"--out: {args.out} is the store --replay reads; give another "
                                 "store")
    requested_sources(args.sources)  # bad names fail before anything is created
    for pid in args.pid:
        if not process_exists(pid):
            raise CollectorError(f"--pid: no process {pid} on this node")


_DOTTED = re.compile(r"^[0-9.]+$")


def check_bind_address(text: str) -> None:
    """Refuse a ``--bind`` value that is not an IP address or a resolvable host name, before the
    store is touched or sampling starts. Dotted numbers must be an IPv4 address (``999.1.1.1``
    is not one, and is not looked up as a host name)."""
    import ipaddress

    from collectors.base import CollectorError

    expected = "expected an IP address of this host (127.0.0.1, 0.0.0.0, ::) or its host name"
    try:
        ipaddress.ip_address(text)
        return
    except ValueError:
        pass
    if not text.strip() or _DOTTED.match(text):
        raise CollectorError(f"--bind {text!r}: not an IP address; {expected}")
    try:
        socket.getaddrinfo(text, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        raise CollectorError(f"--bind {text!r}: cannot resolve ({error}); {expected}") from None


def process_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists (signal 0: checks without sending anything)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    except OverflowError:
        return False
    return True


def run_collect(args: argparse.Namespace) -> int:
    import numpy as np

    from collectors.daemon import Collector, install_signal_handlers
    from collectors.nvml import NvmlSource
    from collectors.prometheus import LatestSampleCollector, PrometheusEndpoint

    check_collect_options(args)
    # Past MAX_FLUSH_SAMPLES a fast collector flushes more often than asked, to bound memory.
    samples_per_flush = max(1, min(MAX_FLUSH_SAMPLES, int(round(args.flush_every / args.interval))))
    if args.replay is not None and args.node is None:
        from counters import schema
        from counters.store import open_store

        args.node = str(open_store(args.replay)[schema.NODE].values[0])
    # Bind the port before touching the store, so a busy port leaves no trace on disk.
    exporter: LatestSampleCollector | None = None
    endpoint: PrometheusEndpoint | None = None
    collector: Collector | None = None
    restore_signals: Callable[[], None] | None = None
    try:
        if args.prometheus is not None:
            exporter = LatestSampleCollector(args.node or socket.gethostname(), None)
            endpoint = PrometheusEndpoint(exporter, args.prometheus, args.bind)
        writer = None
        if args.out is not None:  # this process journals; commits run in a child (no xarray)
            from counters.committer import ChildCommitWriter

            writer = ChildCommitWriter(args.out, max_part_bytes=args.max_part_size,
                                       max_parts=args.max_parts)
        for note in writer.notes if writer is not None else []:
            print(f"bayes-sched collect: {note}", file=sys.stderr)
        noted = len(writer.notes) if writer is not None else 0
        sources = build_sources(args)
        collector = Collector(sources, args.interval, writer=writer, node=args.node,
                              flush_every=samples_per_flush)
        for found in collector.discover():
            if not args.quiet:
                for line in found.lines():
                    print(f"bayes-sched collect: {line}", file=sys.stderr)
        if exporter is not None and endpoint is not None:
            nvml = next((s for s in sources if isinstance(s, NvmlSource)), None)
            exporter.devices = collector.devices
            exporter.process_usage = nvml.process_usage if nvml else None
            collector.exporter = exporter
            print(f"bayes-sched collect: serving Prometheus metrics on "
                  f"http://{endpoint.address}:{endpoint.port}/metrics", file=sys.stderr, flush=True)
        stop = threading.Event()
        restore_signals = install_signal_handlers(stop)
        print(f"bayes-sched collect: sampling {len(collector.counters)} counters every "
              f"{args.interval:g} s" + (f" into {args.out}" if args.out else ""),
              file=sys.stderr, flush=True)
        stats = collector.run(stop, duration_s=args.duration, max_samples=args.samples)
    finally:
        try:
            if endpoint is not None:
                endpoint.close()
            if collector is not None:
                collector.close()
        finally:
            # Last: a signal during the final flush above only sets ``stop``; in-process
            # callers get their own handlers back.
            if restore_signals is not None:
                restore_signals()
    for note in writer.notes[noted:] if writer is not None else []:
        print(f"bayes-sched collect: {note}", file=sys.stderr)
    for error, times in stats.source_errors.items():
        print(f"bayes-sched collect: {error} ({times} samples; their values are NaN)",
              file=sys.stderr)
    for source in sources:
        for note in getattr(source, "lost_notes", []):
            print(f"bayes-sched collect: {source.name}: {note}", file=sys.stderr)
    latencies = np.asarray(stats.latencies_s) * 1e3
    p50 = float(np.percentile(latencies, 50)) if latencies.size else float("nan")
    print(f"bayes-sched collect: {stats.samples} samples taken, {stats.flushed} written, "
          f"{stats.skipped} skipped, {stats.dropped} dropped; sample latency p50 {p50:.2f} ms",
          file=sys.stderr)
    if stats.out_of_order:
        at_commit = (f"; {stats.committed_out_of_order} of them journalled before the first "
                     "commit told the store's newest sample, and left out by it"
                     if stats.committed_out_of_order else "")
        print(f"bayes-sched collect: {stats.out_of_order} samples not stored: the wall clock had "
              f"stepped back (stamped at or before the last stored sample{at_commit})",
              file=sys.stderr)
    if stats.journal_errors:
        print(f"bayes-sched collect: {stats.journal_errors} samples could not be journalled when "
              f"taken (held in memory until the disk took them; a crash meanwhile would have lost "
              f"them): {stats.last_journal_error}", file=sys.stderr)
    if stats.flush_errors:
        print(f"bayes-sched: error: {stats.flush_errors[-1]}", file=sys.stderr)
        return 1
    return 0


def run_catalog(args: argparse.Namespace) -> int:
    """Every stored counter, then every other series the collector exports (``stored`` false):
    together, every name a collector's ``/metrics`` may serve."""
    from bayes_sched.tables import print_table
    from counters.catalog import CATALOG, GPU_LABELS, SERIES

    rows = [
        {"name": c.name, "units": c.units, "kind": c.kind, "source": c.source,
         "resource": c.resource, "per_device": c.per_device, "stored": True,
         "prometheus": c.prometheus_name
         + ("{" + ",".join(f'{k}="{v}"' for k, v in c.prometheus_labels) + "}"
            if c.prometheus_labels and c.prometheus_name else "")}
        for c in CATALOG.values()
        if (args.source is None or c.source == args.source)
        and (args.resource is None or c.resource == args.resource)
    ]
    for series in SERIES.values():
        if (args.source is not None and series.source != args.source) or (
                args.resource is not None and series.resource != args.resource):
            continue
        own = series.labels[len(GPU_LABELS):] if series.per_device else series.labels
        rows.append({"name": series.name, "units": series.units, "kind": series.kind,
                     "source": series.source, "resource": series.resource,
                     "per_device": series.per_device, "stored": False,
                     "prometheus": series.prometheus_name
                     + ("{" + ",".join(own) + "}" if own else "")})
    print_table(rows, title="counters catalog (stored counters, then exported-only series)",
                as_json=args.json)
    return 0


def _summary(store: Path) -> dict[str, Any]:
    """The store as a whole (parts, journals, bytes, samples, span) and one row per variable, by
    name."""
    from counters import schema
    from counters.store import directory_bytes, open_store, parts, pending_journals

    ds = open_store(store, lazy=False)
    seconds = schema.time_to_seconds(ds[schema.TIME].values)
    rows = []
    for name in sorted(schema.value_names(ds)):
        valid = ds[schema.mask_name(name)]
        rows.append({"name": name, "units": ds[name].attrs.get("units", ""),
                     "kind": ds[name].attrs.get("kind", ""), "dims": " x ".join(map(str, ds[name].dims)),
                     "valid_fraction": float(valid.mean().compute()) if valid.size else 0.0})
    return {"store": str(store), "parts": len(parts(store)),
            "journals": len(pending_journals(store)), "bytes": directory_bytes(store),
            "samples": int(ds.sizes[schema.TIME]),
            "span_s": float(seconds[-1] - seconds[0]) if seconds.size else 0.0,
            "variables": rows}


def run_info(args: argparse.Namespace) -> int:
    require_store("counters info")
    from bayes_sched.tables import print_json, print_table

    summary = _summary(args.store)
    if args.json:
        print_json(summary)
        return 0
    print_table(summary["variables"], title=f"counters store {args.store}: {summary['parts']} "
                f"part(s), {summary['journals']} journal(s), {summary['bytes']} bytes, "
                f"{summary['samples']} samples over {summary['span_s']:.1f} s")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    require_store("counters validate")
    from bayes_sched.tables import print_table
    from counters import schema
    from counters.store import open_store

    ds = open_store(args.store, lazy=False)
    schema.validate(ds, where=str(args.store), check_monotonic=not args.allow_resets)
    rows = [{"store": str(args.store), "samples": ds.sizes[schema.TIME],
             "variables": len(schema.value_names(ds)), "status": "ok"}]
    print_table(rows, title="counters schema check", as_json=args.json)
    return 0


def run_repair(args: argparse.Namespace) -> int:
    """Print one line per thing :func:`counters.repair.repair` dropped, or that nothing was."""
    require_store("counters repair")
    from counters import schema
    from counters.errors import CountersError
    from counters.repair import repair
    from counters.store import open_store

    changed = repair(args.store)
    for line in changed:
        print(f"repaired: {line}")
    try:
        ds = open_store(args.store)
        held = f"{ds.sizes[schema.TIME]} samples"
    except CountersError:  # everything was damaged: nothing left to read
        held = "no samples"
    if not changed:
        print(f"{args.store}: nothing to repair ({held})")
    else:
        print(f"{args.store}: repaired, {len(changed)} change(s); the store now holds {held}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    require_store("counters export")
    from bayes_sched.cli._common import progress_bar
    from bayes_sched.cli.options import check_out_file

    check_out_file(args.out, "OUT", overwrite=args.force, force_flag="--force")
    from counters.store import export_netcdf

    with progress_bar(enabled=sys.stderr.isatty()) as bar:
        task = bar.add_task(f"exporting {args.store}", total=None)
        written = export_netcdf(args.store, args.out, progress=lambda done, total: bar.update(
            task, completed=done, total=total))
    print(f"wrote {written}", file=sys.stderr)
    return 0


def parse_offsets(items: list[str]) -> dict[str, float]:
    """``NODE=SECONDS`` items -> {node: finite seconds}; one-line errors naming the flag."""
    from collectors.base import CollectorError

    offsets: dict[str, float] = {}
    for item in items:
        node, sep, value = item.rpartition("=")
        try:
            offsets[node] = float(value)
        except ValueError:
            sep = ""
        if not sep or not node:
            raise CollectorError(f"--clock-offset: expected NODE=SECONDS, not {item!r}")
        if not math.isfinite(offsets[node]):
            raise CollectorError(f"--clock-offset: {item!r}: expected a finite number of "
                                 "seconds")
    return offsets


def run_align(args: argparse.Namespace) -> int:
    require_store("counters align")
    import numpy as np

    from bayes_sched.cli.options import check_out_file
    from bayes_sched.tables import print_table
    from collectors.base import CollectorError
    from counters import schema
    from counters.align import align
    from counters.store import open_store

    check_out_file(args.out, "--out", overwrite=args.force, force_flag="--force")
    offsets = parse_offsets(args.clock_offset)
    datasets = [open_store(store, lazy=False) for store in args.stores]
    known = [str(n) for ds in datasets for n in ds[schema.NODE].values]
    unknown = [node for node in offsets if node not in known]
    if unknown:
        raise CollectorError(f"--clock-offset: no node {unknown[0]!r} in the stores; known "
                             f"nodes: {', '.join(known)}")
    aligned = align(datasets, args.interval, clock_offset_s=offsets)
    target = args.out
    temporary = target.with_name(f".{target.name}.partial")
    try:
        aligned.to_netcdf(temporary, engine="h5netcdf",
                          encoding={schema.TIME: dict(schema.TIME_ENCODING)})
        temporary.replace(target)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise CollectorError(f"{target}: cannot write ({error.strerror or error})") from None
    rows = [{"node": str(node), "samples": int(aligned.sizes[schema.TIME]),
             "valid_fraction": float(np.mean([aligned[schema.mask_name(n)].sel(node=node).mean()
                                              for n in schema.value_names(aligned)]))}
            for node in aligned[schema.NODE].values]
    print_table(rows, title=f"aligned onto {args.interval:g} s grid -> {target}",
                as_json=args.json)
    return 0
