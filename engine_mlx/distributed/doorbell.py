"""A byte on a plain TCP connection to the next rank, rung before each message.

MLX's ring backend busy-waits in a posted receive: a rank waiting for the pipeline spent
half a core doing nothing (measured: 1.5 s of CPU in a 3 s wait). A rank on the same
machine as another, or a Mac with other work, pays for that. So a rank first sleeps on its
doorbell and posts MLX's receive only once a message is on its way; the data itself still
travels over ``mlx.core.distributed``. The doorbell also says at once when a neighbour's
process has gone (its connection closes) and bounds a wait (its timeout), which MLX's
receive cannot.

The connection goes to the address the ring itself uses for the next rank (``MLX_HOSTFILE``),
on a port each rank tells the others; it is refused unless it opens with the token rank 0
drew. Where the ring's addresses are unknown (another backend), there is no doorbell.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from pathlib import Path

import mlx.core as mx
import numpy as np

CONNECT_SECONDS = 30.0


class Doorbell:
    """This rank's two bell connections: to the next rank and from the previous one."""

    def __init__(self, out: socket.socket, into: socket.socket) -> None:
        self._out, self._in = out, into

    def ring(self) -> None:
        self._out.sendall(b"\x01")

    def wait(self, timeout: float | None) -> None:
        """Sleep until the previous rank rings; ``ConnectionError`` if it has gone,
        ``TimeoutError`` after ``timeout`` seconds."""
        self._in.settimeout(timeout)
        try:
            got = self._in.recv(1)
        except TimeoutError:
            raise TimeoutError(f"no answer in {timeout:.0f} s") from None
        except OSError as exc:
            raise ConnectionError(f"its connection failed ({exc})") from exc
        if not got:
            raise ConnectionError("its connection closed (its process ended or the link dropped)")


def ring_addresses(size: int) -> list[str] | None:
    """Each rank's address in the ring's hostfile, or None where there is none."""
    path = os.environ.get("MLX_HOSTFILE", "")
    try:
        hosts = json.loads(Path(path).read_text()) if path else None
        addresses = [str(entry[0]).rsplit(":", 1)[0] for entry in hosts]
    except (OSError, ValueError, TypeError, IndexError, KeyError):
        return None
    return addresses if len(addresses) == size else None


def connect(group: mx.distributed.Group) -> Doorbell | None:
    """Every rank calls this at once (it exchanges ports and the token over ``group``)."""
    rank, size = group.rank(), group.size()
    addresses = ring_addresses(size)
    if addresses is None:
        return None
    listener = socket.create_server((addresses[rank], 0))
    token_part = secrets.randbits(62) if rank == 0 else 0
    mine = mx.array([[listener.getsockname()[1], token_part]], mx.int64)
    table = np.asarray(mx.distributed.all_gather(mine, group=group)).reshape(size, 2)
    token = int(table[0, 1]).to_bytes(8, "little")
    nxt = (rank + 1) % size
    out = socket.create_connection((addresses[nxt], int(table[nxt, 0])), CONNECT_SECONDS)
    out.sendall(token)
    listener.settimeout(CONNECT_SECONDS)
    while True:  # the previous rank's connection: anything else is closed unanswered
        into, _ = listener.accept()
        into.settimeout(CONNECT_SECONDS)
        if _read(into, len(token)) == token:
            break
        into.close()
    listener.close()
    for s in (out, into):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return Doorbell(out, into)


def _read(conn: socket.socket, n: int) -> bytes:
    data = b""
    try:
        while len(data) < n and (chunk := conn.recv(n - len(data))):
            data += chunk
    except OSError:
        return b""
    return data
