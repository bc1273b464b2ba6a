"""The content-keyed result cache: hits, misses, invalidation, corruption, and a light warm path."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from dataclasses import replace
from pathlib import Path

import pytest

from collcheck import api, cache
from collcheck.catalog import load_catalog
from collcheck.config import Settings
from collcheck.findings import (
    Budget,
    BudgetCut,
    Counterexample,
    FileError,
    FileResult,
    Finding,
    Location,
    Severity,
    TraceStep,
    UnusedSuppression,
)
from collcheck.source import SourceFile

SOURCE = "import torch.distributed as dist\n\ndef f(rank):\n    if rank == 0:\n        dist.barrier()\n"
HEAVY_MODULES = ("z3", "libcst", "collcheck.static.engine")


def rich_result(path: str) -> FileResult:
    example = Counterexample(
        world_size=2,
        ranks=((0, (TraceStep("barrier", path, 5, chain=("f",), detail="group=None"),)), (1, ())),
        values=(("rank", "0"),),
    )
    finding = Finding(
        code="CC001",
        severity=Severity.ERROR,
        location=Location(path, 5, 8, 5, 22),
        message_template="ranks {a} and {b} differ",
        message_args=(("a", "0"), ("b", "1")),
        counterexample=example,
        function="f",
    )
    return FileResult(
        path=path,
        findings=[finding],
        notes=["z3 returned unknown once"],
        budget_cuts=[BudgetCut(path, 3, "f", Budget.Z3_FUNCTION, 30_000_000)],
        unused_suppressions=[UnusedSuppression(Location(path, 2), ("CC003",))],
    )


class Counted:
    """A stand-in for the engine: counts calls and returns a fixed result."""

    def __init__(self, result: FileResult) -> None:
        self.result = result
        self.calls = 0

    def __call__(self) -> FileResult:
        self.calls += 1
        return self.result


@pytest.fixture
def source_file(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    return path


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(cache_dir=str(tmp_path / "cache"))


def run_cached(
    path: Path, settings: Settings, compute: Counted, fingerprint: str = "cat1", deps: str = ""
) -> FileResult:
    return cache.cached_analyze(str(path), settings, fingerprint, compute, dependency_digest=deps)


def test_round_trip_of_every_field(source_file: Path) -> None:
    original = rich_result(str(source_file))
    assert cache.result_from_json(json.loads(json.dumps(cache.result_to_json(original)))) == original
    failed = FileResult(path="x.py", error=FileError("x.py", "invalid syntax", line=3))
    assert cache.result_from_json(cache.result_to_json(failed)) == failed


def test_hit_returns_the_stored_result(source_file: Path, settings: Settings) -> None:
    compute = Counted(rich_result(str(source_file)))
    first = run_cached(source_file, settings, compute)
    second = run_cached(source_file, settings, compute)
    assert compute.calls == 1
    assert second == first == compute.result
    assert second is not first


def test_folder_is_git_ignored(source_file: Path, settings: Settings) -> None:
    run_cached(source_file, settings, Counted(FileResult(str(source_file))))
    folder = Path(settings.cache_dir)
    assert "*" in (folder / ".gitignore").read_text().splitlines()
    assert not list(folder.rglob(".tmp-*"))  # atomic writes leave no temporary files behind


def test_relative_cache_dir_is_under_root(source_file: Path, tmp_path: Path) -> None:
    settings = Settings(root=str(tmp_path / "project"))
    assert cache.cache_folder(settings) == tmp_path / "project" / ".collcheck_cache"


def test_content_change_is_a_miss(source_file: Path, settings: Settings) -> None:
    compute = Counted(FileResult(str(source_file)))
    run_cached(source_file, settings, compute)
    source_file.write_text(SOURCE + "\n# edited\n")
    run_cached(source_file, settings, compute)
    assert compute.calls == 2


def test_an_edited_engine_is_a_miss(
    source_file: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """collcheck's own code changed without a version bump: old results must not be served."""
    compute = Counted(FileResult(str(source_file)))
    run_cached(source_file, settings, compute)
    monkeypatch.setattr(cache, "engine_identity", lambda: "0.0.0+another-engine")
    run_cached(source_file, settings, compute)
    assert compute.calls == 2


def test_tree_stamp_moves_with_any_file(tmp_path: Path) -> None:
    engine = tmp_path / "engine"
    (engine / "static").mkdir(parents=True)
    module = engine / "static" / "stage.py"
    module.write_text("x = 1\n")
    (engine / "notes.txt").write_text("not code\n")
    trees = ((engine, "*.py"),)
    before = cache.tree_stamp(trees)
    assert cache.tree_stamp(trees) == before
    (engine / "notes.txt").write_text("still not code, longer\n")
    assert cache.tree_stamp(trees) == before
    module.write_text("x = 22\n")
    assert cache.tree_stamp(trees) != before


@pytest.mark.parametrize(
    "change",
    [
        {"z3_rlimit": 10},
        {"z3_function_rlimit": 10},
        {"max_steps": 10},
        {"world_size": 4},
        {"select": ("CC001",)},
        {"max_inline_depth": 1},
        {"memory": (("budget", "1GiB"),)},
    ],
)
def test_settings_change_is_a_miss(source_file: Path, settings: Settings, change: dict[str, object]) -> None:
    compute = Counted(FileResult(str(source_file)))
    run_cached(source_file, settings, compute)
    run_cached(source_file, replace(settings, **change), compute)  # type: ignore[arg-type]
    assert compute.calls == 2


def test_scheduling_settings_keep_the_key(source_file: Path, settings: Settings) -> None:
    compute = Counted(FileResult(str(source_file)))
    run_cached(source_file, settings, compute)
    run_cached(source_file, replace(settings, jobs=7, extend_exclude=("gen_*",)), compute)
    assert compute.calls == 1


def test_catalog_and_dependency_changes_are_misses(source_file: Path, settings: Settings) -> None:
    compute = Counted(FileResult(str(source_file)))
    run_cached(source_file, settings, compute, fingerprint="cat1")
    run_cached(source_file, settings, compute, fingerprint="cat2")
    run_cached(source_file, settings, compute, fingerprint="cat2", deps="callee-summary-v2")
    assert compute.calls == 3
    run_cached(source_file, settings, compute, fingerprint="cat2", deps="callee-summary-v2")
    assert compute.calls == 3


def test_version_is_part_of_the_key(
    source_file: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    compute = Counted(FileResult(str(source_file)))
    run_cached(source_file, settings, compute)
    monkeypatch.setattr(cache, "__version__", "99.0.0")
    run_cached(source_file, settings, compute)
    assert compute.calls == 2


def test_same_content_at_another_path_is_a_miss(tmp_path: Path, settings: Settings) -> None:
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text(SOURCE)
    second.write_text(SOURCE)
    run_cached(first, settings, Counted(rich_result(str(first))))
    compute = Counted(rich_result(str(second)))
    assert run_cached(second, settings, compute).path == str(second)
    assert compute.calls == 1


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "{not json",
        "[]",
        '{"key": "other", "result": {}}',
        "null",
        '{"key": "%KEY%", "result": {"path": 1}}',
        '{"key": "%KEY%", "variants": [{"path": 1}]}',
        '{"key": "%KEY%", "variants": 5}',
    ],
)
def test_corrupt_entry_is_a_miss(source_file: Path, settings: Settings, garbage: str) -> None:
    compute = Counted(rich_result(str(source_file)))
    run_cached(source_file, settings, compute)
    key = cache.cache_key(source_file.read_bytes(), str(source_file), settings, "cat1")
    entry = cache._entry_path(Path(settings.cache_dir), key)
    assert entry.is_file()
    entry.write_text(garbage.replace("%KEY%", key))
    assert run_cached(source_file, settings, compute) == compute.result
    assert compute.calls == 2
    assert run_cached(source_file, settings, compute) == compute.result  # the entry was rewritten
    assert compute.calls == 2


def test_binary_garbage_entry_is_a_miss(source_file: Path, settings: Settings) -> None:
    compute = Counted(FileResult(str(source_file)))
    run_cached(source_file, settings, compute)
    for entry in Path(settings.cache_dir).rglob("*.json"):
        entry.write_bytes(b"\xff\xfe\x00garbage")
    run_cached(source_file, settings, compute)
    assert compute.calls == 2


def test_unwritable_cache_still_analyses(source_file: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache folder should be")
    settings = Settings(cache_dir=str(blocker / "cache"))
    compute = Counted(FileResult(str(source_file)))
    assert run_cached(source_file, settings, compute) == compute.result
    assert run_cached(source_file, settings, compute) == compute.result
    assert compute.calls == 2


def test_no_cache_neither_reads_nor_writes(source_file: Path, settings: Settings) -> None:
    off = replace(settings, cache=False)
    compute = Counted(FileResult(str(source_file)))
    run_cached(source_file, off, compute)
    run_cached(source_file, off, compute)
    assert compute.calls == 2
    assert not Path(settings.cache_dir).exists()


def test_unreadable_file_is_not_cached(tmp_path: Path, settings: Settings) -> None:
    missing = tmp_path / "gone.py"
    compute = Counted(FileResult(str(missing), error=FileError(str(missing), "cannot read file")))
    run_cached(missing, settings, compute)
    run_cached(missing, settings, compute)
    assert compute.calls == 2


# --- wired into the API --------------------------------------------------------------------------


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Install a stand-in `collcheck.static.engine` and record which files it analysed."""
    analysed: list[str] = []

    def analyze_source(
        source: SourceFile, catalog: object, settings: Settings, project: object = None, *, rules: object
    ) -> FileResult:
        analysed.append(source.path)
        return rich_result(source.path)

    module = types.ModuleType("collcheck.static.engine")
    module.analyze_source = analyze_source  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "collcheck.static.engine", module)
    return analysed


def test_analyze_file_uses_the_cache(source_file: Path, settings: Settings, fake_engine: list[str]) -> None:
    first = api.analyze_file(str(source_file), settings)
    second = api.analyze_file(str(source_file), settings)
    assert fake_engine == [str(source_file)]
    assert first == second
    assert [finding.code for finding in second.findings] == ["CC001"]


def test_analyze_file_filters_hits_without_changing_the_entry(
    source_file: Path, settings: Settings, fake_engine: list[str]
) -> None:
    cold = api.analyze_file(str(source_file), settings)
    ignored = replace(settings, per_file_ignores=(("train.py", ("CC001",)),))
    assert api.analyze_file(str(source_file), ignored).findings == []
    warm = api.analyze_file(str(source_file), settings)
    assert len(fake_engine) == 2  # cold, then the other settings; the last call was a hit
    assert warm.findings == cold.findings != []


def test_no_cache_setting_reaches_the_engine_each_time(
    source_file: Path, settings: Settings, fake_engine: list[str]
) -> None:
    off = replace(settings, cache=False)
    api.analyze_file(str(source_file), off)
    api.analyze_file(str(source_file), off)
    assert len(fake_engine) == 2


WARM_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from collcheck.api import analyze_file
    from collcheck.cache import result_to_json
    from collcheck.config import Settings

    result = analyze_file(sys.argv[1], Settings(cache_dir=sys.argv[2], select=("CC",)))
    print(json.dumps({"result": result_to_json(result),
                      "loaded": [name for name in sys.argv[3:] if name in sys.modules]}))
    """
)


def run_api(path: Path, cache_dir: str) -> dict[str, object]:
    completed = subprocess.run(
        [sys.executable, "-c", WARM_SCRIPT, str(path), cache_dir, *HEAVY_MODULES],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    data: dict[str, object] = json.loads(completed.stdout)
    return data


def test_warm_path_loads_no_engine(source_file: Path, settings: Settings, fake_engine: list[str]) -> None:
    """Filled through the stand-in engine here; a fresh process must answer from the cache alone.

    Where the real engine has not landed, a miss in the subprocess would fail on its import, so a
    passing run proves the hit; where it has, `loaded` proves it was never imported.
    """
    cold = api.analyze_file(str(source_file), replace(settings, select=("CC",)))  # as WARM_SCRIPT does
    warm = run_api(source_file, settings.cache_dir)
    assert warm["loaded"] == []
    assert warm["result"] == cache.result_to_json(cold)
    assert cold.findings


def test_warm_run_of_the_real_engine_skips_z3(source_file: Path, settings: Settings) -> None:
    cold = run_api(source_file, settings.cache_dir)
    warm = run_api(source_file, settings.cache_dir)
    assert warm["result"] == cold["result"]
    assert warm["loaded"] == []


def test_catalog_fingerprint_feeds_the_key(source_file: Path, settings: Settings, tmp_path: Path) -> None:
    extra = tmp_path / "extra.toml"
    extra.write_text('[catalog]\nname = "extra"\n')
    assert load_catalog([extra]).fingerprint != load_catalog().fingerprint


def test_index_facts_keep_their_star_imports_through_the_cache(tmp_path: Path) -> None:
    """Every field of a file's index facts survives the facts cache, the modules it imports
    everything from included (their edge re-checks the importer when they change)."""
    from collcheck.static.prefilter import rank_words, trigger_pattern
    from collcheck.static.project import file_facts

    path = tmp_path / "user.py"
    path.write_text("from consts import *\nimport torch.distributed as dist\ndist.barrier()\n")
    catalog = load_catalog()
    facts = file_facts(path.read_text(), trigger_pattern(catalog), rank_words(catalog))
    assert facts.star_imports == ("consts",)
    settings = Settings(root=str(tmp_path), cache_dir=str(tmp_path / "cache"))
    cache.store_facts(settings, catalog.fingerprint, {str(path): facts}, {})
    loaded, _ = cache.load_facts(settings, catalog.fingerprint, [str(path)])
    assert loaded == {str(path): facts}
