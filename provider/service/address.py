"""Listen addresses as `allset serve` takes them (gRPC's host:port, [v6]:port, unix:path)."""

from __future__ import annotations

import ipaddress


def is_loopback(address: str) -> bool:
    """Whether a plaintext listener on ``address`` is reachable from this host only.
    An empty host, 0.0.0.0 and [::] listen on every interface: not loopback. A name
    other than localhost could resolve anywhere, so it does not count either. A Unix
    socket is not on the network at all (its file mode guards it)."""
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return False
    host = host.removeprefix("[").removesuffix("]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
