"""The environment a job's processes get: an allow-list of the scheduler's variables, the job
file's ``[env]``, then the variables the scheduler sets (light: ``submit`` imports it).

A job does not inherit the scheduler's whole environment (its credentials, tokens, proxies and
loader settings stay with the scheduler). It gets :data:`INHERITED` (and every ``LC_*``) where
the scheduler has them: where programs and the user's files are, the locale, the time zone, the
temporary folder, and the thread and BLAS settings of the machine. On top come the job file's
``[env]`` and, last, what the backend sets (the job directory's variables, ``torch.distributed``'s,
``CUDA_VISIBLE_DEVICES``), which ``[env]`` may not set (:data:`SCHEDULER_SET`).

Variables that change what every program of the job loads, the interpreter included, rather than
what the job's script does (:func:`is_loader_variable`: ``LD_*``, ``DYLD_*``, ``PYTHONPATH``,
``PYTHONHOME``, ``PYTHONSTARTUP``, ...) are refused in ``[env]`` at submit unless the submitter
allows them (``submit --allow-loader-env``).
"""

from __future__ import annotations

from collections.abc import Mapping

from bayes_sched.client.protocol import ENV_TORCH

#: The scheduler's variables a job inherits where set (besides every ``LC_*``).
INHERITED = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
             "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
             "OPENBLAS_CORETYPE", "MKL_CBWR", "CUDA_DEVICE_ORDER")
#: Prefixes of inherited variables (the locale's categories).
INHERITED_PREFIXES = ("LC_",)
#: Variables the backend sets for every replica (with every ``BAYES_SCHED_*``: the job
#: directory's, :mod:`bayes_sched.client.protocol`); a job file's ``[env]`` may not set them.
SCHEDULER_SET = (*ENV_TORCH, "CUDA_VISIBLE_DEVICES")
SCHEDULER_PREFIX = "BAYES_SCHED_"
#: Prefixes of the dynamic loaders' variables (glibc's ``LD_PRELOAD``, ``LD_LIBRARY_PATH``,
#: ``LD_AUDIT``, ...; macOS's ``DYLD_*``).
LOADER_PREFIXES = ("LD_", "DYLD_")
#: Other variables that make programs load code from elsewhere: Python's module search and
#: start-up hooks, glibc's character-set modules, shells' start-up files.
LOADER_NAMES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
                "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR", "GCONV_PATH", "BASH_ENV", "ENV")


def is_loader_variable(name: str) -> bool:
    """Whether ``name`` changes what every program of a job loads (see the module's text)."""
    return name.startswith(LOADER_PREFIXES) or name in LOADER_NAMES


def is_scheduler_variable(name: str) -> bool:
    """Whether the backend sets ``name`` in every replica (so a job file may not)."""
    return name in SCHEDULER_SET or name.startswith(SCHEDULER_PREFIX)


def inherited_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of ``environ`` (:data:`INHERITED`, ``LC_*``)."""
    return {name: value for name, value in environ.items()
            if name in INHERITED or name.startswith(INHERITED_PREFIXES)}


def job_process_environment(environ: Mapping[str, str], job_env: Mapping[str, str],
                            scheduler_env: Mapping[str, str]) -> dict[str, str]:
    """A replica's environment: the allow-listed part of the scheduler's ``environ``, the job
    file's ``job_env`` over it, and the backend's ``scheduler_env`` over both."""
    return {**inherited_environment(environ), **job_env, **scheduler_env}
