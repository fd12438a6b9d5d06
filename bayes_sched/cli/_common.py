"""Shared pieces of the command line: user-facing errors, tables, JSON output and progress bars."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from bayes_sched.cli.options import OptionError
from bayes_sched.contention.topology import TopologyError
from bayes_sched.errors import InputError as SchedInputError
from bayes_sched.interference.tables import InterferenceInputError
from collectors.base import CollectorError
from counters.errors import CountersError
from perfmodel.errors import InputError as PerfmodelInputError

#: Exceptions that mean "the user's input is wrong": printed as one line, exit status 2.
USER_ERRORS: tuple[type[BaseException], ...] = (PerfmodelInputError,)
USER_ERRORS += (CountersError, CollectorError)
USER_ERRORS += (SchedInputError,)
USER_ERRORS += (InterferenceInputError, TopologyError)
USER_ERRORS += (OptionError,)

T = TypeVar("T")

stderr = Console(stderr=True)


def fail(message: str, status: int = 2) -> int:
    """Print ``bayes-sched: error: MESSAGE`` on one line to stderr and return ``status``."""
    print(f"bayes-sched: error: {' '.join(message.split())}", file=sys.stderr)
    return status


def print_table(
    rows: Sequence[Mapping[str, Any]],
    title: str | None = None,
    as_json: bool = False,
    float_format: str = "{:.4g}",
) -> None:
    """Print ``rows`` (dicts sharing keys) as a table on stdout, or as a JSON list."""
    if as_json:
        json.dump(list(rows), sys.stdout, indent=2, default=float)
        sys.stdout.write("\n")
        return
    table = Table(title=title)
    columns = list(rows[0].keys()) if rows else []
    for column in columns:
        table.add_column(column, justify="left" if column in ("model", "name") else "right")
    for row in rows:
        table.add_row(*(_format(row[c], float_format) for c in columns))
    Console(width=200).print(table)


def _format(value: Any, float_format: str) -> str:
    if isinstance(value, float):
        return float_format.format(value)
    return str(value)


@contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Progress]:
    """A rich progress bar on stderr; disabled (still usable) when not wanted or not a terminal."""
    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=stderr,
        disable=not enabled,
        transient=False,
    )
    with progress:
        yield progress


def track(items: Iterable[T], description: str, total: int | None = None,
          enabled: bool = True) -> Iterator[T]:
    """Iterate over ``items`` with a progress bar."""
    with progress_bar(enabled) as progress:
        yield from progress.track(items, description=description, total=total)
