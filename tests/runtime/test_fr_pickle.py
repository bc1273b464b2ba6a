"""Flight Recorder pickles decoded without unpickling (fr_pickle.py): the same values as CPython's
unpickler, entries of a loop read as runs, and events from runs equal to events from dicts."""

from __future__ import annotations

import contextlib
import copy
import pickle
import pickletools
import random
import struct
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import REPO, bench_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collcheck.runtime import fr_pickle, fr_read
from collcheck.runtime.fr_pickle import CorruptPickle, EntryRun, decode
from collcheck.runtime.fr_read import materialise
from collcheck.runtime.trace_read import DumpRefused

SEED = REPO / "tests" / "runtime" / "data" / "seed_fr"


def _bench() -> ModuleType:
    return bench_module("flight_recorder_read")


def _expanded(value: Any) -> Any:
    """`value` with every EntryRun of its entries spelled out as dicts."""
    if not isinstance(value, dict) or not isinstance(value.get("entries"), list):
        return value
    entries: list[Any] = []
    for item in value["entries"]:
        if isinstance(item, EntryRun):
            entries.extend(materialise(shape, numbers) for shape, numbers in item.entries())
        else:
            entries.append(item)
    return {**value, "entries": entries}


def _torch_dump(entries: int, ranks: int = 2, diverge: bool = False) -> bytes:
    bench = _bench()
    return bytes(bench.torch_pickle(bench.dump_of(0, ranks, entries, diverge)))


def test_the_bench_writes_dumps_byte_for_byte_as_torch_does() -> None:
    # Real torch 2.13 gloo dumps (`_dump_fr_trace()`), decoded and written again.
    for path in sorted(SEED.iterdir()):
        data = path.read_bytes()
        assert _bench().torch_pickle(pickle.loads(data)) == data


def test_a_loops_entries_become_one_run_with_the_values_cpython_gives() -> None:
    data = _torch_dump(3000)
    decoded = decode(data)
    runs = [item for item in decoded["entries"] if isinstance(item, EntryRun)]
    # Four collectives per step from three sites, interleaved: runs, not one dict per entry.
    assert len(decoded["entries"]) < 10 and sum(run.count for run in runs) > 2990
    assert all(len(run.shapes) <= 8 for run in runs)
    assert _expanded(decoded) == pickle.loads(data)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pythons_own_pickles_decode_to_the_same_values(protocol: int) -> None:
    dump = pickle.loads(_torch_dump(1200))
    dump["entries"] = [copy.deepcopy(entry) for entry in dump["entries"]]  # frames shared no more
    dump["entries"][700]["frames"] = dump["entries"][3]["frames"]  # a memo slot filled in a run, read later
    data = pickle.dumps(dump, protocol=protocol)
    assert _expanded(decode(data)) == pickle.loads(data)
    for path in sorted(SEED.iterdir()):
        assert _expanded(decode(path.read_bytes())) == pickle.loads(path.read_bytes())


def _entry(key_slot: int) -> bytes:
    return b"}(h" + bytes((key_slot,)) + b"K\x01u"


def test_a_memo_slot_written_again_is_read_anew_by_the_entries_after_it() -> None:
    # Five entries {"a": 1} read by one skeleton, then slot 1 rebound to "b": the next entries
    # are {"b": 1}, as CPython reads them.
    head = b"\x80\x02}(X\x07\x00\x00\x00entriesq\x00](X\x01\x00\x00\x00aq\x010"
    rebind = b"X\x01\x00\x00\x00bq\x010"
    data = head + _entry(1) * 5 + rebind + _entry(1) * 3 + b"eu."
    assert _expanded(decode(data)) == pickle.loads(data) == {"entries": [{"a": 1}] * 5 + [{"b": 1}] * 3}


@pytest.mark.parametrize(
    ("opcode", "said"),
    [
        (b"cposix\nsystem\n", "refers to posix.system"),
        (b"X\x02\x00\x00\x00osX\x06\x00\x00\x00system\x93", "refers to os.system"),
        (b"N)R", "uses REDUCE"),
        (b"}}b", "uses BUILD"),
        (b"N)\x81", "uses NEWOBJ"),
        (b"\x82\x01", "uses EXT1"),
        (b"Q", "persistent ids"),
    ],
)
def test_every_opcode_that_calls_imports_or_names_is_refused(opcode: bytes, said: str) -> None:
    data = b"\x80\x02}(X\x07\x00\x00\x00entries](" + opcode + b"eu."
    with pytest.raises(DumpRefused, match=said):
        decode(data)


def test_malformed_pickles_are_corrupt_not_tracebacks() -> None:
    data = _torch_dump(200)
    rng = random.Random(7)
    for _ in range(300):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(3, len(mutated))] = rng.randrange(256)
        cut = bytes(mutated[: rng.randrange(3, len(mutated) + 1)]) if rng.random() < 0.3 else bytes(mutated)
        with contextlib.suppress(CorruptPickle, DumpRefused):  # anything else fails the test
            decode(cut)


def test_entries_that_share_long_beginnings_with_many_skeletons_cost_a_bounded_time() -> None:
    # Each entry a skeleton of its own (its long text differs in the last bytes): without a bound,
    # every entry would be compared with every skeleton learnt (quadratic).
    text = "x" * 4_000
    entries = [{"k": text[:-4] + f"{index:04d}"} for index in range(3000)]
    data = pickle.dumps({"version": "2.10", "entries": entries}, protocol=4)
    started = time.perf_counter()
    plain = decode(data, runs=False)
    plain_s = time.perf_counter() - started
    started = time.perf_counter()
    decoded = decode(data)
    assert time.perf_counter() - started < 10 * plain_s + 2.0
    assert _expanded(decoded) == plain == pickle.loads(data)


def fr_pickle_dump(value: Any) -> bytes:
    """`value` as torch writes it (strings memoized by value)."""
    return bytes(_bench().torch_pickle(value))


def _mutated_torch_dump(rng: random.Random) -> bytes:
    dump = _bench().dump_of(1, 2, 400, True)
    entries = dump["entries"]
    for _ in range(rng.randint(1, 6)):
        entry = entries[rng.randrange(len(entries))]
        field = rng.choice(sorted(entry))
        entry[field] = rng.choice([None, 0, -1, 2**62 + 3, 2**40, "x", [["a"]], [[3, 4]], True, ("0", "g")])
    return fr_pickle_dump(dump)


def test_events_from_runs_equal_events_from_one_dict_per_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(2028)
    for case in range(12):
        path = tmp_path / f"nccl_trace_rank_{case}"
        path.write_bytes(_mutated_torch_dump(rng))
        fast = fr_read.load_flight_recorder(str(path))
        with monkeypatch.context() as patched:
            patched.setattr(fr_read, "decode", lambda data, runs=True: fr_pickle.decode(data, False))
            plain = fr_read.load_flight_recorder(str(path))
        assert fast is not None and plain is not None
        assert [repr(event) for event in fast.events] == [repr(event) for event in plain.events]
        assert fast.problems == plain.problems
        assert list(fr_read.flight_recorder_events(str(path))) == fast.events


def test_a_shared_number_column_is_not_a_struct_surprise() -> None:
    # Numbers of every width torch and Python write: BININT1/2, BININT (negative), LONG1 of 8 bytes.
    values = [0, 255, 256, 65535, 65536, -5, 2**40, -(2**40)]
    entries = [{"collective_seq_id": seq, "n": values[seq % len(values)]} for seq in range(1, 400)]
    data = fr_pickle_dump({"entries": entries})
    assert _expanded(decode(data)) == pickle.loads(data)
    assert struct.calcsize("<q") == 8


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_an_empty_entry_before_a_longer_one_is_not_taken_for_its_beginning(protocol: int) -> None:
    # The skeleton learnt from `{}` (EMPTY_DICT, MEMOIZE) matches the first bytes of the next
    # entry too; read as a `{}` there, the next entry's key and value were added to the list.
    for dump in (
        {"entries": [{}, {"a": 1}], "rank": 0},
        {"version": "2.10", "entries": [{"a": 1}, {}, {"a": 2}, {"a": 3, "b": "x"}, {}], "rank": 1},
    ):
        data = pickle.dumps(dump, protocol=protocol)
        assert _same(_expanded(decode(data)), pickle.loads(data))


def _same(left: Any, right: Any) -> bool:
    """Equal values of equal types all the way down (`==` holds for 1, 1.0 and True alike)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, float):
        return struct.pack("<d", left) == struct.pack("<d", right)
    if isinstance(left, dict):
        return list(left) == list(right) and all(
            _same(key, other) and _same(left[key], right[other])
            for key, other in zip(left, right, strict=True)
        )
    if isinstance(left, (list, tuple)):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    return bool(left == right)


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.sampled_from(["", "a", "allreduce", "nccl:all_reduce", "/x/torch/y.py", "é"])
    | st.text(max_size=12)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner)
        | st.tuples(inner, inner, inner)
        | st.lists(inner, max_size=5).map(tuple)
        | st.dictionaries(st.sampled_from(["a", "b", "line", "name", "frames"]), inner, max_size=4)
    ),
    max_leaves=12,
)
_KEYS = st.sampled_from(["collective_seq_id", "state", "frames", "input_sizes", "a", "b", "", "é"])


def _varied(value: Any, rng: random.Random) -> Any:
    """`value` with its integers (not bools) changed: entries of one loop differ in their numbers."""
    if type(value) is int:
        return rng.choice([value, value + 1, rng.randrange(-(2**40), 2**40), rng.randrange(256)])
    if isinstance(value, dict):
        return {key: _varied(item, rng) for key, item in value.items()}
    if isinstance(value, list):
        return [_varied(item, rng) for item in value]
    if isinstance(value, tuple):
        return tuple(_varied(item, rng) for item in value)
    return value


@st.composite
def _fr_shaped(draw: st.DrawFn) -> Any:
    """A dict with an `entries` list whose entries are a few layouts (an empty dict among them
    often) repeated with their numbers changed, and other keys beside it, as FR dumps are."""
    layouts = draw(st.lists(st.dictionaries(_KEYS, _VALUES, max_size=5), min_size=1, max_size=4))
    order = draw(st.lists(st.integers(0, len(layouts) - 1), max_size=40))
    rng = draw(st.randoms(use_true_random=False))
    entries = [_varied(layouts[index], rng) for index in order]
    if draw(st.booleans()):  # an entry shared by two places of the list (one memo slot)
        entries = entries + entries[:1]
    other = draw(st.dictionaries(st.sampled_from(["version", "pg_config", "rank", "x"]), _VALUES, max_size=3))
    keys_first = draw(st.booleans())
    return {**other, "entries": entries} if keys_first else {"entries": entries, **other}


@pytest.mark.parametrize("protocol", [2, 4, 5])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dump=_fr_shaped())
def test_the_decoder_agrees_with_cpythons_unpickler(protocol: int, dump: Any) -> None:
    data = pickle.dumps(dump, protocol=protocol)
    expected = pickle.loads(data)
    assert _same(decode(data, runs=False), expected)
    assert _same(_expanded(decode(data)), expected)


def test_a_frame_between_a_one_key_entrys_dict_and_its_key_does_not_end_the_entry() -> None:
    # Protocol 4 starts a FRAME before any object once 64 KiB are written, also before the key of a
    # one-key dict: `{}` MEMOIZE FRAME BINGET 'k' ... SETITEM. The `{}` entry's skeleton must not
    # take the dict there for a whole empty entry.
    framed_there = 0
    for pad in range(8):
        entries = [{"pad": "x" * pad}] + [{} if index % 2 else {"k": index} for index in range(20_000)]
        data = pickle.dumps({"version": "2.10", "entries": entries}, protocol=4)
        ops = [op.name for op, _, _ in pickletools.genops(data)]
        framed_there += sum(
            1
            for at in range(2, len(ops) - 1)
            if ops[at - 2 : at + 2] == ["EMPTY_DICT", "MEMOIZE", "FRAME", "BINGET"]
        )
        assert _same(_expanded(decode(data)), pickle.loads(data))
    assert framed_there  # the case this test is for happened


# Dumps on which the decoder and CPython disagreed (found by the property test above): an empty
# dict inside an entry, at the entries list's MARK level (a one-key dict is built by SETITEM, a
# 3-tuple by TUPLE3, neither with a MARK), was taken for the start of an entry and read as a run.
_INNER_EMPTY_DICTS = [
    {
        "entries": [
            {"collective_seq_id": ({}, {}, {"name": "Rl", "a": 518, "line": 6.2568102309328136e16})},
            {"collective_seq_id": (None, [200], [-999, 0])},
            {"collective_seq_id": (None, [192], [210, 0])},
            {},
            {"collective_seq_id": (None, [1], [1, 89])},
            {"collective_seq_id": ({}, {}, {"name": "Rl", "a": 1329, "line": 6.2568102309328136e16})},
        ],
        "version": ("", None, 5.0262546043455544e16),
    },
    {"entries": [{}, {"collective_seq_id": ({}, {}, {"a": 0, "b": 0, "line": 2**63})}], "version": None},
    {"entries": [{}, {"collective_seq_id": (None, {}, {"a": 0, "b": 0, "line": 2**63})}], "version": None},
    {"entries": [{}, {"k": {}}, {}, {"k": ({},)}, {"k": [{}]}, {}], "rank": 0},
]


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("case", range(len(_INNER_EMPTY_DICTS)))
def test_an_empty_dict_inside_an_entry_is_not_taken_for_an_entry(protocol: int, case: int) -> None:
    data = pickle.dumps(_INNER_EMPTY_DICTS[case], protocol=protocol)
    assert _same(_expanded(decode(data)), pickle.loads(data))


# Valid pickles whose entries list holds values that are not dicts, built from dicts without a
# MARK (TUPLE1-3), or whose `entries` is not the top-level one: whatever the decoder takes for a
# run there, the values must be CPython's.
_SHARED_LIST = [{"k": 1}, {"k": 2}, {"k": 3}]
_NOT_DICT_ENTRIES = [
    {"entries": [({}, {})], "rank": 0},
    {"entries": [({}, {}, {}), {}, ({},)], "rank": 0},
    {"entries": [{}, {}, ({}, {}), {}, {}]},
    {"x": 0, "a": {"entries": [{}, {}, {"k": 1}, {"k": 2}]}},
    {"entries": [{"k": 1}, {"k": 2}, {"k": 3}], "x": 0},
    {"entries": _SHARED_LIST, "again": _SHARED_LIST},  # the entries list named by its memo slot
]


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("case", range(len(_NOT_DICT_ENTRIES)))
def test_entries_that_are_not_dicts_decode_as_cpython_reads_them(protocol: int, case: int) -> None:
    data = pickle.dumps(_NOT_DICT_ENTRIES[case], protocol=protocol)
    assert _same(_expanded(decode(data)), pickle.loads(data))
    assert _same(decode(data, runs=False), pickle.loads(data))
