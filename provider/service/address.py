"""Listen addresses as `allset serve` takes them (gRPC's host:port, [v6]:port, unix:path):
checked before anything starts, and a failed bind explained in words."""

from __future__ import annotations

import errno
import ipaddress
import socket

EXAMPLES = "e.g. 127.0.0.1:8086, [::1]:8086 or 0.0.0.0:8086"


def split(address: str) -> tuple[str, int] | None:
    """(host, port) of a host:port address, or None if it is not one. The host may be
    empty (every interface), a name, an IPv4 address or a bracketed IPv6 one."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        return None
    if host.startswith("["):
        if not host.endswith("]"):
            return None
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return None
    elif ":" in host:
        return None  # an IPv6 address needs brackets
    return host, int(port)


def problem(flag: str, address: str) -> str | None:
    """Why ``address`` given to ``flag`` cannot be listened on, judged by its syntax."""
    if address.startswith(("unix:", "unix-abstract:")):
        return None
    if split(address) is None:
        return f"{flag}: {address!r} is not host:port ({EXAMPLES})"
    return None


def is_loopback(address: str) -> bool:
    """Whether a plaintext listener on ``address`` is reachable from this host only.
    An empty host, 0.0.0.0 and [::] listen on every interface: not loopback. A name
    other than localhost could resolve anywhere, so it does not count either. A Unix
    socket is not on the network at all (its file mode guards it)."""
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    parts = split(address)
    if parts is None:
        return False
    host = parts[0]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_problem(address: str) -> str | None:
    """Why ``address`` cannot be listened on, found by binding a plain socket there (gRPC
    only says "Failed to bind", after logging a line of its own), or None if it can."""
    if address.startswith(("unix:", "unix-abstract:")):
        return None
    parts = split(address)
    if parts is None:
        return "not host:port"
    host, port = parts
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        return f"cannot resolve {host!r}: {err.strerror}"
    for family, kind, proto, _, where in infos:
        with socket.socket(family, kind, proto) as probe:
            # As gRPC binds (SO_REUSEADDR): a connection of an allset that just stopped,
            # still in TIME_WAIT, does not keep the next one from listening.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(where)
            except OSError as err:
                return {
                    errno.EADDRINUSE: "the port is in use (another allset, or another program)",
                    errno.EADDRNOTAVAIL: "that address is not one of this host's",
                    errno.EACCES: "permission denied (ports below 1024 need privileges)",
                }.get(err.errno or 0, err.strerror or str(err))
    return None
