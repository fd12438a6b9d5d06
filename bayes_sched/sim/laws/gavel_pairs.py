"""The Gavel law: node-sharing slowdowns from Gavel's measured co-location pairs.

Each Pollux application is mapped to the closest Gavel job type (:data:`GAVEL_TYPE_OF`); a job
sharing a node with others runs at ``prod_b (1 - node_share_factor * (1 - speed(a with b)))`` on
that node, where ``speed(a with b)`` is Gavel's normalised speed of ``a`` sharing *a GPU* with
``b`` (V100); a distributed job goes at the pace of its slowest node. ``node_share_factor`` scales
GPU sharing down to node sharing (host CPU, DRAM, PCIe, NIC): explicit, documented, and a
parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.errors import InputError
from bayes_sched.interference.gavel import load_gavel_pairs
from bayes_sched.sim.laws.base import RunningJob

#: The closest Gavel job type to each Pollux application: same model family and a similar per-GPU
#: batch (ImageNet ResNet-50 -> ResNet-50; CIFAR-10 ResNet-18 -> ResNet-18; BERT, a Transformer
#: encoder -> Transformer; DeepSpeech2, recurrent layers over sequences -> the LSTM language model;
#: YOLOv3, a convolutional net on large images at small batches -> CycleGAN; NCF -> Recommendation).
GAVEL_TYPE_OF: Mapping[str, str] = {
    "imagenet": "ResNet-50 (batch size 64)",
    "cifar10": "ResNet-18 (batch size 128)",
    "bert": "Transformer (batch size 16)",
    "deepspeech2": "LM (batch size 20)",
    "yolov3": "CycleGAN",
    "ncf": "Recommendation (batch size 8192)",
}


@dataclass
class GavelLaw:
    """Node-sharing slowdowns from Gavel's measured GPU-sharing pairs (see the module docstring).

    Args:
        node_share_factor: fraction of the GPU-sharing slowdown a job suffers from sharing only a
            node with the other job (0: no effect, 1: as bad as sharing the GPU). Sharing a node
            contends for host CPU, DRAM, PCIe and the NIC, not for SMs and GPU memory, so much less
            than 1; 0.3 by default.
        gpu: the Gavel GPU type whose measurements are used.
    """

    node_share_factor: float = 0.3
    gpu: str = "v100"
    name: str = field(default="gavel", init=False)
    _speed: dict[tuple[str, str], float] = field(default_factory=dict, repr=False, init=False)

    def check_cluster(self, cluster: ClusterSpec) -> None:
        """Any cluster: the law works per node, whatever its GPUs (pairs measured on ``gpu``)."""

    def __post_init__(self) -> None:
        if not 0 <= self.node_share_factor <= 1:
            raise InputError(f"node_share_factor is {self.node_share_factor}: expected a "
                             "fraction in [0, 1]", column="node_share_factor")
        pairs = load_gavel_pairs()
        pairs = pairs[pairs["gpu"] == self.gpu]
        if pairs.empty:
            raise InputError(f"no Gavel pairs measured on GPU type '{self.gpu}'", column="gpu")
        speed = pairs.groupby(["type_a", "type_b"])["speed_a"].mean()
        for a, type_a in GAVEL_TYPE_OF.items():
            for b, type_b in GAVEL_TYPE_OF.items():
                # Pairs too big for one GPU were not measured: use type_a's mean over partners.
                value = speed.get((type_a, type_b))
                if value is None or not np.isfinite(value):
                    value = float(speed.loc[type_a].mean())
                self._speed[(a, b)] = float(min(value, 1.0))

    def pair_speed(self, application: str, other: str) -> float:
        """Speed of ``application`` sharing a node with ``other`` (1 = unaffected)."""
        return 1.0 - self.node_share_factor * (1.0 - self._speed[(application, other)])

    def slowdowns(self, jobs: Mapping[str, RunningJob]) -> dict[str, float]:
        on_node: dict[int, list[str]] = {}
        for name, job in jobs.items():
            for node in np.flatnonzero(job.counts):
                on_node.setdefault(int(node), []).append(name)
        result: dict[str, float] = {}
        for names in on_node.values():
            if len(names) < 2:
                continue
            for name in names:
                speed = 1.0
                for other in names:
                    if other != name:
                        speed *= self.pair_speed(jobs[name].application, jobs[other].application)
                result[name] = max(result.get(name, 0.0), 1.0 - speed)
        return result
