"""What cross-rank verification writes where in the job's store, and the plain data it exchanges.

Protocol (keys live under the `collcheck/attempt<n>/` prefix of the job's store, `key_prefix`; no
new service):

* `fp/<group>/<seq mod RING>`: a constant-size record of collective #seq of a group (hashes of
  its signature and call site, see verify_wire.py), published by the group's leader (its lowest
  global rank) into a fixed ring of slots; `dt/<group>/<i>` holds the readable details of each
  distinct collective, read only when the hashes differ. `rh/<group>` holds how many the leader
  has published and its rolling hash over their records (see verify_wire.py). Every other member
  compares its own with the leader's, so each pair of ranks is compared through the leader: in
  async mode one read of `rh/` per tick covers all the collectives of the tick, and the records
  are read only when the hashes differ (or a follower is behind); in strict mode each record is
  waited for (the store's blocking wait) and compared. A follower that finds its slot already
  overwritten fell behind, and says so (a `behind` warning).
* `fp/<group>:p2p/<src>-<dst>/<k mod RING>` and `rh/<group>:p2p/<src>-<dst>`: the same for
  sends and recvs (see p2p.py): the sender publishes the k-th send to `dst`, and `dst` compares
  its k-th recv from `src` with it. `pwait/<rank>`: the rank a strict recv is waiting for.
* `members/<group>`: the group's member list, written once by the first member to claim it.
* `pos/<rank>`: where a rank is (per-group issued counts, collectives in flight, its last one),
  refreshed a few times a second while it changes and every few seconds when it does not (see
  `pacing`); read only when a stall is reported, and then by one rank (`stall_claim`), not by
  every rank that timed out.
* `abort`: the first error report (compare_set, so the first reporter wins), and `wake/<rank>`:
  its first line, set for every rank just before it. Each rank has a thread blocked in the
  store's wait for its `wake/` key, so one rank's finding ends the whole job at once instead of
  leaving the others hanging, and an idle rank asks the store nothing.

In: CollectiveEvents and send/recv slots. Out: fingerprints (dicts with short keys: `r` rank,
`g` group, `n` number, `s` signature, `d` description, `site`, `x` operand), Positions as JSON,
and the names of channels' ends; the constant-size records and rolling hashes are verify_wire.py's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from collcheck.runtime.groups import numbered
from collcheck.runtime.p2p import Channel, pair_text, payload
from collcheck.runtime.record import CollectiveEvent

PREFIX = "collcheck"  # every key lives under it, in the job's own store
# How many times torchrun restarted the job's workers (`--max-restarts`). A restarted attempt
# rendezvouses again on the same store, so without it in the prefix the new attempt would read
# the previous one's records (a false mismatch) and its `abort`/`wake/` keys (a false abort).
ENV_RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"
_COUNT = re.compile(r"[0-9]{1,9}")


def key_prefix(environ: Mapping[str, str]) -> str:
    """`collcheck/attempt<n>`: the keys of one attempt of the job, n its restart count (0 without
    torchrun or when the count is unreadable: every rank of an attempt has the same environment,
    so they agree either way). Not the run id: torchrun keeps it across restarts."""
    count = environ.get(ENV_RESTART_COUNT, "").strip()
    attempt = int(count) if _COUNT.fullmatch(count) else 0
    return f"{PREFIX}/attempt{attempt}"


def fingerprint(event: CollectiveEvent, members: bool = True) -> dict[str, Any]:
    """What one rank knows of one (group, seq), as compared and reported. `members=False`
    leaves out the group's member list: what is published (positions) or kept per collective
    must not grow with the group; readers restore it from `members/<group>`."""
    fp = {
        "r": event.rank,
        "g": event.group,
        "n": event.seq,
        "s": event.signature,
        "d": event.describe,
        "site": event.site.short,
        "x": event.site.operand,
    }
    if members:
        fp["ranks"] = list(event.group_ranks)
    return fp


@dataclass(frozen=True)
class P2PSlot:
    """A send or recv's place on its channel: the k-th send is received by the k-th recv."""

    event: CollectiveEvent
    channel: Channel
    k: int

    @property
    def sender(self) -> bool:
        return self.event.rank == self.channel.src


def p2p_fingerprint(slot: P2PSlot, members: bool = True) -> dict[str, Any]:
    """A send's or recv's record: `s` is what both sides must agree on (shapes, dtypes, tag), and
    `c`, `k`, `w` say which pair it is (channel, number, and how reports name it)."""
    fp = fingerprint(slot.event, members)
    fp.update(
        s=payload(slot.event), o=slot.event.op, c=slot.channel.key, k=slot.k, w=slot.channel.where(slot.k)
    )
    return fp


def blocked_fingerprint(
    event: CollectiveEvent, slot: P2PSlot | None = None, members: bool = True
) -> dict[str, Any]:
    """A fingerprint plus when the op was issued (what positions and stalls show)."""
    fp = p2p_fingerprint(slot, members) if slot is not None else fingerprint(event, members)
    fp["since"] = event.t_start
    return fp


def label(fp: dict[str, Any]) -> str:
    """`group 0, #4` for a collective, `group 0, send #1 0->1` for a send or recv."""
    return str(fp["w"]) if "w" in fp else numbered(str(fp["g"]), int(fp["n"]))


def mismatch_kind(mine: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """ "mismatch" when the collectives (or a send and its recv) differ, "callsite" when only where
    two collectives were issued does (a send and its recv are always on different lines)."""
    if mine["s"] != theirs["s"]:
        return "mismatch"
    if "c" not in mine and mine["site"] != theirs["site"]:
        return "callsite"
    return None


def side(fp: dict[str, Any]) -> str:
    return f"rank {fp['r']} {fp['d']} at {fp['site']}"


def mismatch_text(first: dict[str, Any], second: dict[str, Any]) -> str:
    """`rank 0 all_reduce(float32[1024]) at train.py:13 vs rank 1 ... (group 0, #1)`; for a send and
    its recv `rank 0 send(float32[4], peer=1) at ... vs rank 1 recv(...) ... (group 0, send #1 0->1)`."""
    return pair_text((int(first["r"]), side(first)), (int(second["r"]), side(second)), label(first))


@dataclass
class Position:
    """Where one rank is, as published under `pos/<rank>`."""

    rank: int
    t: float
    issued: dict[str, int] = field(default_factory=dict)
    inflight: list[dict[str, Any]] = field(default_factory=list)  # fingerprints plus "since"
    last: dict[str, Any] | None = None
    last_done: bool = False
    exited: bool = False
    hb: float = 1.0  # how often the rank republishes an unchanged position (its heartbeat)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Position:
        """The position another process published; ValueError for anything that is not one (a
        damaged or foreign value). Unknown keys are ignored: a newer writer may add some."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a position is a JSON object")
        try:
            issued = data.get("issued", {})
            if not isinstance(issued, dict):
                raise ValueError("issued is not an object")
            inflight = data.get("inflight", [])
            last = data.get("last")
            if not isinstance(inflight, list) or not all(_readable_fp(fp, since=True) for fp in inflight):
                raise ValueError("inflight is not a list of collectives")
            if last is not None and not _readable_fp(last, since=False):
                raise ValueError("last is not a collective")
            return cls(
                rank=int(data["rank"]),
                t=float(data["t"]),
                issued={str(group): int(seq) for group, seq in issued.items()},
                inflight=inflight,
                last=last,
                last_done=bool(data.get("last_done", False)),
                exited=bool(data.get("exited", False)),
                hb=float(data.get("hb", 1.0)),
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"not a position: {error!r}") from error


FP_TEXT_FIELDS = ("g", "d", "site")  # what reports format from another rank's fingerprint


def _readable_fp(fp: object, since: bool) -> bool:
    """Whether another process's fingerprint has what a report reads from it, with usable types."""
    if not isinstance(fp, dict) or not all(isinstance(fp.get(name), str) for name in FP_TEXT_FIELDS):
        return False
    numbers = ("r", "n", "since") if since else ("r", "n")
    values = [fp.get(name) for name in numbers]
    return all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in values)


def sender_of(channel: str) -> int | None:
    """The sending rank of a send/recv channel `<group>/<src>-<dst>`."""
    try:
        return int(channel.rsplit("/", 1)[1].split("-")[0])
    except (IndexError, ValueError):
        return None


def receiver_of(channel: str) -> int | None:
    """The receiving rank of a send/recv channel `<group>/<src>-<dst>`."""
    try:
        return int(channel.rsplit("/", 1)[1].split("-")[1])
    except (IndexError, ValueError):
        return None


def rank_list(raw: bytes) -> tuple[int, ...] | None:
    """A `members/<group>` value: a JSON list of ranks; None when it is anything else."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, list) or not all(isinstance(rank, int) for rank in data):
        return None
    return tuple(data)
