"""An in-memory stand-in for the c10d store, shared by Monitors in one process (no torch).

It implements the calls the Monitor makes, with the real store's blocking rules: `wait` blocks up
to its timeout and then raises a timeout error; `get` and `multi_get` of a missing key raise (the
real ones would block), so a protocol bug that reads a key before it exists fails the test.
`compare_set` answers a missing key with the expected value, as c10d's stores do. `calls` counts
the requests by method and `written` the bytes of keys and values written, for traffic tests.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta


class FakeStore:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.sets: Counter[str] = Counter()  # how often each key was written (set or multi_set)
        self.calls: Counter[str] = Counter()  # requests by method
        self.reads: Counter[str] = Counter()  # how often each key was read (get, multi_get, compare_set)
        self.written = 0  # bytes of keys and values written
        self._changed = threading.Condition()

    def _put(self, key: str, value: str | bytes) -> None:
        self.data[key] = value.encode() if isinstance(value, str) else value
        self.sets[key] += 1
        self.written += len(key) + len(self.data[key])

    def set(self, key: str, value: str | bytes) -> None:
        self.calls["set"] += 1
        with self._changed:
            self._put(key, value)
            self._changed.notify_all()

    def multi_set(self, keys: list[str], values: list[str]) -> None:
        self.calls["multi_set"] += 1
        with self._changed:
            for key, value in zip(keys, values, strict=True):
                self._put(key, value)
            self._changed.notify_all()

    def get(self, key: str) -> bytes:
        self.calls["get"] += 1
        return self._get(key)

    def _get(self, key: str) -> bytes:
        with self._changed:
            if key not in self.data:
                raise AssertionError(f"get of missing key {key} would block")
            self.reads[key] += 1
            return self.data[key]

    def multi_get(self, keys: list[str]) -> list[bytes]:
        self.calls["multi_get"] += 1
        return [self._get(key) for key in keys]

    def check(self, keys: list[str]) -> bool:
        self.calls["check"] += 1
        with self._changed:
            return all(key in self.data for key in keys)

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        self.calls["wait"] += 1
        with self._changed:
            if not self._changed.wait_for(lambda: all(k in self.data for k in keys), timeout.total_seconds()):
                raise RuntimeError(f"wait timeout after {timeout}, keys: {keys}")

    def add(self, key: str, amount: int) -> int:
        self.calls["add"] += 1
        with self._changed:
            value = int(self.data.get(key, b"0")) + amount
            self.data[key] = str(value).encode()
            self._changed.notify_all()
            return value

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        self.calls["compare_set"] += 1
        with self._changed:
            current = self.data.get(key)
            if (current is None and expected == "") or current == expected.encode():
                if current != desired.encode():
                    self._put(key, desired)
                    self._changed.notify_all()  # a real store wakes the key's waiters too
                return desired.encode()
            if current is None:
                return expected.encode()
            self.reads[key] += 1
            return current

    def append(self, key: str, value: str) -> None:
        self.calls["append"] += 1
        with self._changed:
            self._put(key, self.data.get(key, b"") + value.encode())
            self._changed.notify_all()

    def delete_key(self, key: str) -> bool:
        self.calls["delete_key"] += 1
        with self._changed:
            return self.data.pop(key, None) is not None

    def head(self, channel: str) -> int:
        """How many of a channel's records the publisher's chain covers (`rh/<channel>`), 0 before."""
        raw = self.data.get(f"rh/{channel}")
        return int(raw.split(b" ")[0]) if raw else 0

    def value(self, key: str) -> int:
        """A counter's value, 0 when never added to."""
        return int(self.data.get(key, b"0"))


class ReportWriter:
    """Collects what a Monitor writes; `reports` are its (kind, severity, text) findings."""

    def __init__(self) -> None:
        self.rows: list[dict[str, object]] = []

    def write(self, data: dict[str, object]) -> None:
        self.rows.append(data)

    def close(self) -> None:
        pass

    @property
    def reports(self) -> list[tuple[object, object, object]]:
        return [(r["kind"], r["severity"], r["text"]) for r in self.rows if r.get("ev") == "report"]
