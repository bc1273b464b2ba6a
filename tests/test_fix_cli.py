"""End to end through `main(argv)`: --fix, --unsafe-fixes, --diff, --show-fixes, --add-ignore and
baselines, on files with comments, odd formatting, CRLF line endings and tabs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_support import REPO, run

SET_LOOP_CRLF_TABS = (
    b"import torch.distributed as dist\r\n\r\n\r\n"
    b"def sync(grads ,names):   # odd spacing kept\r\n"
    b"\t# a comment above the loop\r\n"
    b"\tfor  name  in   set( names ) :  # trailing comment\r\n"
    b"\t\tdist.all_reduce( grads[name] )\r\n"
)
RANK_GUARD_CRLF_TABS = (
    b"import torch.distributed as dist\r\n\r\n\r\n"
    b"def save(state,path):\r\n"
    b"\tif dist.get_rank() == 0:  # only rank 0 writes\r\n"
    b"\t\twrite( state , path )\r\n"
    b"\t\tdist.barrier()   # wait for the file\r\n"
    b"\treturn path\r\n"
)


def _file(tmp_path: Path, data: bytes, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_fix_applies_the_safe_fix_byte_for_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, SET_LOOP_CRLF_TABS)
    code, out, err = run(capsys, "check", "--no-cache", "--fix", str(path))
    assert code == 0, out
    assert "fixed 1 finding in 1 file" in err
    after = path.read_bytes()
    assert after == SET_LOOP_CRLF_TABS.replace(b"set( names )", b"sorted(set( names ))")


def test_unsafe_fixes_are_applied_only_with_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, RANK_GUARD_CRLF_TABS)
    code, _, err = run(capsys, "check", "--no-cache", "--fix", str(path))
    assert code == 1 and "fixed 0 findings" in err
    assert path.read_bytes() == RANK_GUARD_CRLF_TABS
    code, out, _ = run(capsys, "check", "--no-cache", "--fix", "--unsafe-fixes", str(path))
    assert code == 0, out
    expected = RANK_GUARD_CRLF_TABS.replace(
        b"\t\tdist.barrier()   # wait for the file\r\n", b"\tdist.barrier()   # wait for the file\r\n"
    )
    assert path.read_bytes() == expected


def test_diff_prints_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, SET_LOOP_CRLF_TABS)
    code, out, err = run(capsys, "check", "--no-cache", "--diff", str(path))
    assert code == 1 and "would fix 1 finding" in err
    assert "-\tfor  name  in   set( names ) :  # trailing comment\r\n" in out
    assert "+\tfor  name  in   sorted(set( names )) :  # trailing comment\r\n" in out
    assert path.read_bytes() == SET_LOOP_CRLF_TABS
    clean = _file(tmp_path, b"import torch.distributed as dist\n", "clean.py")
    assert run(capsys, "check", "--no-cache", "--diff", str(clean))[0] == 0


def test_findings_left_after_fixing_decide_the_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _file(tmp_path, SET_LOOP_CRLF_TABS, "a.py")
    _file(tmp_path, RANK_GUARD_CRLF_TABS, "b.py")
    code, out, _ = run(capsys, "check", "--no-cache", "--format", "concise", "--fix", str(tmp_path))
    assert code == 1
    assert "b.py" in out and "a.py" not in out
    assert "[fix: unsafe, --fix --unsafe-fixes]" in out


def test_reports_say_whether_a_fix_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, SET_LOOP_CRLF_TABS)
    _, out, _ = run(capsys, "check", "--no-cache", "--format", "json", "--show-fixes", str(path))
    fix = json.loads(out)["findings"][0]["fix"]
    assert fix["applicability"] == "safe"
    # The edit covers `set( names ` (columns 18-28, 1-based, end exclusive) and keeps the `)`.
    edit = {"line": 6, "column": 18, "end_line": 6, "end_column": 29, "content": "sorted(set( names )"}
    assert fix["edits"] == [edit]
    _, out, _ = run(capsys, "check", "--no-cache", "--format", "sarif", "--show-fixes", str(path))
    (result,) = json.loads(out)["runs"][0]["results"]
    replacement = result["fixes"][0]["artifactChanges"][0]["replacements"][0]
    assert replacement["insertedContent"]["text"] == "sorted(set( names )"
    assert replacement["deletedRegion"] == {"startLine": 6, "startColumn": 18, "endLine": 6, "endColumn": 29}
    _, out, _ = run(capsys, "check", "--no-cache", "--format", "json", str(path))
    assert "fix" not in json.loads(out)["findings"][0]  # not computed without a fix flag
    for fmt in ("text", "github", "junit"):
        assert (
            "[fix: safe, --fix]"
            in run(capsys, "check", "--no-cache", "--format", fmt, "--show-fixes", str(path))[1]
        )


def test_libcst_is_never_imported_without_a_fix_flag(tmp_path: Path) -> None:
    path = _file(tmp_path, SET_LOOP_CRLF_TABS)
    probe = (
        "import sys\nfrom collcheck.cli import main\n"
        "code = main(['check', '--no-cache', '--format', 'json', sys.argv[1]] + sys.argv[2:])\n"
        "print('LIBCST', 'libcst' in sys.modules, 'collcheck.adopt.flow' in sys.modules, code)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def libcst_loaded(*flags: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", probe, str(path), *flags],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        return done.stdout.strip().splitlines()[-1]

    assert libcst_loaded() == "LIBCST False False 1"  # a plain check loads no part of the adoption flow
    assert libcst_loaded("--add-ignore") == "LIBCST False True 0"
    assert libcst_loaded("--diff") == "LIBCST True True 0"  # the file is clean after --add-ignore


ADD_IGNORE_CASES = (
    b"import torch.distributed as dist\r\n\r\n\r\n"
    b"def step(t, names):\r\n"
    b"\tif dist.get_rank() == 0:\r\n"
    b"\t\tdist.all_reduce(  # keep this comment\r\n"
    b"\t\t\tt,\r\n"
    b"\t\t)\r\n"
    b"\tfor n in set(names):\r\n"
    b"\t\tdist.broadcast(t[n], src=0)  # collcheck: ignore[CC001]\r\n"
)


def test_add_ignore_places_suppressions_where_they_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, ADD_IGNORE_CASES)
    code, _, err = run(capsys, "check", "--no-cache", "--add-ignore=legacy code", str(path))
    assert code == 0, err
    assert "added suppressions for 2 findings in 1 file" in err
    expected = ADD_IGNORE_CASES.replace(
        b"# keep this comment\r\n", b"# keep this comment  # collcheck: ignore[CC001] legacy code\r\n"
    ).replace(
        b"\tfor n in set(names):\r\n", b"\tfor n in set(names):  # collcheck: ignore[CC007] legacy code\r\n"
    )
    assert path.read_bytes() == expected
    assert run(capsys, "check", "--no-cache", str(path))[0] == 0


def test_add_ignore_uses_the_def_line_when_the_line_cannot_take_a_comment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = (
        b"import torch.distributed as dist\n\n\n@decorated\ndef f(rank):\n"
        b"    if rank == 0:\n        dist.barrier(); x = '''\n'''\n"
    )
    path = _file(tmp_path, source)
    code, _, err = run(capsys, "check", "--no-cache", "--add-ignore", str(path))
    assert code == 0, err
    assert path.read_bytes() == source.replace(
        b"def f(rank):\n", b"def f(rank):  # collcheck: ignore[CC001]\n"
    )


def test_add_ignore_merges_into_an_existing_suppression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = (
        b"import torch.distributed as dist\n\n\ndef f(rank, names):\n"
        b"    for n in set(names):  # collcheck: ignore[CC002] why\n        dist.all_reduce(n)\n"
    )
    path = _file(tmp_path, source)
    run(capsys, "check", "--no-cache", "--add-ignore", str(path))
    assert b"# collcheck: ignore[CC002,CC007] why\n" in path.read_bytes()


BASELINED = (
    "import torch.distributed as dist\n\n\ndef save(rank):\n    if rank == 0:\n        dist.barrier()\n"
)
NEW_FINDING = "\n\ndef share(t, names):\n    for n in set(names):\n        dist.all_reduce(t[n])\n"


def test_baseline_reports_only_new_findings_and_survives_line_moves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, BASELINED.encode())
    baseline = tmp_path / "collcheck-baseline.json"
    code, _, err = run(capsys, "check", "--no-cache", "--write-baseline", str(baseline), str(path))
    assert code == 0 and "wrote 1 finding" in err
    assert run(capsys, "check", "--no-cache", "--baseline", str(baseline), str(path))[0] == 0
    path.write_text("# moved\n\n" + BASELINED + NEW_FINDING, encoding="utf-8")
    code, out, _ = run(
        capsys, "check", "--no-cache", "--format", "json", "--baseline", str(baseline), str(path)
    )
    assert code == 1
    assert [f["code"] for f in json.loads(out)["findings"]] == ["CC007"]


def test_baseline_lists_entries_that_no_longer_occur(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, BASELINED.encode())
    baseline = tmp_path / "base.json"
    run(capsys, "check", "--no-cache", "--write-baseline", str(baseline), str(path))
    path.write_text("import torch.distributed as dist\n", encoding="utf-8")
    code, out, _ = run(capsys, "check", "--no-cache", "--baseline", str(baseline), str(path))
    assert code == 0
    assert "baseline entry no longer found: CC001" in out


def test_baseline_from_the_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, BASELINED.encode())
    run(capsys, "check", "--no-cache", "--write-baseline", str(tmp_path / "base.json"), str(path))
    (tmp_path / "pyproject.toml").write_text('[tool.collcheck]\nbaseline = "base.json"\n', encoding="utf-8")
    assert run(capsys, "check", "--no-cache", str(path))[0] == 0
    assert run(capsys, "check", "--no-cache", "--baseline", str(tmp_path / "nope.json"), str(path))[0] == 2


def test_fix_keeps_a_bom_and_a_declared_encoding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bom = _file(tmp_path, b"\xef\xbb\xbf" + SET_LOOP_CRLF_TABS, "bom.py")
    latin = _file(
        tmp_path,
        b"# -*- coding: latin-1 -*-\n" + SET_LOOP_CRLF_TABS.replace(b"odd spacing", b"caf\xe9"),
        "latin.py",
    )
    before = {path: path.read_bytes() for path in (bom, latin)}
    code, out, _ = run(capsys, "check", "--no-cache", "--fix", str(bom), str(latin))
    assert code == 0, out
    for path, data in before.items():
        assert path.read_bytes() == data.replace(b"set( names )", b"sorted(set( names ))")


def test_add_ignore_after_a_backslash_continuation_goes_to_the_def_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = (
        b"import torch.distributed as dist\n\n\nclass Saver:\n    def save(self, rank):\n"
        b"        if rank == 0:\n            dist.barrier(); y = 1 + \\\n                2\n"
    )
    path = _file(tmp_path, source)
    assert run(capsys, "check", "--no-cache", "--add-ignore", str(path))[0] == 0
    suppressed = source.replace(
        b"def save(self, rank):\n", b"def save(self, rank):  # collcheck: ignore[CC001]\n"
    )
    assert path.read_bytes() == suppressed


UNSAFE_CRLF_TABS = (
    b"import os\r\n\r\nimport torch\r\nimport torch.distributed as dist\r\n\r\n\r\n"
    b"def resume(path):\r\n\tif os.path.exists(path):  # checkpoint?\r\n\t\tdist.barrier()\r\n\r\n\r\n"
    b"def share(k: torch.Tensor, n):\r\n\tout = [None] * n\r\n\tdist.all_gather_object(out, k)  # gather\r\n"
    b"\treturn out\r\n"
)


def test_inserted_statements_take_the_files_newline_and_indentation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, UNSAFE_CRLF_TABS)
    flags = ("--no-cache", "--extend-select", "CC102", "--fix", "--unsafe-fixes")
    code, out, err = run(capsys, "check", *flags, str(path))
    assert code == 0, out + err
    expected = UNSAFE_CRLF_TABS.replace(
        b"\tif os.path.exists(path):",
        b"\tdecision = [os.path.exists(path)]\r\n\tdist.broadcast_object_list(decision, src=0)\r\n"
        b"\tif decision[0]:",
    ).replace(
        b"\tdist.all_gather_object(out, k)  # gather\r\n",
        b"\tout_tensor = k.new_empty((dist.get_world_size(), *k.shape))\r\n"
        b"\tdist.all_gather_into_tensor(out_tensor, k)\r\n\tout[:] = out_tensor.unbind(0)  # gather\r\n",
    )
    assert path.read_bytes() == expected


def test_bare_add_ignore_is_rewritten_for_check_only() -> None:
    from collcheck.cli import _with_optional_values

    assert _with_optional_values(["src", "--add-ignore"]) == ["src", "--add-ignore="]
    assert _with_optional_values(["check", "--add-ignore=why", "src"]) == ["check", "--add-ignore=why", "src"]
    assert _with_optional_values(["run", "--", "python", "x.py", "--add-ignore"])[-1] == "--add-ignore"
    assert _with_optional_values(["check", "--", "--add-ignore"]) == ["check", "--", "--add-ignore"]
