"""The agreed prefix of every group across Flight Recorder dumps, found by comparing columns.

In: the opened dumps of a trace folder (fr_read.FlightRecorderDump) by rank, and which ranks are
traced. Out: DumpPrefixes: per group, the last sequence number every traced member issued alike
(same op, shapes, dtypes, call site; sequence numbers consecutive from the same first one); per
rank and group, the first entry past that prefix. The streaming analysis (stream_sources.py's
DumpSource) counts the agreed entries from columns and makes events of the rest only.

Each dump's leading entries become columns first (`columns_of`), one value per entry and no Python
object per entry: the entries of a run (fr_pickle.EntryRun) take their model (fr_read.RunModels:
one event per distinct value of the numbers an event depends on) through `map` over the run's
columns, and from the model their group, key (group, signature, call site; interned across ranks),
sequence number and start time. The columns stop at the first entry that is not plainly a
collective (unusable, no sequence number, one out of range, more than 255 groups, a shape whose
models take their numbers from different columns): from there on the dump is compared event by
event. A group's columns are compared across its members as arrays (a memcmp), as trace_prefix.py
does for binary traces; sends and recvs are never agreed (paired by channel). A rank issuing in a
group whose member list leaves it out, or one outside a group whose columns stop early (it may
join the group past them), makes the prefixes unsafe: `scan` returns None.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from itertools import compress, count, islice, repeat
from operator import truediv

from collcheck.runtime.fr_pickle import EntryRun
from collcheck.runtime.fr_read import MAX_DUMP_ENTRIES, FlightRecorderDump, ModelView
from collcheck.runtime.p2p import is_p2p
from collcheck.runtime.record import CollectiveEvent
from collcheck.runtime.trace_prefix import first_difference
from collcheck.runtime.trace_read import INT_LIMIT

MAX_GROUPS = 255  # group indices fit a byte (bytes.translate picks a group's entries)
_SELECT = [bytes(1 if value == index else 0 for value in range(256)) for index in range(256)]

Key = tuple[str, str, str]


@dataclass(frozen=True)
class DumpColumns:
    """A dump's entries before `limit` as columns (index = entry index)."""

    limit: int
    groups: tuple[str, ...]  # group index -> name
    members: tuple[tuple[int, ...], ...]  # group index -> its member list as the entries give it
    group: bytes  # the entry's group index
    keys: array[int]  # the entry's key (interned across ranks)
    seqs: array[int]
    starts: array[float]  # t_start
    models: tuple[ModelView | CollectiveEvent, ...]  # a run's model, or a plain entry's event
    model: array[int]  # the entry's index into `models`
    row: array[int]  # the entry's row in its shape (a run's)

    def event_at(self, index: int) -> CollectiveEvent | None:
        """The event of the entry at `index`, as the dump's event reader makes it."""
        made = self.models[self.model[index]]
        return made if isinstance(made, CollectiveEvent) else made.event_at(self.row[index])


class _Builder:
    def __init__(self, keys: dict[Key, int]) -> None:
        self.keys = keys
        self.groups: list[str] = []
        self.members: list[tuple[int, ...]] = []
        self.group = bytearray()
        self.key = array("I")
        self.seqs = array("q")
        self.starts = array("d")
        self.models: list[ModelView | CollectiveEvent] = []
        self.model_group: list[int] = []
        self.model_key: list[int] = []
        self.model_seq: list[int] = []  # the model's sequence number where no column holds it
        self.model_start: list[float] = []  # and its start time
        self.model = array("I")
        self.row = array("I")

    def add_model(self, made: ModelView | CollectiveEvent, event: CollectiveEvent) -> int | None:
        """The index of a new model of `event`; None when it has no group index left."""
        if event.group not in self.groups:
            if len(self.groups) >= MAX_GROUPS:
                return None
            self.groups.append(event.group)
            self.members.append(event.group_ranks)
        index = self.groups.index(event.group)
        if self.members[index] != event.group_ranks:
            return None  # member lists that differ within a rank: left to the event reader
        self.models.append(made)
        self.model_group.append(index)
        key = (event.group, event.signature, event.site.short)
        self.model_key.append(self.keys.setdefault(key, len(self.keys)))
        self.model_seq.append(event.seq)
        self.model_start.append(event.t_start)
        return len(self.models) - 1

    def columns(self, limit: int) -> DumpColumns:
        return DumpColumns(
            limit, tuple(self.groups), tuple(self.members), bytes(self.group), self.key, self.seqs,
            self.starts, tuple(self.models), self.model, self.row,
        )  # fmt: skip


def columns_of(dump: FlightRecorderDump, keys: dict[Key, int]) -> DumpColumns:
    """The dump's leading entries as columns, up to the first one that is not plainly a
    collective (see the module's docstring); `keys` interns keys across dumps."""
    built = _Builder(keys)
    limit = 0
    for index, item in dump.items():
        if isinstance(item, EntryRun):
            if index + item.count > MAX_DUMP_ENTRIES:
                break
            taken = _take_run(dump, built, item)
            limit = index + taken
            if taken < item.count:
                break
            continue
        event, _ = dump.entry_event(item)
        if event is None or not 0 < event.seq < INT_LIMIT:
            break
        at = built.add_model(event, event)
        if at is None:
            break
        built.group.append(built.model_group[at])
        built.key.append(built.model_key[at])
        built.seqs.append(event.seq)
        built.starts.append(event.t_start)
        built.model.append(at)
        built.row.append(0)
        limit = index + 1
    return built.columns(limit)


def _take_run(dump: FlightRecorderDump, built: _Builder, run: EntryRun) -> int:
    """Add the run's entries to `built`, as columns; how many were (all, or up to the first
    that is not plainly a collective)."""
    models = dump.run_models(run)
    shapes = len(run.shapes)
    ids: list[array[int]] = []
    seqs: list[array[int]] = []
    starts: list[array[float]] = []
    for kind in range(shapes):
        rows = run.kinds.count(kind)
        keyed = models.keyed(kind)
        key_rows = list(zip(*keyed, strict=True)) if keyed else [()]
        first_rows = dict(zip(reversed(key_rows), range(len(key_rows) - 1, -1, -1), strict=True))
        made: dict[tuple[int, ...], int] = {}
        seq_column = created_column = None
        for number, (key, row) in enumerate(first_rows.items()):
            view = models.model(kind, key, row)
            event = view.event
            if event is None:
                return 0  # unusable or no collective: the event reader says which
            if number == 0:
                seq_column, created_column = view.seq_column, view.created_column
            elif view.seq_column is not seq_column or view.created_column is not created_column:
                return 0
            at = built.add_model(view, event)
            if at is None:
                return 0
            made[key] = at
        model_ids = (
            array("I", map(made.__getitem__, key_rows)) if keyed else array("I", repeat(made[()], rows))
        )
        ids.append(model_ids)
        if seq_column is not None:
            seqs.append(array("q", seq_column[:rows]))
        else:
            seqs.append(array("q", map(built.model_seq.__getitem__, model_ids)))
        if created_column is not None:
            starts.append(array("d", map(truediv, map(float, created_column[:rows]), repeat(1e9))))
        else:
            starts.append(array("d", map(built.model_start.__getitem__, model_ids)))
    kinds = run.kinds
    order = [iter(column) for column in ids]
    entry_models = array("I", map(next, map(order.__getitem__, kinds)))
    seq_order = [iter(column) for column in seqs]
    entry_seqs = array("q", map(next, map(seq_order.__getitem__, kinds)))
    start_order = [iter(column) for column in starts]
    entry_starts = array("d", map(next, map(start_order.__getitem__, kinds)))
    counters = [count() for _ in range(shapes)]
    entry_rows = array("I", map(next, map(counters.__getitem__, kinds)))
    taken = len(kinds)
    if taken and not (min(entry_seqs) > 0 and max(entry_seqs) < INT_LIMIT):
        taken = next(i for i, seq in enumerate(entry_seqs) if not 0 < seq < INT_LIMIT)
    built.group.extend(map(built.model_group.__getitem__, entry_models[:taken]))
    built.key.extend(map(built.model_key.__getitem__, entry_models[:taken]))
    built.seqs.extend(entry_seqs[:taken])
    built.starts.extend(entry_starts[:taken])
    built.model.extend(entry_models[:taken])
    built.row.extend(entry_rows[:taken])
    return taken


@dataclass(frozen=True)
class DumpPrefixes:
    """What `scan` found."""

    agreed: dict[str, int]  # group -> its last sequence number every member issued alike
    open_at: dict[int, dict[str, int]]  # rank -> group -> its first entry past the agreed prefix
    limit: dict[int, int]  # rank -> the end of its columns
    columns: dict[int, DumpColumns]

    def start(self, rank: int) -> int:
        """The first entry of `rank`'s dump that is not part of an agreed prefix."""
        return min([self.limit.get(rank, 0), *self.open_at.get(rank, {}).values()])

    def covered(self, rank: int, group: str, index: int) -> bool:
        return index < self.open_at.get(rank, {}).get(group, self.limit.get(rank, 0))


def scan(traced: frozenset[int], dumps: dict[int, FlightRecorderDump]) -> DumpPrefixes | None:
    """The agreed prefixes of `dumps` (rank -> its dump; every traced rank's); None when they
    cannot be trusted (a rank issuing in a group its member list leaves out)."""
    keys: dict[Key, int] = {}
    columns = {rank: columns_of(dump, keys) for rank, dump in sorted(dumps.items())}
    members: dict[str, set[int]] = {}
    for rank, found in columns.items():
        for name, listed in zip(found.groups, found.members, strict=True):
            if listed and rank not in listed:
                return None
            members.setdefault(name, set()).update({rank, *(set(listed) & traced if listed else traced)})
    unfinished = {rank for rank, found in columns.items() if found.limit < dumps[rank].entry_count()}
    # A rank outside a group whose columns stop early may issue in it past them and join it late:
    # when a group's buckets are compared then depends on the order entries are read in (even
    # another group's agreed prefix moves it), so every entry is read in that order.
    if any(rank not in ranks for name, ranks in members.items() if not is_p2p(name) for rank in unfinished):
        return None
    agreed: dict[str, int] = {}
    open_at: dict[int, dict[str, int]] = {rank: {} for rank in columns}
    for name, ranks in members.items():
        picked: dict[int, tuple[bytes, array[int], array[int]]] = {}
        for rank in sorted(ranks):
            member = columns.get(rank)
            if member is None or name not in member.groups:
                continue
            chosen = member.group.translate(_SELECT[member.groups.index(name)])
            picked[rank] = (
                chosen,
                array("I", compress(member.keys, chosen)),
                array("q", compress(member.seqs, chosen)),
            )
        agree = 0
        if not is_p2p(name) and len(picked) == len(ranks):
            length = min(len(seqs) for _, _, seqs in picked.values())
            reference = next(iter(picked.values()))
            first = reference[2][0] if length else 0
            expected = array("q", range(first, first + length))
            agree = length
            for _, keys_of, seqs in picked.values():
                if seqs[:length] != expected:
                    agree = min(agree, first_difference(seqs, expected, agree))
                if keys_of[:length] != reference[1][:length]:
                    agree = min(agree, first_difference(keys_of, reference[1], agree))
            if agree:
                agreed[name] = first + agree - 1
        for rank, (chosen, _, _) in picked.items():
            past = next(islice(compress(count(), chosen), agree, None), columns[rank].limit)
            open_at[rank][name] = past
    return DumpPrefixes(agreed, open_at, {rank: found.limit for rank, found in columns.items()}, columns)
