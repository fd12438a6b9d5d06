"""Which Kubernetes pod and container a process runs in, from ``/proc/<pid>/cgroup``.

The kubelet puts each container in a cgroup whose path names the pod's UID and the container's ID,
with either cgroup driver and any runtime::

    cgroupfs:  /kubepods/burstable/pod0f7c...-9a1e/3c5e...(64 hex)
    systemd:   /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f7c..._9a1e.slice/
               cri-containerd-3c5e...(64 hex).scope      (or docker-..., crio-...)

The pod's name and namespace are not in the path: join on ``pod_uid`` with kube-state-metrics'
``kube_pod_info{uid=...}`` for those. A process outside Kubernetes (or a container run by Docker
alone) gets an empty ``pod_uid``; one outside any container an empty ``container_id`` too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from collectors.base import read_text

_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_CONTAINER = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$")


@dataclass(frozen=True)
class Workload:
    """The Kubernetes pod UID and container ID of a process ("" where it has none)."""

    pod_uid: str = ""
    container_id: str = ""


def parse_cgroup(text: str) -> Workload:
    """The pod UID and container ID named by the contents of a ``/proc/<pid>/cgroup`` file."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1].strip()
        container = _CONTAINER.search(path)
        pod = _POD.search(path)
        if container or pod:
            return Workload(pod_uid=pod.group(1).replace("_", "-") if pod else "",
                            container_id=container.group(1) if container else "")
    return Workload()


def workload_of(pid: int, proc_root: str = "/proc") -> Workload:
    """The pod and container of process ``pid``; empty when it has ended or is not visible."""
    text = read_text(f"{proc_root}/{pid}/cgroup")
    return parse_cgroup(text) if text is not None else Workload()
