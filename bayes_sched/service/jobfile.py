"""Job files: what ``bayes-sched submit`` reads (TOML).

::

    name = "tiny-a"                 # optional: the file's stem
    script = "train_tiny.py"        # relative to the job file
    args = ["--examples", "4096"]   # optional
    init_batch_size = 32            # the total batch the learning rate is tuned for
    max_batch_size = 256            # the largest total batch the job accepts
    max_local_bsz = 64              # per-GPU batch limit (what fits in GPU memory)
    target_epochs = 3
    min_local_bsz = 1               # optional
    max_replicas = 4                # optional
    python = "/usr/bin/python3"     # optional (default: submit's interpreter); a path
                                    # relative to the job file, or a name found on PATH
    tenant = "vision"               # optional: the team submitting it (default: "default";
                                    # ``submit --tenant`` overrides it)
    [env]                           # optional: on top of the allow-listed variables
    OMP_NUM_THREADS = "1"           # (bayes_sched.backends.job_env)

Batch sizes are at most :data:`perfmodel.textio.MAX_BATCH`, replicas at most
:data:`perfmodel.textio.MAX_GPUS` (the profile readers' bounds), epochs at most
:data:`MAX_TARGET_EPOCHS`. ``[env]`` may not set what the scheduler sets
(:func:`~bayes_sched.backends.job_env.is_scheduler_variable`), nor loader variables
(:func:`~bayes_sched.backends.job_env.is_loader_variable`: ``LD_PRELOAD``, ``PYTHONPATH``, ...)
unless ``allow_loader_env`` (``submit --allow-loader-env``).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

from bayes_sched.backends.job_env import is_loader_variable, is_scheduler_variable
from bayes_sched.backends.job_spec import RealJobSpec
from bayes_sched.errors import InputError
from bayes_sched.tenants import DEFAULT_TENANT
from perfmodel.textio import MAX_BATCH, MAX_GPUS

_FIELDS = ("name", "script", "args", "init_batch_size", "max_batch_size", "max_local_bsz",
           "target_epochs", "min_local_bsz", "max_replicas", "python", "env", "cwd", "tenant")
_REQUIRED = ("script", "init_batch_size", "max_local_bsz", "target_epochs")
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: An environment variable's name (POSIX's portable form).
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Most epochs one job may ask for: a million passes over its data is no training run but a
#: typo (or a job meant to hold its GPUs for ever).
MAX_TARGET_EPOCHS = 10**6
#: The flag of ``submit`` that lets ``[env]`` set loader variables.
ALLOW_LOADER_FLAG = "--allow-loader-env"
#: The flag of ``submit`` that names the job's tenant.
TENANT_FLAG = "--tenant"


def read_job_file(path: str | Path, allow_loader_env: bool = False,
                  tenant: str | None = None) -> RealJobSpec:
    """Read and check a job file; raises :class:`InputError` naming the file and field.
    ``allow_loader_env``: let ``[env]`` set loader variables (``LD_PRELOAD``, ``PYTHONPATH``);
    ``tenant``: the job's tenant, over the file's ``tenant`` (``submit --tenant``)."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InputError("no such job file", path) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read the job file ({error})", path) from None
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"not TOML ({error})", path) from None
    if tenant is not None:
        check_tenant_name(tenant, TENANT_FLAG)
        raw["tenant"] = tenant
    return job_spec_from_dict(raw, path, allow_loader_env)


def check_tenant_name(name: object, where: str | Path, key: str | None = None) -> str:
    """``name`` if it can name a tenant (a non-empty string without surrounding spaces, as
    the cluster file's ``[[tenants]]`` names are), else :class:`InputError` naming ``where``
    (and ``key``)."""
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        message = f"{name!r}: expected a tenant's name (non-empty, no surrounding spaces)"
        raise InputError(f"field '{key}': {message}" if key else message, where)
    return name


def _fail(path: Path, key: str, message: str) -> InputError:
    return InputError(f"field '{key}': {message}", path)


def _int(raw: dict[str, Any], key: str, path: Path, minimum: int, maximum: int) -> int:
    value = raw[key]
    if (isinstance(value, bool) or not isinstance(value, int) or value < minimum
            or value > maximum):
        raise _fail(path, key, f"expected an integer in [{minimum}, {maximum}], got {value!r}")
    return value


def _python(raw: dict[str, Any], path: Path) -> str:
    """The interpreter's absolute path: ``python`` relative to the job file where it names a
    path, else looked up on PATH; submit's own interpreter by default."""
    python = raw.get("python", sys.executable)
    if not isinstance(python, str) or not python:
        raise _fail(path, "python", "expected the path of a Python interpreter")
    found = os.path.abspath(path.parent / python) if os.sep in python else shutil.which(python)
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise _fail(path, "python", f"{python!r} not found: expected an executable Python "
                                    "interpreter (a path, or a name on PATH)")
    return os.path.abspath(found)  # not resolved: a virtual environment's link is its own


def _env(raw: dict[str, Any], path: Path, allow_loader_env: bool) -> dict[str, str]:
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise _fail(path, "env", "expected a table of strings")
    for name in env:
        if not ENV_NAME_PATTERN.fullmatch(name):
            raise _fail(path, f"env.{name}", "expected a variable name (letters, digits, '_')")
        if is_scheduler_variable(name):
            raise _fail(path, f"env.{name}", "set by the scheduler for every replica: expected "
                                             "it left out")
        if is_loader_variable(name) and not allow_loader_env:
            raise _fail(path, f"env.{name}", "a loader variable (it changes what every program "
                                             "of the job loads): refused unless submitted with "
                                             f"{ALLOW_LOADER_FLAG}")
    return dict(env)


def job_spec_from_dict(raw: dict[str, Any], path: Path,
                       allow_loader_env: bool = False) -> RealJobSpec:
    """A job spec from a parsed job file (see the module's documentation)."""
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise _fail(path, unknown[0], f"unknown field; expected one of {', '.join(_FIELDS)}")
    for key in _REQUIRED:
        if key not in raw:
            raise _fail(path, key, "missing")
    name = raw.get("name", path.stem)
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise _fail(path, "name", f"{name!r}: expected letters, digits, '_', '-', '.' "
                                  "(at most 64)")
    script = raw["script"]
    if not isinstance(script, str) or not script:
        raise _fail(path, "script", "expected a path to a Python script")
    script_path = (path.parent / script).resolve()
    if not script_path.is_file():
        raise _fail(path, "script", f"file '{script_path}' not found")
    args = raw.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str | int | float) and
                                             not isinstance(a, bool) for a in args):
        raise _fail(path, "args", "expected a list of strings or numbers")
    init = _int(raw, "init_batch_size", path, 1, MAX_BATCH)
    max_local = _int(raw, "max_local_bsz", path, 1, MAX_BATCH)
    target = _int(raw, "target_epochs", path, 1, MAX_TARGET_EPOCHS)
    min_local = _int(raw, "min_local_bsz", path, 1, MAX_BATCH) if "min_local_bsz" in raw else 1
    if min_local > max_local:
        raise _fail(path, "min_local_bsz", f"{min_local} exceeds max_local_bsz {max_local}")
    max_batch = (_int(raw, "max_batch_size", path, init, MAX_BATCH) if "max_batch_size" in raw
                 else init)
    max_replicas = (_int(raw, "max_replicas", path, 1, MAX_GPUS) if "max_replicas" in raw
                    else None)
    python = _python(raw, path)
    env = _env(raw, path, allow_loader_env)
    cwd = raw.get("cwd")
    if cwd is not None:
        if not isinstance(cwd, str) or not (path.parent / cwd).is_dir():
            raise _fail(path, "cwd", f"{cwd!r}: expected an existing directory")
        cwd = str((path.parent / cwd).resolve())
    tenant = check_tenant_name(raw.get("tenant", DEFAULT_TENANT), path, "tenant")
    return RealJobSpec(name=name, argv=(python, str(script_path), *map(str, args)),
                       init_batch_size=init, max_batch_size=max_batch, max_local_bsz=max_local,
                       target_epochs=target, min_local_bsz=min_local, max_replicas=max_replicas,
                       cwd=cwd, env=env, application=script_path.stem, tenant=tenant)
