"""Point-to-point pairing: which send a recv receives, and what the two must agree on.

Backends match point-to-point operations per process group and pair of ranks, in issue order
(gloo also by tag): the k-th send from rank s to rank d in a group is received by the k-th recv
on d from s. That pairing is a *channel* (group, s, d) and a number k. A send and its recv must
agree on shapes, dtypes and tag; gloo does not check (a recv into a bigger buffer silently takes
the smaller send, different tags hang). A recv from any source cannot be paired, and once a rank
used one in a group, which send its later recvs in that group take cannot be told either.

Pure functions shared by the run-time monitor (verify.py) and the offline analysis (analyze.py);
no torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from collcheck.runtime.record import CollectiveEvent

P2P_SUFFIX = ":p2p"  # the tracer's group name for a group's send/recv: "<group>:p2p"
SEND = "send"
RECV = "recv"
ANY_SOURCE = "recv_any_source"


def is_p2p(group: str) -> bool:
    return group.endswith(P2P_SUFFIX)


def base_group(group: str) -> str:
    """The process group a p2p event belongs to, as reports name it: "0" for "0:p2p"."""
    return group.removesuffix(P2P_SUFFIX)


@dataclass(frozen=True)
class Channel:
    """Sends from global rank `src` to global rank `dst` in one group (`group` is `<name>:p2p`)."""

    group: str
    src: int
    dst: int

    @property
    def key(self) -> str:
        """Its name in the store and in a rank's position counters: `0:p2p/0-1`."""
        return f"{self.group}/{self.src}-{self.dst}"

    def where(self, k: int) -> str:
        """`group 0, send #1 0->1`: the k-th send on this channel and the recv that takes it."""
        return f"group {base_group(self.group)}, send #{k} {self.src}->{self.dst}"


def channel_of(event: CollectiveEvent) -> Channel | None:
    """The channel of a send, or of a recv from a named peer; None for what cannot be paired."""
    if event.root is None or event.root == event.rank:
        return None
    if event.op == SEND:
        return Channel(event.group, event.rank, event.root)
    if event.op == RECV:
        return Channel(event.group, event.root, event.rank)
    return None


def payload(event: CollectiveEvent) -> str:
    """What a send and its recv must agree on: not the op, the peer or the call site."""
    return f"{event.shapes!r}|{','.join(event.dtypes)}|{event.tag}"


def pair_text(first: tuple[int, str], second: tuple[int, str], where: str) -> str:
    """`rank 0 send(float32[4], peer=1) at a.py:12 vs rank 1 recv(float32[8], peer=0) at a.py:15
    (group 0, send #1 0->1)`: each side is (rank, "rank R op(...) at site"), lowest rank first,
    as in collective mismatches."""
    low, high = sorted((first, second))
    return f"{low[1]} vs {high[1]} ({where})"


@dataclass(frozen=True)
class Pair:
    """The k-th send of a channel and the k-th recv; either is None when it was never issued."""

    channel: Channel
    k: int
    send: CollectiveEvent | None
    recv: CollectiveEvent | None

    @property
    def agrees(self) -> bool:
        return self.send is None or self.recv is None or payload(self.send) == payload(self.recv)


def pairs(events: Iterable[CollectiveEvent]) -> dict[Channel, list[Pair]]:
    """Every rank's sends and recvs of one group, paired per channel in issue order (`seq`).

    Channels into a rank that received from any source in the group are left out: which of their
    sends it took cannot be told.
    """
    ordered = sorted(events, key=lambda event: (event.rank, event.seq))
    unpairable = {event.rank for event in ordered if event.op == ANY_SOURCE}
    sends: dict[Channel, list[CollectiveEvent]] = {}
    recvs: dict[Channel, list[CollectiveEvent]] = {}
    for event in ordered:
        channel = channel_of(event)
        if channel is None or channel.dst in unpairable:
            continue
        (sends if event.op == SEND else recvs).setdefault(channel, []).append(event)
    found: dict[Channel, list[Pair]] = {}
    for channel in sorted(set(sends) | set(recvs), key=lambda c: (c.src, c.dst)):
        sent, received = sends.get(channel, []), recvs.get(channel, [])
        found[channel] = [
            Pair(
                channel,
                k,
                sent[k - 1] if k <= len(sent) else None,
                received[k - 1] if k <= len(received) else None,
            )
            for k in range(1, max(len(sent), len(received)) + 1)
        ]
    return found
