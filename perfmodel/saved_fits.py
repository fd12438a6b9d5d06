"""Saved fits: posteriors kept as ArviZ InferenceData on netCDF and reused while their inputs match.

A saved fit is one netCDF file per model, named ``<kind>-<name>-<key prefix>.nc`` in the cache
folder. Its ``fit_key`` attribute is a SHA-256 over the input data (every array a fit reads, with
dtype and shape), the fit settings (method, steps, draws, seed, prior, ...) and the package version:
a fit is reused only when all three match, so new measurements, other settings or an upgrade
refit. The cache folder is ``$BAYES_SCHED_CACHE`` when set, else
``$XDG_CACHE_HOME/bayes-sched/fits`` (``~/.cache/bayes-sched/fits``); delete it to drop every
saved fit.

Writing is atomic (a temporary file in the same folder, flushed, then renamed over the target), so
a reader sees a whole fit or none, also when the writer is killed. A file that cannot be read (cut
short, corrupt, another key inside) is a cache miss: one note, a refit, and the new fit replaces it.
This module imports no torch; ArviZ is imported when a fit is read or written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from perfmodel.errors import one_line

if TYPE_CHECKING:
    from arviz import InferenceData

T = TypeVar("T")
#: Environment variable naming the cache folder.
CACHE_ENV = "BAYES_SCHED_CACHE"
#: Attribute of a saved fit holding its key.
KEY_ATTR = "fit_key"
#: The distribution whose version is part of every key.
DISTRIBUTION = "bayes-sched"
#: Part of every key: raise it whenever a model or its inference changes, so that fits cached by
#: an earlier build of the same version are refitted (2: the SVI guide starts at the posterior
#: mode with a spline per marginal, and the step-time model has compute-time shifts; 3: the
#: guide's base is Student-t and its spline twice as wide; 4: the guide is adapted as an
#: importance proposal and its draws resampled by PSIS weights; 5: fits record their convergence
#: verdict, perfmodel.convergence).
FIT_REVISION = 5


def package_version() -> str:
    """The installed bayes-sched version (``"unknown"`` for a source tree never installed)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def fit_key(kind: str, data: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    """SHA-256 hex digest identifying a fit: ``kind``, every input array in ``data`` (name, dtype,
    shape and bytes; object arrays by their text), the JSON of ``settings``, the package version
    and :data:`FIT_REVISION`."""
    digest = hashlib.sha256()

    def add(text: str) -> None:
        digest.update(text.encode())
        digest.update(b"\0")

    add(kind)
    for name in sorted(data):
        array = np.asarray(data[name])
        add(f"{name}:{array.dtype.str}:{array.shape}")
        if array.dtype.kind == "O" or array.dtype.kind == "U":
            add("\x1f".join(map(str, array.reshape(-1))))
        else:
            digest.update(np.ascontiguousarray(array).tobytes())
    add(json.dumps(settings, sort_keys=True, default=str))
    add(package_version())
    add(f"revision {FIT_REVISION}")
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """``$BAYES_SCHED_CACHE``, else ``$XDG_CACHE_HOME/bayes-sched/fits`` (default
    ``~/.cache``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bayes-sched" / "fits"


def print_note(message: str) -> None:
    """Print ``bayes-sched: note: MESSAGE`` as one line on stderr."""
    print(f"bayes-sched: note: {one_line(message)}", file=sys.stderr)


@contextmanager
def quiet_arviz() -> Iterator[Any]:
    """Import ArviZ without its refactoring announcement (a FutureWarning on every import)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz

        yield arviz


@dataclass
class FitCache:
    """A folder of saved fits.

    ``refit``: never read a saved fit (they are still written, replacing the old ones);
    ``note``: where one-line notes go (a file that could not be read or written).
    """

    folder: Path = field(default_factory=default_cache_dir)
    refit: bool = False
    note: Callable[[str], None] = print_note

    def path(self, kind: str, name: str, key: str) -> Path:
        """Where the fit of ``name`` with ``key`` lives."""
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:64] or "fit"
        return self.folder / f"{kind}-{safe}-{key[:16]}.nc"

    def load(self, kind: str, name: str, key: str) -> InferenceData | None:
        """The saved fit with ``key``, fully in memory, or None (none saved, ``refit``, or a file
        that cannot be read: noted, and left to be replaced)."""
        return self.read(kind, name, key, lambda idata: idata)

    def read(self, kind: str, name: str, key: str, convert: Callable[[InferenceData], T]
             ) -> T | None:
        """``convert`` applied to the saved fit with ``key``, or None as :meth:`load`; a fit that
        ``convert`` cannot use (e.g. saved by other code under the same version) is noted and
        refitted too."""
        path = self.path(kind, name, key)
        if self.refit or not path.is_file():
            return None
        try:
            with quiet_arviz() as az:
                idata = az.from_netcdf(path)
            for group in idata.groups():
                idata[group].load()
            found = idata.attrs.get(KEY_ATTR)
            if found != key:
                raise ValueError(f"it holds key {str(found)[:16]}, expected {key[:16]}")
            return convert(idata)
        except Exception as error:  # noqa: BLE001 - whatever is wrong with the file, refit
            reason = " ".join(str(error).split())[:160] or type(error).__name__
            self.note(f"saved fit {path} could not be read ({reason}); refitting")
            return None

    def save(self, kind: str, name: str, key: str, idata: InferenceData) -> Path | None:
        """Write ``idata`` (its ``fit_key`` set to ``key``) atomically; returns its path, or None
        when the folder cannot be written (noted: the fit itself is still used)."""
        path = self.path(kind, name, key)
        idata.attrs[KEY_ATTR] = key
        idata.attrs["package_version"] = package_version()
        temporary = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                                 dir=path.parent)
            os.close(handle)
            idata.to_netcdf(temporary, engine="h5netcdf")
            with open(temporary, "rb+") as written:
                os.fsync(written.fileno())
            os.replace(temporary, path)
            temporary = None
            _fsync_folder(path.parent)
        except OSError as error:
            self.note(f"could not save the fit to {path} ({error.strerror or error}); "
                      "it will be refitted next time")
            return None
        finally:
            if temporary is not None:
                Path(temporary).unlink(missing_ok=True)
        return path


def _fsync_folder(folder: Path) -> None:
    # The rename is durable only once the folder's entry is flushed.
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
