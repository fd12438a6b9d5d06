"""Validation of command-line options, done by the parser before any work starts.

argparse ``type=`` callables check one value each (finite numbers in range, integer bounds, seeds,
paths that must be files); :func:`check_out_dir` and :func:`check_out_file` check where a command
will write, also before any work. Every failure is one line naming the flag and what was expected,
exit status 2 (see :class:`OptionParser`).

The rule for an existing output folder (``--out`` of report, demo, simulate, compare and infer
contention): it is written into, files of the same names are replaced and other files are left
alone, so a report can be refreshed in place (``scripts/demo.sh`` reruns ``demo --out report``).
An ``--out`` that is an existing file, lies under a file, or cannot be written is refused up front.
An output *file* (``infer topology --out``, ``counters export OUT``, ``counters align --out``) is
never overwritten unless the command offers ``--force`` and it is given.

Only the standard library here: the command line's start-up must stay light.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

#: The rule for an existing report folder, for ``--out``'s help.
OUT_DIR_RULE = ("an existing folder is written into (files of the same names replaced); a file "
                "or an unwritable place is refused before any work")

#: Seeds are handed to numpy, torch and Pyro; numpy's legacy seeding takes 32-bit values.
MAX_SEED = 2**32 - 1


class OptionError(ValueError):
    """An option's value (or a combination of options) is not what the command expects."""


class OptionParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (no usage block), exit status 2."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        sys.stderr.write(f"{self.prog}: error: {text} (see '{self.prog} --help')\n")
        sys.exit(2)


def _named(function: Callable[[str], object], name: str) -> Callable[[str], object]:
    function.__name__ = name  # argparse names the type in its fallback messages
    return function


def _bound_text(minimum: float | None, maximum: float | None, min_open: bool,
                max_open: bool) -> str:
    parts = []
    if minimum is not None:
        parts.append(f"{'>' if min_open else '>='} {minimum:g}")
    if maximum is not None:
        parts.append(f"{'<' if max_open else '<='} {maximum:g}")
    return " and ".join(parts)


def finite_float(minimum: float | None = None, maximum: float | None = None, *,
                 min_open: bool = False, max_open: bool = False,
                 unit: str = "") -> Callable[[str], float]:
    """A ``type=`` for a finite float in ``[minimum, maximum]`` (``min_open``/``max_open``:
    exclusive bounds). NaN and infinities are refused."""
    bounds = _bound_text(minimum, maximum, min_open, max_open)
    expected = f"a finite number{' of ' + unit if unit else ''}{' ' + bounds if bounds else ''}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number: expected {expected}"
                                             ) from None
        if not _within(value, minimum, maximum, min_open, max_open):
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}")
        return value

    return _named(parse, "finite_float")  # type: ignore[return-value]


def _within(value: float, minimum: float | None, maximum: float | None, min_open: bool,
            max_open: bool) -> bool:
    """Whether ``value`` is finite and within the bounds (``None``: unbounded on that side;
    ``min_open``/``max_open``: exclusive)."""
    too_low = minimum is not None and (value <= minimum if min_open else value < minimum)
    too_high = maximum is not None and (value >= maximum if max_open else value > maximum)
    return math.isfinite(value) and not too_low and not too_high


#: The one syntax of every time flag, said once in each flag's help.
DURATION_SYNTAX = "seconds, or with a unit: 500ms, 30s, 5m, 1h"
#: The ``epilog`` of a command with time flags (their metavar is ``DURATION``).
DURATION_EPILOG = f"DURATION: {DURATION_SYNTAX}."
#: One day in seconds: the upper bound of most time flags.
DAY = 86_400.0
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_SCALE = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration(minimum: float | None = 0.0, maximum: float | None = None, *,
             min_open: bool = False, max_open: bool = False) -> Callable[[str], float]:
    """A ``type=`` for a time flag: plain seconds (``30``, ``0.5``) or a number with a unit
    (``500ms``, ``30s``, ``5m``, ``1h``) -> seconds as a float in ``[minimum, maximum]``
    (``min_open``/``max_open``: exclusive bounds). Signs, NaN and infinities are refused."""
    bounds = _bound_text(minimum, maximum, min_open, max_open)
    expected = f"a duration ({DURATION_SYNTAX}){' ' + bounds + ' s' if bounds else ''}"

    def parse(text: str) -> float:
        match = _DURATION.match(text)
        if not match:
            raise argparse.ArgumentTypeError(f"{text!r} is not {expected}")
        value = float(match.group(1)) * _DURATION_SCALE[match.group(2)]
        if not _within(value, minimum, maximum, min_open, max_open):
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}")
        return value

    return _named(parse, "duration")  # type: ignore[return-value]


def int_in_range(minimum: int | None = None, maximum: int | None = None,
                 what: str = "an integer") -> Callable[[str], int]:
    """A ``type=`` for a whole number in ``[minimum, maximum]`` (written as digits: no
    ``1.5``, ``1e3`` or ``nan``)."""
    bounds = _bound_text(minimum, maximum, False, False)
    expected = f"{what}{' ' + bounds if bounds and what == 'an integer' else ''}"

    def parse(text: str) -> int:
        stripped = text.strip()
        digits = stripped[1:] if stripped[:1] in "+-" else stripped
        if not digits.isdigit() or len(digits) > 30:
            raise argparse.ArgumentTypeError(f"{text!r} is not {expected}")
        value = int(stripped)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}")
        return value

    return _named(parse, "int")  # type: ignore[return-value]


#: ``type=`` for counts that must be at least one (steps, nodes, samples, jobs, processes).
positive_int = int_in_range(1)
#: ``type=`` for a random seed: an integer in [0, 2^32 - 1].
seed = int_in_range(0, MAX_SEED, what=f"a seed: an integer in [0, {MAX_SEED}]")


def existing_file(text: str) -> Path:
    """``type=`` for an input that must be an existing regular file (not a folder)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a folder; expected a file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return path


def existing_path(text: str) -> Path:
    """``type=`` for an input file or folder that must exist."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file or folder")
    return path


def _nearest_existing(path: Path) -> Path:
    current = path.absolute()
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def _check_writable_parent(path: Path, flag: str, what: str) -> None:
    ancestor = _nearest_existing(path)
    if not ancestor.is_dir():
        raise OptionError(f"{flag} {path}: {ancestor} is not a folder; expected {what}")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OptionError(f"{flag} {path}: {ancestor} is not writable; expected {what}")


def check_out_dir(path: str | Path, flag: str = "--out",
                  what: str = "a folder to write the report in") -> Path:
    """Check, before any work, that a report folder can be written at ``path``; returns it.

    A new folder (its nearest existing parent must be a writable folder) or an existing writable
    folder, which is written into (see the module's rule). Nothing is created here.

    Raises:
        OptionError: naming the flag, when ``path`` is a file, lies under a file or is not
            writable.
    """
    out = Path(path)
    if str(path) == "":
        raise OptionError(f"{flag} is empty; expected {what}")
    if out.exists():
        if not out.is_dir():
            raise OptionError(f"{flag} {out}: is a file; expected {what}")
        if not os.access(out, os.W_OK | os.X_OK):
            raise OptionError(f"{flag} {out}: folder is not writable; expected {what}")
        return out
    _check_writable_parent(out, flag, what)
    return out


def check_new_dir(path: str | Path, flag: str) -> Path:
    """Like :func:`check_out_dir`, but the folder must not exist yet (outputs never merged)."""
    out = Path(path)
    if out.exists():
        raise OptionError(f"{flag} {out}: already exists; expected a new folder")
    return check_out_dir(out, flag)


def check_out_file(path: str | Path, flag: str = "--out", overwrite: bool = False,
                   force_flag: str | None = None) -> Path:
    """Check that an output file can be written at ``path``: a new file, or with ``overwrite``
    an existing file that may be replaced (never a folder). ``force_flag`` is the option that
    allows replacing, named in the refusal."""
    out = Path(path)
    if str(path) == "":
        raise OptionError(f"{flag} is empty; expected a file name")
    if out.is_dir():
        raise OptionError(f"{flag} {out}: is a folder; expected a file name (a new file"
                          f"{', or an existing file to replace' if force_flag else ''})")
    if out.exists() and not overwrite:
        hint = f" (give {force_flag} to replace it)" if force_flag else ""
        raise OptionError(f"{flag} {out}: a file already exists; expected a new file{hint}")
    if out.exists():  # replaced through a temporary file beside it: the folder must be writable
        if not os.access(out.absolute().parent, os.W_OK | os.X_OK):
            raise OptionError(f"{flag} {out}: its folder is not writable; expected a file to "
                              "replace")
        return out
    _check_writable_parent(out, flag, "a new file")
    return out


#: Where saved fits live unless ``--cache-dir`` says otherwise (see perfmodel.saved_fits).
CACHE_DIR_HELP = ("folder of saved fits (default: $BAYES_SCHED_CACHE, else "
                  "$XDG_CACHE_HOME/bayes-sched/fits, i.e. ~/.cache/bayes-sched/fits)")


def add_cache_options(parser: argparse.ArgumentParser) -> None:
    """``--refit`` and ``--cache-dir``: a command that fits reuses a saved fit of the same data,
    settings and package version unless told to refit."""
    parser.add_argument("--refit", action="store_true",
                        help="fit again even where a saved fit of the same data, settings and "
                        "version exists (the new fit replaces it)")
    parser.add_argument("--cache-dir", type=Path, default=None, help=CACHE_DIR_HELP)


def check_cache_dir(args: argparse.Namespace) -> None:
    """Refuse a ``--cache-dir`` that is a file or unwritable, before any work."""
    if args.cache_dir is not None:
        check_out_dir(args.cache_dir, "--cache-dir", "a folder to keep saved fits in")
