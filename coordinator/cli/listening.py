"""The ports `coordinator serve` listens on, taken before anything else starts.

The HTTP socket is bound here and handed to uvicorn (by its file
descriptor, which --workers processes share), so a busy or forbidden port is
found in a moment, before PostgreSQL starts, and nothing can take the port
between the check and the serving. The gRPC door's port is checked the
same way; the door binds it itself when the app starts.
"""

from __future__ import annotations

import errno
import socket


class CannotListen(OSError):
    """A port this process cannot listen on, with a sentence saying why."""


def _family(host: str) -> socket.AddressFamily:
    # As uvicorn decides: a colon means an IPv6 address.
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def bind(host: str, port: int, *, what: str = "HTTP") -> socket.socket:
    """A socket bound to host:port (not yet listening); CannotListen if it cannot be."""
    address = host.strip("[]")
    sock = socket.socket(_family(address), socket.SOCK_STREAM)
    # As uvicorn does: a port in TIME_WAIT after a restart is free to use.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError as error:
        sock.close()
        raise CannotListen(f"cannot listen for {what} on {host}:{port}: {_why(error)}") from None
    return sock


def check_free(host: str, port: int, *, what: str) -> None:
    """CannotListen unless host:port could be bound now."""
    bind(host, port, what=what).close()


def _why(error: OSError) -> str:
    if isinstance(error, socket.gaierror):
        return "no such host name or address"
    reasons = {
        errno.EADDRINUSE: "the port is in use by another process",
        errno.EACCES: "permission denied (ports below 1024 need privileges)",
        errno.EADDRNOTAVAIL: "no network interface of this machine has that address",
    }
    return reasons.get(error.errno or 0, error.strerror or str(error))
