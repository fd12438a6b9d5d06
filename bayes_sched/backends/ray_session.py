"""Connecting to a Ray cluster: one clear line for an address that does not answer, never a hang.

``ray.init(address=...)`` on an address where nothing listens keeps retrying for Ray's own GCS
timeouts (minutes: twenty tries of about half a minute); an operator who mistyped a port
deserves a line at once. So a ``HOST:PORT`` address is first resolved as Ray will resolve it
(Ray replaces a loopback host by this machine's address) and probed there with a TCP connection
bounded by ``timeout_seconds``. A port that accepts TCP need not be Ray's (the dashboard's
8265, a Redis, any HTTP server), and Ray's own client would then retry for most of a minute, so
the port must next answer as a Ray GCS within the same bound (:func:`check_ray_gcs`): first speak
HTTP/2, as gRPC does (a server answers the client's connection preface with a SETTINGS frame;
checked on a plain socket, quietly: Ray's C++ client logs to stderr while it retries), then tell
Ray's own GCS client the cluster's id. Only an address that answers is handed to ``ray.init``.
``auto`` uses Ray's discovery of a cluster started on this machine (``ray start --head``, or
``RAY_ADDRESS``), which fails at once when there is none.

Ray is the ``cluster`` extra: this module imports it inside :func:`connect_ray` only.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

from bayes_sched.errors import InputError

#: Seconds a Ray address gets to accept a TCP connection, and then to answer as a Ray GCS, before
#: it counts as not answering (under 5 s: Ray's C++ client logs a warning of its own on stderr
#: after 5 s, which the one-line error should come before).
DEFAULT_CONNECT_TIMEOUT = 4.0

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


#: What an HTTP/2 client sends first (RFC 9113, section 3.4): the preface, then an empty SETTINGS
#: frame (length 0, type 4, no flags, stream 0); a server's first frame is SETTINGS too.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_HTTP2_SETTINGS = 4


def _speaks_http2(dial: str, port: int, timeout_seconds: float) -> str | None:
    """``None`` where the server answers the HTTP/2 preface with a SETTINGS frame within
    ``timeout_seconds``; else what it did instead."""
    try:
        with socket.create_connection((dial, port), timeout=timeout_seconds) as connection:
            connection.sendall(_HTTP2_PREFACE)
            header = b""
            while len(header) < 9:  # a frame header: length (3), type (1), flags, stream (5)
                chunk = connection.recv(9 - len(header))
                if not chunk:
                    return "it closed the connection"
                header += chunk
    except TimeoutError:
        return f"no answer within {timeout_seconds:g} s"
    except OSError as error:
        return (error.strerror or type(error).__name__).lower()
    return None if header[3] == _HTTP2_SETTINGS else "it does not speak gRPC"


def check_ray_gcs(address: str, timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT,
                  where: str = "--ray", dial_host: str | None = None) -> None:
    """Raise :class:`InputError` unless a Ray GCS at ``HOST:PORT`` (or at ``dial_host`` and that
    port) speaks HTTP/2 and tells Ray's own GCS client the cluster's id, each within
    ``timeout_seconds``."""
    host, port = split_address(address, where)
    reason = _speaks_http2(dial_host or host, port, timeout_seconds)
    if reason is None:
        reason = _ask_cluster_id(f"{dial_host or host}:{port}", timeout_seconds)
    if reason is not None:
        raise InputError(f"{where} {address}: accepts connections but is not a Ray cluster "
                         f"({reason}); expected the GCS address `ray start --head` prints (e.g. "
                         "10.0.0.1:6379), not the dashboard's or Ray Client's port")


def _ask_cluster_id(target: str, timeout_seconds: float) -> str | None:
    """``None`` where Ray's GCS client at ``target`` learns the cluster's id within
    ``timeout_seconds``, else why not. The client blocks in C++ for most of a minute on a server
    that is not a GCS: it asks from a daemon thread, left behind to time out on its own."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # Cython, not in its stub

    outcome: dict[str, Any] = {}

    def ask() -> None:
        try:
            outcome["cluster_id"] = GcsClient(address=target).cluster_id
        except Exception as error:  # Ray's client raises its own RpcError, among others
            outcome["error"] = error

    thread = threading.Thread(target=ask, name="bayes-sched-ray-gcs-check", daemon=True)
    thread.start()
    thread.join(timeout_seconds)
    if "cluster_id" in outcome:
        return None
    error = outcome.get("error")
    return (f"no answer within {timeout_seconds:g} s" if error is None
            else (str(error).splitlines() or [type(error).__name__])[0])


def connect_ray(address: str, timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT,
                where: str = "--ray") -> RaySession:
    """Connect this process to the Ray cluster at ``address`` (``auto`` or ``HOST:PORT``).

    A process already connected keeps its connection (Ray holds one connection a process; an
    address given must still answer), and the session does not own it.

    Raises:
        InputError: Ray is not installed, the address is malformed, nothing accepts a connection
            there, or what does is not a Ray cluster (each within a bound, never Ray's retries).
    """
    try:
        import ray
    except ImportError:
        raise InputError(f"{where}: {_INSTALL_HINT}") from None
    if address != "auto":  # also when connected: a dead address given is an error
        from ray._private.services import resolve_ip_for_localhost  # the host ray.init dials

        host, _ = split_address(address, where)
        dial = resolve_ip_for_localhost(host)
        probe_address(address, timeout_seconds, where, dial)
        check_ray_gcs(address, timeout_seconds, where, dial)
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
