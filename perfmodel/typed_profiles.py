"""Step-time profiles measured per GPU type, read from a profile folder.

A user who profiled their jobs on each GPU type they own lays the measurements out in either of
two ways (formats of the CSV files: :mod:`perfmodel.profiles`)::

    profiles/                          profiles/
      t4/                                cifar10/
        cifar10/placements.csv             placements-t4.csv
        cifar10/scalability.csv            scalability-t4.csv
        bert/placements.csv                placements-v100.csv
      v100/                              bert/
        cifar10/placements.csv             scalability-a100.csv

one folder per GPU type holding one folder per model, or one folder per model holding
``placements-<type>.csv`` and ``scalability-<type>.csv`` files (the project's own format goes
in the first layout: any CSV name inside ``<type>/<model>/``). A GPU
type's name is lower case (letters, digits, ``_`` and ``.``); which names a cluster knows is the
caller's to check. A model folder holding untyped files (``placements.csv``) as well keeps them
under type ``None``: measured on the cluster's one type.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from perfmodel.errors import InputError
from perfmodel.profiles import StepTimeProfile, read_step_time_profile

#: ``placements-t4.csv`` -> ``t4``.
TYPED_FILE = re.compile(r"^(placements|scalability)-([a-z0-9][a-z0-9_.]*)\.csv$")


def typed_files(folder: Path) -> dict[str, list[Path]]:
    """The per-type step-time files of one model folder, by GPU type (empty where none)."""
    found: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(folder.glob("*.csv")):
        match = TYPED_FILE.match(path.name)
        if match:
            found[match.group(2)].append(path)
    return dict(found)


def _untyped(folder: Path) -> list[Path]:
    return [p for p in sorted(folder.glob("*.csv"))
            if not TYPED_FILE.match(p.name) and not p.name.startswith("validation-")]


def _read_model_folder(folder: Path) -> dict[str | None, StepTimeProfile]:
    """One model folder's profiles by type: its ``placements-<type>.csv`` and
    ``scalability-<type>.csv`` files, and its untyped ones under ``None``."""
    found: dict[str | None, StepTimeProfile] = {}
    for gpu, files in typed_files(folder).items():
        found[gpu] = StepTimeProfile.concat(read_step_time_profile(f, folder.name) for f in files)
    untyped = _untyped(folder)
    if untyped:
        found[None] = StepTimeProfile.concat(read_step_time_profile(f, folder.name)
                                             for f in untyped)
    return found


def read_typed_profiles(folder: str | Path) -> dict[str, dict[str | None, StepTimeProfile]]:
    """Every model's profiles by GPU type, ``{model: {gpu_type: profile}}``, from ``folder`` laid
    out as the module docstring shows. Raises :class:`InputError` naming the folder where it
    holds neither layout, or where a type folder holds files beside its model folders."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError("expected a folder of per-type profiles", root)
    result: dict[str, dict[str | None, StepTimeProfile]] = defaultdict(dict)
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        models = sorted(p for p in sub.iterdir() if p.is_dir())
        if models:   # a GPU type folder of model folders
            if list(sub.glob("*.csv")):
                raise InputError("a GPU type folder holds model folders and CSV files: expected "
                                 "one or the other", sub)
            for model in models:
                result[model.name][sub.name] = read_step_time_profile(model, model.name)
            continue
        result[sub.name].update(_read_model_folder(sub))
    result = defaultdict(dict, {m: t for m, t in result.items() if t})
    if not result:
        raise InputError("no per-type profiles: expected <type>/<model>/placements.csv or "
                         "<model>/placements-<type>.csv", root)
    return {model: dict(by_type) for model, by_type in result.items()}


def holds_typed_profiles(path: str | Path) -> bool:
    """Whether ``path`` is a folder of per-type profiles: a model folder with
    ``placements-<type>.csv`` (or ``scalability-<type>.csv``) files, or a folder of either
    layout (cheap: file names only, nothing is read)."""
    root = Path(path)
    if not root.is_dir():
        return False
    if typed_files(root):
        return True
    return any(typed_files(sub) or any(p.is_dir() for p in sub.iterdir())
               for sub in root.iterdir() if sub.is_dir())


def read_typed_source(path: str | Path) -> dict[str, dict[str | None, StepTimeProfile]]:
    """:func:`read_typed_profiles` of a folder of either layout, or one model folder holding
    per-type files (``{its name: {gpu_type: profile}}``)."""
    root = Path(path)
    if root.is_dir() and typed_files(root):
        return {root.name: _read_model_folder(root)}
    return read_typed_profiles(root)
