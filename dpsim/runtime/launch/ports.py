"""The rendezvous: free ports, the launcher's TCPStore, and loopback detection."""

from __future__ import annotations

import ipaddress
import socket
from datetime import timedelta
from typing import Any

__all__ = ["StoreBindError", "free_port"]

_MAX_CHILD_TIMEOUT_S = 7 * 24 * 3600.0  # cap for timeouts handed to torch (inf -> 7 days)


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on `host` a moment ago (another process may take it).

    `launch` does not need this (its store binds port 0); it is for code that must name a
    port up front. Retry on EADDRINUSE when you bind it.
    """
    family, sockaddr = _resolve(host)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind(sockaddr)
        port: int = sock.getsockname()[1]
        return port


def torch_timeout(timeout_s: float) -> timedelta:
    """`timeout_s` (seconds, may be inf) as a timedelta torch accepts (at most 7 days)."""
    return timedelta(seconds=min(timeout_s, _MAX_CHILD_TIMEOUT_S))


def is_loopback(addr: str) -> bool:
    """True for "localhost" and literal loopback addresses (127.0.0.0/8, ::1)."""
    if addr.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(addr.strip("[]")).is_loopback
    except ValueError:
        return False


def loopback_ifname() -> str | None:
    """Name of the loopback network interface ("lo" on Linux, "lo0" on macOS), or None."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return None
    for preferred in ("lo", "lo0"):
        if preferred in names:
            return preferred
    return next((name for name in names if name.startswith("lo")), None)


def _resolve(host: str) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    """(family, sockaddr with port 0) of `host`, preferring IPv4; ValueError if unknown."""
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ValueError(
            f"master_addr={host!r} cannot be resolved ({exc}); give a host name or IP of "
            "this machine, e.g. '127.0.0.1'"
        ) from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr


def start_store(host: str, world_size: int, timeout_s: float) -> tuple[Any, str, int]:
    """Start the rendezvous TCPStore server in this process; return (store, address, port).

    The listening socket is bound here to `host` with port 0 (the OS picks a free port, so
    concurrent launches never race) and handed to the store, which then listens on `host`
    only; a plain `TCPStore(host, 0, ...)` would listen on every interface, so when torch
    refuses the socket this raises `StoreBindError` instead of falling back.
    """
    import torch.distributed as dist

    timeout = torch_timeout(timeout_s)
    family, sockaddr = _resolve(host)
    address = str(sockaddr[0])
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind(sockaddr)
    except OSError as exc:
        sock.close()
        raise ValueError(
            f"master_addr={host!r} cannot be bound here ({exc}); launch starts every rank on "
            "this machine, so give an address of this machine, e.g. '127.0.0.1'"
        ) from None
    try:
        port = int(sock.getsockname()[1])
        store = dist.TCPStore(
            address, port, world_size, is_master=True, wait_for_workers=False,
            timeout=timeout, master_listen_fd=sock.fileno(),
        )
    except (RuntimeError, OSError, TypeError, ValueError) as exc:
        sock.close()
        raise StoreBindError(host, exc) from None
    sock.detach()  # the store owns the socket now
    return store, address, port


class StoreBindError(RuntimeError):
    """The store could not take the socket bound to `host` (torch refused master_listen_fd).

    There is no silent fallback: a `TCPStore` given only a port listens on every network
    interface, which would open the rendezvous to the whole network.
    """

    def __init__(self, host: str, cause: BaseException) -> None:
        super().__init__(
            f"could not start the rendezvous store on master_addr={host!r}: torch's TCPStore "
            f"refused the socket bound to that address ({type(cause).__name__}: {cause}). "
            "launch does not fall back to a store that listens on every interface; use a "
            "torch whose TCPStore accepts master_listen_fd (torch >= 2.0 on Linux/macOS), or "
            "start the ranks with torchrun --master_addr 127.0.0.1")
        self.host = host
