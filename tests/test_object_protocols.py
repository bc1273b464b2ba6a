"""Object protocols (static/object_protocols.py) on small programs: `@property` getters run when
read, `@contextmanager` generators run around the `with` body; and the shapes left as before."""

from __future__ import annotations

from pathlib import Path

from collcheck.api import check_paths
from collcheck.config import load_settings

HEADER = "from contextlib import contextmanager\nimport torch\nimport torch.distributed as dist\n\n"

AHEAD = """
@contextmanager
def ahead():
    if dist.get_rank() == 0:
        dist.barrier()
    yield
    if dist.get_rank() != 0:
        dist.barrier()
"""


def _codes(tmp_path: Path, source: str) -> set[tuple[int, str]]:
    path = tmp_path / "train.py"
    path.write_text(HEADER + source, encoding="utf-8")
    settings = load_settings([path]).with_overrides(jobs=1, cache=False)
    result = check_paths([path], settings)
    assert not result.errors
    return {(f.location.line - HEADER.count("\n"), f.code) for f in result.findings}


def test_a_body_that_communicates_runs_between_the_halves_of_the_generator(tmp_path: Path) -> None:
    # The caller has no variable of its own: its (empty) variables still resume after the yield.
    source = AHEAD + "\n\ndef prepare():\n    with ahead():\n        dist.all_reduce(torch.ones(1))\n"
    assert _codes(tmp_path, source) == {(12, "CC001")}


def test_a_quiet_body_between_the_halves_is_one_barrier_on_every_rank(tmp_path: Path) -> None:
    source = (
        AHEAD + "\n\ndef prepare():\n    with ahead():\n        x = 1\n    dist.all_reduce(torch.ones(x))\n"
    )
    assert _codes(tmp_path, source) == set()


def test_a_yield_inside_a_loop_is_run_as_a_plain_helper(tmp_path: Path) -> None:
    # Not a context manager Python accepts twice; the generator runs before the body, as before:
    # both ranks issue one barrier, then the all-reduce.
    source = (
        "\n@contextmanager\ndef looped():\n    for _ in range(1):\n        yield\n"
        "    if dist.get_rank() == 0:\n        dist.barrier()\n    else:\n        dist.barrier()\n"
        "\n\ndef prepare():\n    with looped():\n        dist.all_reduce(torch.ones(1))\n"
    )
    assert _codes(tmp_path, source) == set()


def test_nested_context_managers_of_one_generator(tmp_path: Path) -> None:
    source = (
        "\n@contextmanager\ndef synced():\n    dist.barrier()\n    yield\n    dist.barrier()\n"
        "\n\ndef prepare(t):\n    with synced():\n        with synced():\n            dist.all_reduce(t)\n"
        "        if dist.get_rank() == 0:\n            dist.broadcast(t, 0)\n"
    )
    # the extra broadcast itself: sequences are aligned (alignment.py), so rank 0's broadcast is
    # the call rank 1 does not issue, not a mismatch with the outer `with`'s exit barrier
    assert _codes(tmp_path, source) == {(14, "CC001")}


def test_a_property_with_a_setter_reads_through_its_getter(tmp_path: Path) -> None:
    source = (
        "\nclass Stage:\n    def __init__(self):\n        self._rank = dist.get_rank()\n"
        "\n    @property\n    def leads(self):\n        return self._rank == 0\n"
        "\n    @leads.setter\n    def leads(self, value):\n        self._rank = 0\n"
        "\n    def step(self, t):\n        if self.leads:\n            dist.all_reduce(t)\n"
    )
    assert _codes(tmp_path, source) == {(16, "CC001")}


def test_an_attribute_that_is_no_property_is_not_run(tmp_path: Path) -> None:
    # `leads` is a getter of another class; `Stage.leads` is a plain attribute of no rank.
    source = (
        "\nclass Other:\n    @property\n    def leads(self):\n        return dist.get_rank() == 0\n"
        "\n\nclass Stage:\n    def __init__(self):\n        self.leads = False\n"
        "\n    def step(self, t):\n        if self.leads:\n            dist.all_reduce(t)\n"
    )
    assert _codes(tmp_path, source) == set()
