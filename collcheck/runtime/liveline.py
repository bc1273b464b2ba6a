"""Error reports that reach `collcheck run` even when the trace folder cannot hold them.

A rank's monitor writes each report (a mismatch, a swap, a stall) into its trace, and `collcheck
run`'s verdict is decided from the traces. On a full disk that line is lost: the report was
printed at run time, yet the verdict said "rank 0 died" of the rank that had found the swap and
stopped the job. So `collcheck run` also listens on a Unix datagram socket in Linux's abstract
namespace (no file, nothing on any disk), and each rank sends its error reports there too. Only
datagrams whose sender runs as the same user are taken (the kernel vouches for it,
`SO_PASSCRED`); what is taken is bounded in count and size. A report that cannot be sent (no
listener, another platform) is simply not sent: the trace line is the record, this is a copy.

Comes in: in `collcheck run`, `Listener()` (its `env()` goes to the job); in a rank, `send(name,
rank, kind, text)`. Goes out: `Listener.close()`, the `LiveReport`s received, in arrival order.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import struct
import sys
import threading
from dataclasses import dataclass

ENV_SOCKET = "COLLCHECK_REPORT_SOCKET"
MAX_DATAGRAM = 16 * 1024
MAX_REPORTS = 256
SEND_TIMEOUT_S = 1.0  # only error reports are sent, each once, just before the rank stops the job
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class LiveReport:
    rank: int
    kind: str
    text: str


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(socket, "SO_PASSCRED")


class Listener:
    """`collcheck run`'s end: a bound socket and a thread that keeps what arrives."""

    def __init__(self) -> None:
        self.name = f"collcheck-{os.getpid()}-{secrets.token_hex(8)}"
        self.reports: list[LiveReport] = []
        self._stopping = False
        self._socket: socket.socket | None = None
        self._thread: threading.Thread | None = None
        if not supported():
            return
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            sock.bind("\0" + self.name)
        except OSError:
            return
        self._socket = sock
        self._thread = threading.Thread(target=self._receive, name="collcheck-liveline", daemon=True)
        self._thread.start()

    def env(self) -> dict[str, str]:
        return {ENV_SOCKET: self.name} if self._socket is not None else {}

    def _receive(self) -> None:
        assert self._socket is not None
        space = socket.CMSG_SPACE(_UCRED.size)
        while True:
            try:
                data, ancillary, _, _ = self._socket.recvmsg(MAX_DATAGRAM, space)
            except OSError:
                return  # closed
            if not data and self._stopping:
                return
            if len(self.reports) < MAX_REPORTS and _same_user(ancillary):
                report = parse(data)
                if report is not None:
                    self.reports.append(report)

    def close(self) -> list[LiveReport]:
        """Stop listening; what was received. A report sent just before the job ended is already
        in the socket's queue: the queue is read to its end first."""
        if self._socket is None:
            return []
        self._stopping = True
        try:  # an empty datagram wakes the thread after everything queued before it
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as waker:
                waker.sendto(b"", "\0" + self.name)
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._socket.close()
        return list(self.reports)


def _same_user(ancillary: list[tuple[int, int, bytes]]) -> bool:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= _UCRED.size:
            _, uid, _ = _UCRED.unpack(data[: _UCRED.size])
            return bool(uid == os.getuid())
    return False


def parse(data: bytes) -> LiveReport | None:
    """A report datagram, or None for anything else (damaged, foreign)."""
    try:
        row = json.loads(data)
        report = LiveReport(int(row["rank"]), str(row["kind"]), str(row["text"]))
    except (ValueError, TypeError, KeyError, RecursionError):
        return None
    return report if 0 <= report.rank < 1 << 31 else None


def send(name: str | None, rank: int, kind: str, text: str) -> None:
    """Best effort, never blocking, never raising: the trace line is the record."""
    if not name or not supported():
        return
    data = json.dumps({"rank": rank, "kind": kind, "text": text[: MAX_DATAGRAM // 2]}).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.settimeout(SEND_TIMEOUT_S)  # a full queue (a burst of reports) drains quickly
            sock.sendto(data[:MAX_DATAGRAM], "\0" + name)
    except OSError:
        pass
