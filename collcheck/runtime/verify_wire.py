"""What verification writes to the job's store per collective, and how it is read back.

A collective's comparison needs only what must agree: a hash of its signature and one of its call
site. So the publisher (a group's leader, a send's sender) writes a record of constant size per
collective (`<seq> <signature hash> <call-site hash> <details index>`, about 50 bytes whatever
the group's size) into a fixed ring of slots, `fp/<channel>/<seq mod RING>`, which a long job
overwrites instead of deleting. The readable details (what the op was, its call site and operand)
go to a second, smaller ring per channel, `dt/<channel>/<index mod DETAIL_RING>`, once per
distinct collective (a training loop's steady state writes none), and are read only when the
hashes differ, to write the report. A group's member list is written once, `members/<group>`,
by the first member to claim it, for stall reports; nothing per collective carries it.

A reader checks the number in what it reads: a slot that holds a later collective than the one it
wants was overwritten before it was compared (the reader fell behind), and the caller says so.

Asynchronous comparison reads one key per channel and tick, not the records: `rh/<channel>` holds
`<n> <chain>`, the publisher's rolling hash over the links (number, signature digest, call-site
digest) of its collectives 1..n, folded in order. A reader that folds its own links to the same n
and finds the same chain has compared all of them; only a different chain (or a gap) makes it
read the records of those collectives, to name the first that differs.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

RING = 16_384  # per-collective records kept per channel: a follower may lag this many behind
DETAIL_RING = 1_024  # distinct collectives' details kept per channel
SKIPPED = "-"  # the hashes of a number the publisher skipped (its event was lost): never compared
# compare_set with this as both the expected and the desired value reads a key without blocking:
# every c10d store answers the expected value for a missing key and changes nothing.
MISSING = "\x00collcheck:missing"
DETAIL_FIELDS = ("d", "site", "x", "s", "o")  # what a report says of the publisher's side


@functools.lru_cache(maxsize=4096)  # a training loop hashes the same few signatures and sites
def digest(text: str) -> str:
    """16 hex digits: what two ranks compare instead of the text itself."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass(frozen=True)
class Record:
    """One collective (or send) as its publisher wrote it."""

    n: int  # its number on the channel: the group's seq, or the send's k
    sig: str  # digest of what must agree (`s`), or SKIPPED
    site: str  # digest of the call site, or SKIPPED
    detail: int  # the unwrapped index of its details in the channel's details ring; -1: none

    def text(self) -> str:
        return f"{self.n} {self.sig} {self.site} {self.detail}"

    @classmethod
    def parse(cls, raw: bytes | str) -> Record | None:
        """None for anything that is not a record (a damaged or foreign value)."""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        parts = text.split(" ")
        if len(parts) != 4:
            return None
        try:
            return cls(int(parts[0]), parts[1], parts[2], int(parts[3]))
        except ValueError:
            return None

    @property
    def skipped(self) -> bool:
        return self.sig == SKIPPED


def hashes(fp: dict[str, Any]) -> tuple[str, str]:
    """(signature digest, call-site digest) of a fingerprint."""
    return digest(str(fp["s"])), digest(str(fp["site"]))


def differs(mine: dict[str, Any], record: Record) -> bool:
    """Whether `mine` and the publisher's record could differ in what `mismatch_kind` compares:
    the signature, and the call site of a collective (a send and its recv are always on different
    lines). Equal digests mean equal texts (a collision is a 1 in 2**64 event)."""
    sig, site = hashes(mine)
    return sig != record.sig or ("c" not in mine and site != record.site)


CHAIN_START = "0" * 16  # the chain of no collective


def link(n: int, fp: dict[str, Any]) -> str:
    """What the chain folds for collective (or send) #n: what `differs` compares, nothing more
    (a send and its recv are always on different lines: no call site)."""
    sig, site = hashes(fp)
    return f"{n} {sig} {'-' if 'c' in fp else site}"


def record_link(record: Record, p2p: bool) -> str:
    """The publisher's link for a record it wrote (a skipped number folds its marker)."""
    return f"{record.n} {record.sig} {'-' if p2p or record.skipped else record.site}"


def fold(chain: str, text: str) -> str:
    """The chain after one more link (not `digest`: chains never repeat, and would fill its cache)."""
    return hashlib.blake2b(f"{chain} {text}".encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def chain_key(channel: str) -> str:
    return f"rh/{channel}"


def parse_chain(raw: bytes | None) -> tuple[int, str] | None:
    """(n, chain) of an `rh/` value; None when missing or not one."""
    if raw is None:
        return None
    parts = raw.decode("utf-8", "replace").split(" ")
    if len(parts) != 2 or not parts[0].isdigit():
        return None
    return int(parts[0]), parts[1]


def slot_key(channel: str, n: int) -> str:
    return f"fp/{channel}/{n % RING}"


def detail_key(channel: str, index: int) -> str:
    return f"dt/{channel}/{index % DETAIL_RING}"


def members_key(group: str) -> str:
    return f"members/{group}"


def details_text(fp: dict[str, Any], index: int) -> str:
    """The details value: the readable fields, and its own index to tell a reused slot."""
    data = {name: fp[name] for name in DETAIL_FIELDS if name in fp}
    data["i"] = index
    return json.dumps(data, separators=(",", ":"))


def theirs(mine: dict[str, Any], publisher: int, raw: bytes | None, record: Record) -> dict[str, Any]:
    """The publisher's fingerprint, rebuilt for a report: where it is (group, number, channel)
    comes from `mine`, which is the same collective; what it was comes from its details, or, when
    those were overwritten, says so (the hashes still tell that it differed)."""
    fp: dict[str, Any] = {name: mine[name] for name in ("g", "n", "c", "k", "w") if name in mine}
    fp["r"] = publisher
    data: dict[str, Any] = {}
    if raw is not None:
        try:
            loaded = json.loads(raw)
        except ValueError:
            loaded = None
        if isinstance(loaded, dict) and loaded.get("i") == record.detail:
            data = loaded
    if data:
        fp.update({name: data[name] for name in DETAIL_FIELDS if name in data})
    else:  # keep the comparison's outcome: the unknown side is unequal where its hash is
        fp.update(d="(details overwritten)", site="(unknown)", x="", s=f"#{record.sig}")
        if record.sig == hashes(mine)[0]:
            fp["s"] = mine["s"]
        if record.site == hashes(mine)[1]:
            fp["site"] = mine["site"]
    return fp


class DetailIndex:
    """The publisher's side of one channel's details ring: which details it has written and where.

    First in, first out, so the entry forgotten is always the one whose slot the next write reuses.
    """

    def __init__(self) -> None:
        self._where: OrderedDict[tuple[Any, ...], int] = OrderedDict()
        self._next = 0

    def place(self, fp: dict[str, Any]) -> tuple[int, str | None]:
        """(index, details text to write or None when already written) for a fingerprint."""
        identity = tuple(fp.get(name) for name in DETAIL_FIELDS)
        index = self._where.get(identity)
        if index is not None:
            return index, None
        index = self._next
        self._next += 1
        self._where[identity] = index
        if len(self._where) > DETAIL_RING:
            self._where.popitem(last=False)
        return index, details_text(fp, index)


def peek(store: Any, key: str) -> bytes | None:
    """A key's value, or None when it does not exist: one request that never blocks."""
    value = store.compare_set(key, MISSING, MISSING)
    raw = value.encode() if isinstance(value, str) else bytes(value)
    return None if raw == MISSING.encode() else raw
