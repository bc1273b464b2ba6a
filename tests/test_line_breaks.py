"""Lines are counted as Python's tokenizer counts them (issue 27, items 5 and 6; docs/security.md).

Only "\\r\\n", "\\r" and "\\n" end a line. `str.splitlines` also splits at U+2028, U+2029, U+0085,
\\v, \\f and \\x1c-\\x1e, which may stand in a string or a comment; counting with it shifted which
source a function was taken to hold (a function was skipped as naming no collective when checked
alone), and the snippet under a finding showed another line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collcheck.lines import line_starts, line_texts, physical_lines, with_newlines
from tests.cli_support import run

SPLITLINES_ONLY = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]

LOOP = (
    "import torch.distributed as dist\n\n\n"
    "def sync(grads, names):\n"
    '    note = "a{char}b{char}c{char}d"\n'
    "    for name in set(names):\n"
    "        dist.all_reduce(grads[name])\n"
)
LOOP_LINE = 6


def _write(tmp_path: Path, text: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


@pytest.mark.parametrize("char", SPLITLINES_ONLY, ids=[f"U+{ord(c):04X}" for c in SPLITLINES_ONLY])
def test_a_string_with_a_splitlines_break_alone_and_with_other_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], char: str
) -> None:
    path = _write(tmp_path, LOOP.format(char=char))
    other = _write(tmp_path, "import os\n", "other.py")
    alone = run(capsys, "check", "--no-cache", "--format", "concise", str(path))
    together = run(capsys, "check", "--no-cache", "--format", "concise", str(path), str(other))
    for code, out, _ in (alone, together):
        assert code == 1, out
        assert f"train.py:{LOOP_LINE}:1: CC007" in out


@pytest.mark.parametrize("char", ["\u2028", "\x0c", "\x85"], ids=["U+2028", "U+000C", "U+0085"])
def test_the_snippet_shows_the_finding_s_own_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], char: str
) -> None:
    text = f'NOTE = "x{char}y{char}z"\n' + LOOP.format(char=" ")
    path = _write(tmp_path, text)
    code, out, _ = run(capsys, "check", "--no-cache", str(path))
    assert code == 1
    assert f"> {LOOP_LINE + 1} |     for name in set(names):" in out
    assert f"  {LOOP_LINE + 2} |         dist.all_reduce(grads[name])" in out


@pytest.mark.parametrize("char", ["\u2028", "\x1e"], ids=["U+2028", "U+001E"])
def test_add_ignore_then_check_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str], char: str) -> None:
    path = _write(tmp_path, LOOP.format(char=char))
    code, _, err = run(capsys, "check", "--no-cache", "--add-ignore", str(path))
    assert code == 0 and "added suppressions for 1 finding in 1 file" in err
    lines = path.read_bytes().decode("utf-8").split("\n")
    assert lines[LOOP_LINE - 1].endswith("  # collcheck: ignore[CC007]")
    assert run(capsys, "check", "--no-cache", str(path))[0] == 0


CR_ONLY = LOOP.format(char=" ").replace("\n", "\r")


def test_a_suppression_in_a_file_of_cr_line_endings_is_read_on_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suppressed = CR_ONLY.replace("set(names):\r", "set(names):  # collcheck: ignore[CC007]\r")
    path = _write(tmp_path, suppressed)
    assert run(capsys, "check", "--no-cache", str(path))[0] == 0
    wrong_line = CR_ONLY.replace("dist\r", "dist  # collcheck: ignore[CC007]\r", 1)
    _write(tmp_path, wrong_line)
    code, out, _ = run(capsys, "check", "--no-cache", "--format", "concise", str(path))
    assert code == 1 and f"train.py:{LOOP_LINE}:1: CC007" in out


def test_a_file_of_cr_line_endings_reports_and_shows_its_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, CR_ONLY)
    code, out, _ = run(capsys, "check", "--no-cache", str(path))
    assert code == 1
    assert f"> {LOOP_LINE} |     for name in set(names):" in out


@pytest.mark.parametrize(
    "text",
    ["", "a", "a\n", "\n\n", "a\r\nb\rc\nd", "a\u2028b\n\x0c\n", "x\r", "\r\r\n\n", "a\x85b\rc"],
)
def test_lines_split_like_the_tokenizer(text: str) -> None:
    import ast

    lines = physical_lines(text)
    assert "".join(lines) == text
    contents = line_texts(text)
    assert contents == [line.rstrip("\r\n") for line in lines]
    assert line_starts(text)[: len(lines)] == [sum(map(len, lines[:i])) for i in range(len(lines))]
    normal = with_newlines(text)
    assert "\r" not in normal and line_texts(normal) == contents
    # Python itself: each line made a statement holding the line's text in a string, same endings
    source = "".join(
        f'x{index} = "{content}"{line[len(content) :]}'
        for index, (content, line) in enumerate(zip(contents, lines, strict=True))
    )
    statements = ast.parse(source).body
    assert [statement.lineno for statement in statements] == list(range(1, len(lines) + 1))


@pytest.mark.parametrize("char", SPLITLINES_ONLY, ids=[f"U+{ord(c):04X}" for c in SPLITLINES_ONLY])
def test_code_frame_numbers_lines_as_the_tokenizer(tmp_path: Path, char: str) -> None:
    from collcheck.report.text import code_frame

    path = _write(tmp_path, f'NOTE = "x{char}y"\r\nSECOND = 2\rTHIRD = 3\n', f"frame_{ord(char)}.py")
    assert code_frame(str(path), 2, 0) == [
        f'    1 | NOTE = "x{char}y"',
        "  > 2 | SECOND = 2",
        "      | ^",
        "    3 | THIRD = 3",
    ]
