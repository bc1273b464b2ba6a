"""Inline suppressions: `# collcheck: ignore[CODES]` on the flagged line or on the `def` line, bare
`# collcheck: ignore`, and suppressions that suppress nothing reported in `unused_suppressions`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from collcheck.api import analyze_text
from collcheck.cli import main
from collcheck.config import Settings

HEADER = "import torch.distributed as dist\n\n\n"  # the function starts at line 4


def barrier_under_rank0(barrier_comment: str = "", def_comment: str = "") -> str:
    """CC001 at line 6, column 9."""
    return (
        HEADER
        + f"def f(rank):{def_comment}\n"
        + "    if rank == 0:\n"
        + f"        dist.barrier(){barrier_comment}\n"
    )


def check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, source: str, *options: str, name: str = "mod.py"
) -> tuple[int, list[tuple[str, int]], list[dict[str, Any]]]:
    path = tmp_path / name
    path.write_text(source)
    code = main(["check", "--no-cache", "--format", "json", *options, str(path)])
    data = json.loads(capsys.readouterr().out)
    assert data["errors"] == []
    for item in data["unused_suppressions"]:
        assert item["path"] == str(path)
    unused = [{"line": item["line"], "codes": item["codes"]} for item in data["unused_suppressions"]]
    return code, [(f["code"], f["line"]) for f in data["findings"]], unused


def test_unsuppressed_control(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert check(capsys, tmp_path, barrier_under_rank0()) == (1, [("CC001", 6)], [])


@pytest.mark.parametrize(
    ("barrier_comment", "def_comment"),
    [
        ("  # collcheck: ignore[CC001]", ""),
        ("  # collcheck: ignore[cc001]", ""),
        ("  #collcheck:ignore[ CC001 ]", ""),
        ("  # collcheck: ignore[CC003, CC001]", ""),  # CC003 unused: see below
        ("  # collcheck: ignore", ""),
        ("", "  # collcheck: ignore[CC001]"),
        ("", "  # collcheck: ignore"),
        ("  # rank 0 writes the file  # collcheck: ignore[CC001]", ""),
    ],
    ids=[
        "line",
        "line-lowercase-code",
        "line-no-spaces",
        "line-two-codes",
        "line-bare",
        "def",
        "def-bare",
        "after-other-text",
    ],
)
def test_suppression_hides_the_finding(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, barrier_comment: str, def_comment: str
) -> None:
    code, found, unused = check(capsys, tmp_path, barrier_under_rank0(barrier_comment, def_comment))

    assert found == []
    assert code == 0
    expected_unused = [{"line": 6, "codes": ["CC003"]}] if "CC003" in barrier_comment else []
    assert unused == expected_unused


def test_def_suppression_covers_only_that_function(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = barrier_under_rank0(def_comment="  # collcheck: ignore[CC001]") + (
        "\n\ndef g(rank, t):\n    if rank == 0:\n        dist.all_reduce(t)\n"
    )

    code, found, unused = check(capsys, tmp_path, source)

    assert (code, found, unused) == (1, [("CC001", 11)], [])


def test_decorated_def_suppression(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = HEADER + (
        "@staticmethod\ndef f(rank):  # collcheck: ignore[CC001]\n    if rank == 0:\n        dist.barrier()\n"
    )

    assert check(capsys, tmp_path, source) == (0, [], [])


def test_method_def_suppression(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = HEADER + (
        "class Trainer:\n"
        "    def save(self):  # collcheck: ignore[CC001]\n"
        "        if dist.get_rank() == 0:\n"
        "            dist.barrier()\n"
        "\n"
        "    def step(self, t):\n"
        "        if dist.get_rank() == 0:\n"
        "            dist.all_reduce(t)\n"
    )

    code, found, unused = check(capsys, tmp_path, source)

    assert (code, found, unused) == (1, [("CC001", 11)], [])


def test_wrong_code_keeps_the_finding_and_is_unused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = barrier_under_rank0("  # collcheck: ignore[CC002]")

    assert check(capsys, tmp_path, source) == (1, [("CC001", 6)], [{"line": 6, "codes": ["CC002"]}])


def test_suppression_on_another_line_does_not_apply(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = HEADER + "def f(rank):\n    if rank == 0:  # collcheck: ignore[CC001]\n        dist.barrier()\n"

    assert check(capsys, tmp_path, source) == (1, [("CC001", 6)], [{"line": 5, "codes": ["CC001"]}])


def test_comment_on_the_line_above_does_not_apply(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = (
        HEADER
        + "def f(rank):\n    if rank == 0:\n        # collcheck: ignore[CC001]\n        dist.barrier()\n"
    )

    assert check(capsys, tmp_path, source) == (1, [("CC001", 7)], [{"line": 6, "codes": ["CC001"]}])


@pytest.mark.parametrize(
    ("comment", "codes"),
    [
        ("  # collcheck: ignore", []),
        ("  # collcheck: ignore[CC001]", ["CC001"]),
        ("  # collcheck: ignore[CC002,CC001]", ["CC001", "CC002"]),
    ],
)
def test_suppression_on_a_clean_line_is_unused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, comment: str, codes: list[str]
) -> None:
    source = HEADER + f"def f(t):{comment}\n    dist.all_reduce(t)\n"

    code, found, unused = check(capsys, tmp_path, source)

    assert (code, found) == (0, [])
    assert unused == [{"line": 4, "codes": codes}]


def test_unused_and_used_in_one_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = barrier_under_rank0("  # collcheck: ignore[CC001]") + "\n\nx = 1  # collcheck: ignore\n"

    assert check(capsys, tmp_path, source) == (0, [], [{"line": 9, "codes": []}])


def test_text_inside_a_string_is_not_a_suppression(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = barrier_under_rank0("; note = '# collcheck: ignore[CC001]'")

    assert check(capsys, tmp_path, source) == (1, [("CC001", 6)], [])


def test_docstring_mention_is_not_a_suppression(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = (
        HEADER + 'def f(rank):\n    """# collcheck: ignore"""\n    if rank == 0:\n        dist.barrier()\n'
    )

    assert check(capsys, tmp_path, source) == (1, [("CC001", 7)], [])


def test_suppression_of_a_rule_switched_off_is_not_unused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = barrier_under_rank0("  # collcheck: ignore[CC001]")

    assert check(capsys, tmp_path, source, "--ignore", "CC001") == (0, [], [])
    assert check(capsys, tmp_path, source, "--select", "CC002") == (0, [], [])


def test_unused_suppression_alone_does_not_fail_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = HEADER + "def f(t):  # collcheck: ignore[CC001]\n    dist.all_reduce(t)\n"
    path = tmp_path / "mod.py"
    path.write_text(source)

    code = main(["check", "--no-cache", "--format", "concise", str(path)])
    out = capsys.readouterr().out

    assert code == 0
    assert any(line.startswith(f"{path}:4:") for line in out.splitlines()), out


def test_analyze_text_applies_suppressions() -> None:
    result = analyze_text(
        barrier_under_rank0("  # collcheck: ignore[CC001]"), "mod.py", Settings(cache=False)
    )

    assert result.findings == []
    assert result.unused_suppressions == []


def test_marker_is_case_insensitive(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = barrier_under_rank0("  # Collcheck: ignore[CC001]")

    assert check(capsys, tmp_path, source) == (0, [], [])
