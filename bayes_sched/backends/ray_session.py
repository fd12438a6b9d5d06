"""Connecting to a Ray cluster: one clear line for an address that does not answer, never a hang.

``ray.init(address=...)`` on an address where nothing listens keeps retrying for Ray's own GCS
timeouts (minutes: twenty tries of about half a minute); an operator who mistyped a port
deserves a line at once. So a ``HOST:PORT`` address is first resolved as Ray will resolve it
(Ray replaces a loopback host by this machine's address) and probed there with a TCP connection
bounded by ``timeout_seconds``; only an address that accepts one is handed to Ray. (A port that
accepts TCP but is not a Ray GCS is then left to Ray's own timeouts.) ``auto`` uses Ray's
discovery of a cluster started on this machine (``ray start --head``, or ``RAY_ADDRESS``), which
fails at once when there is none.

Ray is the ``cluster`` extra: this module imports it inside :func:`connect_ray` only.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass

from bayes_sched.errors import InputError

#: Seconds a TCP probe of a Ray address may take before the address counts as not answering.
DEFAULT_CONNECT_TIMEOUT = 5.0

#: Ray settings that keep a driver light: no usage reports sent home (there is no network), no
#: log deduplication; set only where the environment does not set them.
LIGHT_RAY_ENVIRONMENT = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}

_INSTALL_HINT = "the Ray backend needs Ray: pip install 'bayes-sched[cluster]'"


@dataclass(frozen=True)
class RaySession:
    """A connection to a Ray cluster.

    Attributes:
        address: the address connected to, as given (``auto`` or ``HOST:PORT``).
        owned: whether :func:`connect_ray` started the connection (so :meth:`close` ends it);
            ``False`` where the process was connected already.
    """

    address: str
    owned: bool

    def close(self) -> None:
        """Disconnect, where this session connected (a cluster keeps running)."""
        import ray

        if self.owned and ray.is_initialized():
            ray.shutdown()


def split_address(address: str, where: str = "--ray") -> tuple[str, int]:
    """``HOST:PORT`` as ``(host, port)``; raises :class:`InputError` naming ``where``."""
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"{where} {address!r}: expected auto or HOST:PORT (the address "
                         "`ray start --head` prints, e.g. 10.0.0.1:6379)")
    return host.strip("[]"), int(port)


def probe_address(address: str, timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT,
                  where: str = "--ray", dial_host: str | None = None) -> None:
    """Raise :class:`InputError` unless something accepts a TCP connection at ``HOST:PORT``
    (or at ``dial_host`` and that port) within ``timeout_seconds``."""
    host, port = split_address(address, where)
    dial = dial_host or host
    at = "" if dial == host else f" at {dial}:{port}"
    try:
        with socket.create_connection((dial, port), timeout=timeout_seconds):
            pass
    except TimeoutError:
        reason = f"no connection within {timeout_seconds:g} s"
    except OSError as error:
        reason = (error.strerror or type(error).__name__).lower()
    else:
        return
    raise InputError(f"{where} {address}: no Ray cluster answers{at} ({reason}); expected a "
                     "running cluster's address, as `ray start --head` prints it")


def connect_ray(address: str, timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT,
                where: str = "--ray") -> RaySession:
    """Connect this process to the Ray cluster at ``address`` (``auto`` or ``HOST:PORT``).

    A process already connected keeps its connection (Ray holds one connection a process; an
    address given must still answer), and the session does not own it.

    Raises:
        InputError: Ray is not installed, the address is malformed, or no cluster answers there.
    """
    try:
        import ray
    except ImportError:
        raise InputError(f"{where}: {_INSTALL_HINT}") from None
    if address != "auto":  # also when connected: a dead address given is an error
        from ray._private.services import resolve_ip_for_localhost  # the host ray.init dials

        host, _ = split_address(address, where)
        probe_address(address, timeout_seconds, where, resolve_ip_for_localhost(host))
    if ray.is_initialized():
        return RaySession(address, owned=False)
    for key, value in LIGHT_RAY_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR, configure_logging=True)
    except ConnectionError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InputError(f"{where} {address}: cannot connect to a Ray cluster ({first})") \
            from None
    return RaySession(address, owned=True)
