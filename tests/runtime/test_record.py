"""The tracer's hot path pieces, in process: line encoding, the trace writer and call-site caching."""

from __future__ import annotations

import errno
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from collcheck.runtime import hook
from collcheck.runtime.record import (
    CallSite,
    CollectiveEncoder,
    CollectiveEvent,
    DoneEvent,
    TraceWriter,
    read_trace,
)


def _dumps(data: dict[str, object]) -> str:
    return json.dumps(data, separators=(",", ":")) + "\n"


EVENTS = [
    CollectiveEvent(
        rank=3,
        group="0",
        group_ranks=(0, 1, 2, 3),
        seq=7,
        op="all_reduce",
        shapes=((1024,), (2, 3)),
        dtypes=("float32", "bfloat16"),
        reduce_op="sum",
        site=CallSite("/w/train.py", 13, "sync", ("/w/train.py:13 in sync", "/w/train.py:20 in <module>")),
        thread="MainThread",
        t_start=1795965684.2666335,
        group_desc="default_pg",
    ),
    CollectiveEvent(
        rank=3,
        group="5:p2p",
        group_ranks=(1, 3),
        seq=1,
        op="send",
        shapes=(),
        dtypes=("int64",),
        root=1,
        site=CallSite('/w/dätä "q".py', 2, "<module>", ('/w/dätä "q".py:2 in <module>',), via="main-thread"),
        thread="Thread-1 (worker)",
        t_start=100.0,
    ),
    CollectiveEvent(rank=3, group="0", group_ranks=(0, 1, 2, 3), seq=8, op="barrier", shapes=(), dtypes=()),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda event: event.op)
def test_encoded_lines_equal_json_dumps_of_the_event(event: CollectiveEvent) -> None:
    encoder = CollectiveEncoder(event.rank)
    for _ in range(2):  # cold, then from the cached pieces
        group, line = encoder.coll(event)
        assert line == _dumps(event.to_json(group.gid))
        assert "group_ranks" not in line and "group_desc" not in line
        definition = {"gid": group.gid, "group": event.group, "ranks": list(event.group_ranks)}
        assert group.text == _dumps({"ev": "group", **definition, "desc": event.group_desc})
    done = DoneEvent(event.group, event.seq, 1795965684.5, ok=False)
    assert encoder.done(done.group, done.seq, done.t_end, done.ok) == _dumps(done.to_json())


def test_encoder_numbers_each_member_list_once() -> None:
    encoder = CollectiveEncoder(0)
    first = CollectiveEvent(0, "0:p2p", (0, 1), 1, "send", (), ())
    second = CollectiveEvent(0, "0:p2p", (0, 2), 2, "send", (), ())
    third = CollectiveEvent(0, "0:p2p", (0, 1), 3, "recv", (), ())
    gids = [encoder.coll(event)[0].gid for event in (first, second, third)]
    assert gids == [1, 2, 1]  # a send's members change with its peer; a list met again keeps its gid
    assert json.loads(encoder.coll(second)[0].text)["ranks"] == [0, 2]
    assert encoder.members(2) == ((0, 2), "") and encoder.members(3) is None
    # The native kernel asks for the gid of its groups here: one numbering for the whole file.
    assert encoder.group("1", (0, 1, 2), "tp").gid == 3 and encoder.group("1", (0, 1, 2), "tp").gid == 3


def test_writer_writes_whole_lines_and_ignores_writes_after_close(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "trace.jsonl"
    writer = TraceWriter(str(path))
    writer.write({"ev": "header", "argv": ["ünï"]})
    writer.write_coll(*CollectiveEncoder(0).coll(EVENTS[2]))
    writer.close()
    writer.write({"ev": "late"})
    writer.close()
    rows = read_trace(str(path))
    assert [row["ev"] for row in rows] == ["header", "group", "coll"]
    assert rows[0]["argv"] == ["ünï"]


def test_writer_puts_each_group_line_once_before_the_first_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    writer, encoder = TraceWriter(str(path)), CollectiveEncoder(3)
    writer.defer_line('{"ev":"done","group":"0","seq":6}\n')
    for event in (EVENTS[0], EVENTS[1], replace(EVENTS[0], seq=8), EVENTS[1]):
        writer.write_coll(*encoder.coll(event))
    writer.close()
    rows = read_trace(str(path))
    assert [(row["ev"], row.get("gid")) for row in rows] == [
        ("done", None),  # a deferred line still goes first
        ("group", 1),
        ("coll", 1),
        ("group", 2),
        ("coll", 2),
        ("coll", 1),
        ("coll", 2),
    ]


def test_a_group_line_whose_write_failed_goes_out_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "trace.jsonl"
    writer, encoder = TraceWriter(str(path)), CollectiveEncoder(3)
    writer.write({"ev": "header"})
    real_write, failures = os.write, [1]

    def full_once(fd: int, data: bytes) -> int:
        if failures:
            failures.pop()
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_once)  # the writer's only os.write here
    writer.write_coll(*encoder.coll(EVENTS[0]))  # lost, with its group line
    writer.write_coll(*encoder.coll(replace(EVENTS[0], seq=8)))
    writer.close()
    rows = read_trace(str(path))
    assert [(row["ev"], row.get("seq")) for row in rows if row["ev"] != "lost"] == [
        ("header", None),
        ("group", None),
        ("coll", 8),
    ]
    assert writer.lost == 2


def _site_here() -> CallSite:
    return hook.call_site()  # SITE_LINE


def test_call_site_is_cached_per_stack_and_right() -> None:
    first, second = _site_here(), _site_here()
    assert first is second  # one CallSite (and one encoded site) per call stack
    assert first.file == __file__ and first.func == "_site_here"
    line = next(
        i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# SITE_LINE" in text
    )
    assert first.line == line
    assert first.stack[1].startswith(f"{__file__}:") and first.stack[1].endswith(
        " in test_call_site_is_cached_per_stack_and_right"
    )
    assert len(first.stack) <= hook.STACK_DEPTH
    other = (lambda: hook.call_site())()
    assert other is not first and other.line != first.line
    assert json.loads(first.encoded) == json.loads(json.dumps(first.to_json()))


def test_deferred_lines_go_out_before_the_next_line_or_at_flush(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(str(path))
    writer.defer_line('{"ev":"done","seq":1}\n')
    assert path.read_text() == ""  # not written on its own
    writer.write_line('{"ev":"coll","seq":2}\n')  # one os.write carries both, in order
    assert [row["seq"] for row in read_trace(str(path))] == [1, 2]
    writer.defer_line('{"ev":"done","seq":2}\n')
    writer.flush()  # the monitor's tick
    writer.defer_line('{"ev":"done","seq":3}\n')
    writer.close()  # stopping writes what is left
    assert [row["seq"] for row in read_trace(str(path))] == [1, 2, 2, 3]
