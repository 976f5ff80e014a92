"""Loopback ports for the processes we start (everything local listens on 127.0.0.1 only)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing uses right now (the kernel's pick; another process may take it later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:``port`` (a server setting SO_REUSEADDR could bind it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
