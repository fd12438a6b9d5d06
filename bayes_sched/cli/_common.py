"""Shared pieces of the command line: user-facing errors, progress bars and the fit cache (result
tables and JSON output: :mod:`bayes_sched.tables`)."""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    import argparse

    from rich.console import Console
    from rich.progress import Progress, TaskID

    from perfmodel.saved_fits import FitCache

#: Exceptions that mean "the user's input is wrong", printed as one line with exit status 2, as
#: (module, class) names: the CLI imports a module only for the command that needs it, and an
#: error can only be an instance of a class whose module was imported (:func:`is_user_error`).
USER_ERRORS: tuple[tuple[str, str], ...] = (
    ("perfmodel.errors", "InputError"),
    ("perfmodel.errors", "FitError"),
    ("counters.errors", "CountersError"),
    ("collectors.base", "CollectorError"),
    ("bayes_sched.errors", "InputError"),
    ("bayes_sched.interference.tables", "InterferenceInputError"),
    ("bayes_sched.topology", "TopologyError"),
    ("bayes_sched.cli.options", "OptionError"),
)


def is_user_error(error: BaseException) -> bool:
    """Whether ``error`` is one of :data:`USER_ERRORS` (checking only modules already imported)."""
    for module, name in USER_ERRORS:
        loaded = sys.modules.get(module)
        kind = getattr(loaded, name, None) if loaded is not None else None
        if isinstance(kind, type) and isinstance(error, kind):
            return True
    return False


T = TypeVar("T")



@functools.cache
def stderr_console() -> Console:
    """A rich console on stderr, made (and rich imported) on first use."""
    from rich.console import Console

    return Console(stderr=True)


def __getattr__(name: str) -> Console:
    # ``from bayes_sched.cli._common import stderr`` still works, without importing rich early.
    if name == "stderr":
        return stderr_console()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    stderr: Console


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """Within the block, the library's :class:`~perfmodel.errors.UnreliableFitWarning` shows as
    one line, ``bayes-sched: warning: MESSAGE``, on stderr (not Python's file:line format); other
    warnings as Python shows them."""
    from perfmodel.errors import UnreliableFitWarning

    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: Any = None, line: str | None = None) -> None:
            if issubclass(category, UnreliableFitWarning):
                print(f"bayes-sched: warning: {' '.join(str(message).split())}", file=sys.stderr)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def fail(message: str, status: int = 2) -> int:
    """Print ``bayes-sched: error: MESSAGE`` on one line to stderr and return ``status``."""
    print(f"bayes-sched: error: {' '.join(message.split())}", file=sys.stderr)
    return status


class QuietProgress:
    """A disabled progress bar: takes the calls a rich ``Progress`` takes and shows nothing, as a
    disabled rich one does, without importing rich (a tenth of a second of start-up)."""

    def add_task(self, *args: Any, **kwargs: Any) -> TaskID:
        return cast("TaskID", 0)

    def update(self, *args: Any, **kwargs: Any) -> None:
        return None

    def advance(self, *args: Any, **kwargs: Any) -> None:
        return None

    def track(self, sequence: Iterable[T], *args: Any, **kwargs: Any) -> Iterable[T]:
        return sequence


@contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Progress | QuietProgress]:
    """A rich progress bar on stderr; disabled (still usable) when not wanted or not a terminal."""
    if not enabled:
        yield QuietProgress()
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=stderr_console(),
        transient=False,
    )
    with progress:
        yield progress


def track(items: Iterable[T], description: str, total: int | None = None,
          enabled: bool = True) -> Iterator[T]:
    """Iterate over ``items`` with a progress bar."""
    with progress_bar(enabled) as progress:
        yield from progress.track(items, description=description, total=total)


def fit_cache(args: argparse.Namespace) -> FitCache:
    """The saved-fit folder of a command with :func:`~bayes_sched.cli.options.add_cache_options`."""
    from perfmodel.saved_fits import FitCache, default_cache_dir

    return FitCache(args.cache_dir or default_cache_dir(), refit=args.refit)
