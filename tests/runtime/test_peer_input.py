"""Readers of another process's output never turn checking off (issue 27, items 10 and 12): a
malformed line in a peer's trace or a damaged published position is skipped, the stall report is
still written, and the node relay's store listens on loopback only."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_store import FakeStore, ReportWriter

from collcheck.runtime import verify_protocol, verify_report
from collcheck.runtime.record import CallSite, CollectiveEvent, trace_file_name
from collcheck.runtime.verify import Monitor, MonitorConfig
from collcheck.runtime.verify_protocol import Position, fingerprint
from collcheck.runtime.verify_stall import caught_up


def _event(rank: int, seq: int, line: int) -> CollectiveEvent:
    return CollectiveEvent(
        rank=rank,
        group="0",
        group_ranks=(0, 1),
        seq=seq,
        op="all_reduce",
        shapes=((4,),),
        dtypes=("float32",),
        reduce_op="sum",
        site=CallSite("train.py", line),
    )


def _write_trace(path: Path, rows: list[object]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


MALFORMED_ROWS: list[object] = [
    {"ev": "coll", "rank": 1},  # the line of the report: no group, no seq
    {"ev": "coll", "rank": "x", "group": "0", "seq": 2, "op": "barrier"},
    {"ev": "coll", "rank": 1, "group": "0", "seq": [3], "op": "barrier"},
    {"ev": "done", "group": "0", "seq": "later"},
    {"ev": "coll", "rank": 1, "group": "0", "seq": 10**400, "op": "barrier"},
]


@pytest.mark.parametrize("bad", MALFORMED_ROWS, ids=range(len(MALFORMED_ROWS)))
def test_a_malformed_trace_line_is_skipped_when_catching_up(tmp_path: Path, bad: object) -> None:
    trace = tmp_path / trace_file_name(1)
    _write_trace(trace, [_event(1, 1, 9).to_json(), bad, _event(1, 2, 11).to_json()])
    position = caught_up(1, None, str(trace))
    assert position is not None and position.issued == {"0": 2}
    assert position.last is not None and position.last["site"] == "train.py:11"


def test_only_malformed_lines_leave_the_position_as_it_was(tmp_path: Path) -> None:
    trace = tmp_path / trace_file_name(1)
    _write_trace(trace, MALFORMED_ROWS)
    published = Position(1, 5.0, issued={"0": 1})
    assert caught_up(1, published, str(trace)) is published


def test_a_position_with_an_extra_key_is_read() -> None:
    data = json.loads(Position(1, 5.0, issued={"0": 3}).to_json())
    data["added_by_a_newer_writer"] = True
    position = Position.from_json(json.dumps(data))
    assert position.rank == 1 and position.issued == {"0": 3}


@pytest.mark.parametrize(
    "raw",
    [
        "[]",
        "{}",
        '{"rank": 1}',
        '{"rank": "one", "t": 1.0}',
        '{"rank": 1, "t": 1.0, "issued": [1]}',
        '{"rank": 1, "t": 1.0, "inflight": [{"g": "0"}]}',
        '{"rank": 1, "t": 1.0, "inflight": [7]}',
        '{"rank": 1, "t": 1.0, "last": {"d": 1, "g": "0", "site": "x", "r": 1, "n": 1}}',
    ],
)
def test_a_damaged_position_is_a_value_error(raw: str) -> None:
    with pytest.raises(ValueError):
        Position.from_json(raw)


def test_a_stall_report_is_written_when_a_peer_trace_and_position_are_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Ended(BaseException):  # like the os._exit it stands for: no handler catches it
        pass

    def finish(self: verify_report.Reporter, kind: str | None, text: str | None, echo: bool) -> None:
        raise Ended(kind)

    monkeypatch.setattr(verify_report, "ABORT_LINGER_S", 0.0)
    monkeypatch.setattr(verify_report.Reporter, "finish", finish)
    store = FakeStore()
    store.set("pos/1", b'{"rank": 1, "t": 0.0, "inflight": [{"g": 5}]}')  # damaged: no usable fields
    _write_trace(tmp_path / trace_file_name(1), [{"ev": "coll", "rank": 1}])

    class Writer(ReportWriter):
        path = str(tmp_path / trace_file_name(0))

    writer = Writer()
    config = MonitorConfig(rank=0, verify=True, strict=False, timeout_s=5.0, world_size=2)
    monitor = Monitor(config, writer=writer, store_factory=None)  # type: ignore[arg-type]
    monitor.store = monitor.sync_store = store
    event = _event(0, 1, 12)
    monitor.issued(event, check=False)
    monitor.ledger.publish_members(store)
    with pytest.raises(Ended):
        monitor.watchdog.report_stall(verify_protocol.blocked_fingerprint(event), store)
    kinds = [report[0] for report in writer.reports]
    assert kinds[0] == "stall" and "degraded" not in kinds
    assert "rank 1: never reported a position" in str(writer.reports[0][2])
    assert monitor.store is store  # checking stays on


def _listening_addresses(port: int) -> set[str]:
    """Local addresses listening on `port` (Linux /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/net/tcp")
def test_the_node_relay_store_listens_on_loopback_only() -> None:
    from collcheck.runtime.relay import connect_node_store, serve_node_store

    server: Any = serve_node_store(0)
    port = int(server.port)
    assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1, nothing on 0.0.0.0 or ::
    client = connect_node_store(port)
    client.set("beat", "1")
    assert server.get("beat") == b"1"
    assert fingerprint(_event(0, 1, 3))["site"] == "train.py:3"


def test_the_node_relay_store_takes_a_given_port() -> None:
    from collcheck.runtime.relay import serve_node_store

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server: Any = serve_node_store(port)
    assert int(server.port) == port
