"""A TCP port on 127.0.0.1 for a server that a test starts."""
from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 10000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768                         # Linux's default


def free_port() -> int:
    """A port free now and below the system's ephemeral range. A port the system handed out (binding port 0)
    can be handed out again, to a Jupyter kernel of a test running beside this one, before the server that
    was given it binds it; the system never hands out a port below that range on its own."""
    high = _ephemeral_start()
    low = min(LOWEST, high // 2)
    pick = random.SystemRandom()             # a test's random.seed() does not make two workers pick alike
    for _ in range(200):
        port = pick.randrange(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 between {low} and {high}")
