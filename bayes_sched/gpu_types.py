"""Known GPU types: the names a cluster spec may use, with what is known of each.

A type's name is how clusters, traces and throughput tables refer to it (Gavel's traces say
``v100``, ``p100``, ``k80``; the Pollux profiles were measured on ``t4``). An unknown name is an
error wherever a cluster is described, so a typo cannot become a silently different cluster.
:func:`gpu_type_of_device` is the one map from the names hardware reports (``nvidia-smi``, NVML,
Ray's accelerator types) onto these types.

Attributes are the vendor's published figures for the variant the shipped data were measured on
(e.g. the 16 GB V100 of AWS p3 instances that Gavel used); they bound per-GPU batches and label
reports, nothing more.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from bayes_sched.errors import InputError


@dataclass(frozen=True)
class GpuType:
    """One GPU type.

    Attributes:
        name: the short lower-case name specs use (``"v100"``).
        memory_bytes: device memory of one GPU, bytes.
        description: architecture and where the shipped data met it.
    """

    name: str
    memory_bytes: float
    description: str


_GIB = 2.0**30

#: GPU types by name.
GPU_TYPES: Mapping[str, GpuType] = MappingProxyType({
    gpu.name: gpu for gpu in (
        GpuType("t4", 16 * _GIB, "Turing; AWS g4dn (the Pollux artifact's profiles)"),
        GpuType("k80", 12 * _GIB, "Kepler, one of a board's two GPUs; Gavel's measurements"),
        GpuType("p100", 16 * _GIB, "Pascal; Gavel's measurements"),
        GpuType("v100", 16 * _GIB, "Volta, 16 GB; Gavel's and Shockwave's measurements"),
        GpuType("a10g", 24 * _GIB, "Ampere; AWS g5"),
        GpuType("l4", 24 * _GIB, "Ada Lovelace; GCP g2"),
        GpuType("a100", 40 * _GIB, "Ampere, 40 GB"),
        GpuType("h100", 80 * _GIB, "Hopper, 80 GB"),
        GpuType("cpu", 0.0, "no GPU: a logical GPU of a machine without one (the local "
                "backend's --gpus; its processes share the host's cores and memory)"),
    )
})


def gpu_type(name: str, where: str = "gpu type") -> GpuType:
    """The GPU type called ``name``; raises :class:`InputError` naming ``where`` for an unknown
    one."""
    try:
        return GPU_TYPES[name]
    except (KeyError, TypeError):
        raise InputError(f"{where}: unknown GPU type {name!r}; expected one of "
                         f"{', '.join(GPU_TYPES)}") from None


def gpu_type_of_device(name: str, aliases: Mapping[str, str] | None = None) -> str | None:
    """Our GPU type for a device name as the vendor's tools or Ray report it, ``None`` where none
    matches: an entry of ``aliases`` (keys case-insensitive) naming a known type, else the first
    word of the name (words split at spaces and ``-``) that is a type's name, case-insensitively.

    ``"Tesla V100-SXM2-16GB"`` and ``"NVIDIA A100 80GB PCIe"`` (``nvidia-smi``), ``"A100-80G"``
    (Ray: a memory variant) give ``v100``, ``a100``, ``a100``; ``"NVIDIA L40S"`` gives ``None``
    (a whole word must match, not a prefix).
    """
    lowered = {key.lower(): value for key, value in (aliases or {}).items()}
    key = name.strip().lower()
    if lowered.get(key) in GPU_TYPES:
        return lowered[key]
    return next((word for word in re.split(r"[\s-]+", key) if word in GPU_TYPES), None)
