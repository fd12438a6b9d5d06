"""Known GPU types: the names a cluster spec may use, with what is known of each.

A type's name is how clusters, traces and throughput tables refer to it (Gavel's traces say
``v100``, ``p100``, ``k80``; the Pollux profiles were measured on ``t4``). An unknown name is an
error wherever a cluster is described, so a typo cannot become a silently different cluster.
:func:`gpu_type_of_device` is the one map from the names hardware reports (``nvidia-smi``, NVML,
Ray's accelerator types) onto these types. A cluster may declare types of its own
(:func:`declared_gpu_type`, from a table of the cluster file), which live beside the built-in
ones in a :func:`gpu_catalog`.

Attributes are the vendor's published figures for the variant named (e.g. the 16 GB SXM2 V100 of
AWS p3 instances that Gavel used): peak dense FP32 FLOP/s and peak dense FP16/BF16 tensor-core
FLOP/s without sparsity, and the GPU's link to its peers, one direction at line rate (PCIe x16: 16
lanes of 8, 16 or 32 GT/s with 128b/130b encoding, 15.75, 31.5 and 63 GB/s for Gen3, Gen4 and Gen5;
NVLink: half the datasheet's bidirectional total). Sources, NVIDIA datasheets unless said: Tesla T4
(8.1 TFLOPS FP32, 65 FP16 tensor, PCIe Gen3 x16); Tesla K80 (8.73 TFLOPS FP32 with boost per two-
GPU board, 24 GB per board; one GPU is half); Tesla P100 PCIe 16 GB (9.3 TFLOPS FP32, 18.7 FP16);
Tesla V100 SXM2 (15.7 TFLOPS FP32, 125 tensor, NVLink 300 GB/s); A10 (31.2 TFLOPS FP32, 125 tensor,
PCIe Gen4); A10G (AWS EC2 G5 page: 24 GB; NVIDIA publishes no A10G datasheet, so its FLOP/s are
left unknown); L4 (30.3 TFLOPS FP32, 121 FP16 tensor, PCIe Gen4); A100 SXM4 40 GB (19.5 TFLOPS
FP32, 312 BF16 tensor, NVLink 600 GB/s); H100 SXM5 80 GB (67 TFLOPS FP32, 989 BF16 tensor, NVLink
900 GB/s); GeForce RTX 2080 Ti (Turing architecture whitepaper, reference board: 11 GB, 13.4 TFLOPS
FP32, 107.6 FP16 tensor, PCIe Gen3; its NVLink bridge is not assumed); Quadro RTX 6000, the Turing
one (24 GB, 16.3 TFLOPS FP32, 130.5 tensor, PCIe Gen3; not the 48 GB RTX 6000 Ada).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from bayes_sched.errors import InputError

if TYPE_CHECKING:
    from perfmodel.allreduce import Links

#: How a GPU reaches its peers in a node.
INTERCONNECTS = ("pcie", "nvlink")
#: One direction of a PCIe x16 link, byte/s, per generation (see the module docstring).
PCIE_X16 = {3: 15.75e9, 4: 31.5e9, 5: 63e9}


@dataclass(frozen=True, eq=False)
class GpuType:
    """One GPU type.

    Attributes:
        name: the short lower-case name specs use (``"v100"``).
        memory_bytes: device memory of one GPU, bytes.
        description: architecture and where the shipped data met it.
        peak_flops: peak dense FP32 FLOP/s of one GPU (NaN where not published).
        peak_tensor_flops: peak dense FP16/BF16 tensor-core FLOP/s (NaN where none or not
            published).
        interconnect: ``"pcie"`` or ``"nvlink"``, how the GPU reaches its peers in a node.
        link_bandwidth: one direction of that link, byte/s (NaN where unknown).
    """

    name: str
    memory_bytes: float
    description: str
    peak_flops: float = math.nan
    peak_tensor_flops: float = math.nan
    interconnect: str = "pcie"
    link_bandwidth: float = math.nan

    def _key(self) -> tuple[object, ...]:
        # Unknown figures (NaN) compare equal to each other: a type equals its copy.
        return tuple(None if isinstance(v, float) and math.isnan(v) else v
                     for v in (self.name, self.memory_bytes, self.description, self.peak_flops,
                               self.peak_tensor_flops, self.interconnect, self.link_bandwidth))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GpuType) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def links(self, nic_bandwidth: float, gpus_per_node: int) -> Links:
        """The links an all-reduce of jobs on nodes of this type crosses (for
        :mod:`perfmodel.sync_prior`): this GPU's peer link within a node, the node's NIC
        (``nic_bandwidth``, byte/s per direction) across nodes."""
        from perfmodel.allreduce import Links  # numpy: not when the CLI lists types

        if not math.isfinite(self.link_bandwidth):
            raise InputError(f"GPU type {self.name!r}: its peer link bandwidth is unknown; "
                             "expected a declared link_gbytes_per_s")
        return Links(within=self.link_bandwidth, across=float(nic_bandwidth),
                     gpus_per_node=gpus_per_node)


_GIB = 2.0**30
_T = 1e12

#: GPU types by name.
GPU_TYPES: Mapping[str, GpuType] = MappingProxyType({
    gpu.name: gpu for gpu in (
        GpuType("t4", 16 * _GIB, "Turing; AWS g4dn (the Pollux artifact's profiles)",
                8.1 * _T, 65 * _T, "pcie", PCIE_X16[3]),
        GpuType("k80", 12 * _GIB, "Kepler, one of a board's two GPUs; Gavel's measurements",
                8.73 / 2 * _T, math.nan, "pcie", PCIE_X16[3]),
        GpuType("p100", 16 * _GIB, "Pascal, PCIe 16 GB; Gavel's measurements",
                9.3 * _T, 18.7 * _T, "pcie", PCIE_X16[3]),
        GpuType("v100", 16 * _GIB, "Volta, SXM2 16 GB; Gavel's and Shockwave's measurements",
                15.7 * _T, 125 * _T, "nvlink", 150e9),
        GpuType("a10", 24 * _GIB, "Ampere, PCIe", 31.2 * _T, 125 * _T, "pcie", PCIE_X16[4]),
        GpuType("a10g", 24 * _GIB, "Ampere; AWS g5", math.nan, math.nan, "pcie", PCIE_X16[4]),
        GpuType("l4", 24 * _GIB, "Ada Lovelace; GCP g2", 30.3 * _T, 121 * _T, "pcie",
                PCIE_X16[4]),
        GpuType("a100", 40 * _GIB, "Ampere, SXM4 40 GB", 19.5 * _T, 312 * _T, "nvlink", 300e9),
        GpuType("h100", 80 * _GIB, "Hopper, SXM5 80 GB", 67 * _T, 989 * _T, "nvlink", 450e9),
        GpuType("rtx2080ti", 11 * _GIB, "Turing, GeForce RTX 2080 Ti", 13.4 * _T, 107.6 * _T,
                "pcie", PCIE_X16[3]),
        GpuType("rtx6000", 24 * _GIB, "Turing, Quadro RTX 6000", 16.3 * _T, 130.5 * _T, "pcie",
                PCIE_X16[3]),
        GpuType("cpu", 0.0, "no GPU: a logical GPU of a machine without one (the local "
                "backend's --gpus; its processes share the host's cores and memory)"),
    )
})

#: Device names whose type is several words (``nvidia-smi`` says ``"NVIDIA GeForce RTX 2080
#: Ti"``): a pattern searched in the lower-cased name, before the one-word rule.
_MULTI_WORD = ((re.compile(r"\brtx\s*2080\s*ti\b"), "rtx2080ti"),
               (re.compile(r"\b(quadro\s+)?rtx\s*6000\b(?!\s*ada)"), "rtx6000"))


def gpu_type(name: str, where: str = "gpu type",
             catalog: Mapping[str, GpuType] = GPU_TYPES) -> GpuType:
    """The GPU type called ``name`` in ``catalog`` (default the built-in types); raises
    :class:`InputError` naming ``where`` for an unknown one."""
    try:
        return catalog[name]
    except (KeyError, TypeError):
        raise InputError(f"{where}: unknown GPU type {name!r}; expected one of "
                         f"{', '.join(catalog)}") from None


def gpu_type_of_device(name: str, aliases: Mapping[str, str] | None = None) -> str | None:
    """Our GPU type for a device name as the vendor's tools or Ray report it, ``None`` where none
    matches: an entry of ``aliases`` (keys case-insensitive) naming a known type, else a
    several-word type (``"NVIDIA GeForce RTX 2080 Ti"``), else the first word of the name (words
    split at spaces and ``-``) that is a type's name, case-insensitively.

    ``"Tesla V100-SXM2-16GB"`` and ``"NVIDIA A100 80GB PCIe"`` (``nvidia-smi``), ``"A100-80G"``
    (Ray: a memory variant) give ``v100``, ``a100``, ``a100``; ``"NVIDIA L40S"`` gives ``None``
    (a whole word must match, not a prefix), and so does ``"NVIDIA RTX 6000 Ada Generation"``.
    """
    lowered = {key.lower(): value for key, value in (aliases or {}).items()}
    key = name.strip().lower()
    if lowered.get(key) in GPU_TYPES:
        return lowered[key]
    for pattern, type_name in _MULTI_WORD:
        if pattern.search(key):
            return type_name
    return next((word for word in re.split(r"[\s-]+", key) if word in GPU_TYPES), None)


#: Bounds of a declared type's figures: memory up to 64 TiB, FLOP/s up to 1e18 (an exaFLOP on
#: one GPU is a unit error), link and NIC rates up to 1e15 byte/s.
_DECLARED_BOUNDS = {"memory_gib": 65536.0, "peak_tflops": 1e6, "tensor_tflops": 1e6,
                    "link_gbytes_per_s": 1e6}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.]{0,31}$")


def declared_gpu_type(table: Mapping[str, Any], where: str) -> GpuType:
    """A GPU type a cluster file declares, from its table::

        [[gpu_types]]
        name = "mi250x"            # lower case, letters, digits, '_' and '.', at most 32
        memory_gib = 64
        peak_tflops = 47.9         # dense FP32, optional
        tensor_tflops = 383        # dense FP16/BF16, optional
        interconnect = "pcie"      # or "nvlink" (default "pcie")
        link_gbytes_per_s = 31.5   # one direction of the peer link, optional

    The node's NIC is the node topology's (``nic_capacity``). Raises :class:`InputError` naming
    ``where`` and the field on the first problem; a built-in name may not be redeclared.
    """
    known = {"name", "memory_gib", "peak_tflops", "tensor_tflops", "interconnect",
             "link_gbytes_per_s", "description"}
    if not isinstance(table, Mapping):
        raise InputError(f"{where}: expected a table with name and memory_gib")
    extra = sorted(set(table) - known)
    if extra:
        raise InputError(f"{where}.{extra[0]}: unknown field; expected one of "
                         f"{', '.join(sorted(known))}")
    name = table.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError(f"{where}.name: {name!r}; expected a lower-case name of letters, digits, "
                         "'_' or '.', at most 32 characters")
    if name in GPU_TYPES:
        raise InputError(f"{where}.name: {name!r} is a built-in GPU type; expected a new name")
    figures: dict[str, float] = {}
    for field_name, bound in _DECLARED_BOUNDS.items():
        value = table.get(field_name)
        if value is None and field_name != "memory_gib":
            figures[field_name] = math.nan
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or not 0 < value <= bound:
            raise InputError(f"{where}.{field_name}: {value!r}; expected a number above 0 and "
                             f"at most {bound:g}")
        figures[field_name] = float(value)
    interconnect = table.get("interconnect", "pcie")
    if interconnect not in INTERCONNECTS:
        raise InputError(f"{where}.interconnect: {interconnect!r}; expected one of "
                         f"{', '.join(INTERCONNECTS)}")
    description = table.get("description", "declared in the cluster file")
    if not isinstance(description, str):
        raise InputError(f"{where}.description: expected a string")
    return GpuType(name, figures["memory_gib"] * _GIB, description,
                   figures["peak_tflops"] * _T, figures["tensor_tflops"] * _T, interconnect,
                   figures["link_gbytes_per_s"] * 1e9)


def gpu_catalog(declared: tuple[GpuType, ...] = ()) -> Mapping[str, GpuType]:
    """The built-in types and ``declared`` ones (read-only); a name declared twice is an
    :class:`InputError`."""
    catalog = dict(GPU_TYPES)
    for gpu in declared:
        if gpu.name in catalog:
            raise InputError(f"gpu_types: {gpu.name!r} declared twice; expected one table per "
                             "name")
        catalog[gpu.name] = gpu
    return MappingProxyType(catalog)
