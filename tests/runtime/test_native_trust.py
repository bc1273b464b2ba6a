"""The native recorder is loaded only from a build no other user could have planted (native_recorder.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from collcheck.runtime import native_recorder as native

OTHER_UID = 54321
PLANTED = """
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *marker = fopen(MARKER, "w");
    if (marker) fclose(marker);
}
"""


def _plant(root: Path, marker: Path) -> Path:
    """A shared library at the path the loader looks for, which creates `marker` when loaded."""
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler to build a planted library")
    name = native.module_name()
    folder = root / name
    folder.mkdir(parents=True)
    source = root / "planted.c"
    source.write_text(PLANTED)
    library = folder / f"{name}.so"
    define = f'-DMARKER="{marker}"'
    subprocess.run(
        ["gcc", "-shared", "-fPIC", define, "-o", str(library), str(source)], check=True, timeout=60
    )
    source.unlink()
    for path in (root, folder):
        path.chmod(0o700)
    library.chmod(0o700)
    return library


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    root = tmp_path / "native"
    monkeypatch.setenv(native.ENV_NATIVE_DIR, str(root))
    monkeypatch.setattr(native, "_loaded", None)
    monkeypatch.setattr(native, "_warned_untrusted", False)
    return root


def _load_quietly() -> None:
    native.load(build=False, quiet=True)


def test_a_planted_library_in_a_private_folder_is_loaded(fresh: Path, tmp_path: Path) -> None:
    """The control: the planted library does run when the folder is the user's own."""
    marker = tmp_path / "ran"
    _plant(fresh, marker)
    _load_quietly()
    assert marker.exists()


@pytest.mark.parametrize(
    "weak", ["root writable by others", "folder writable by group", "library owned by another"]
)
def test_a_library_another_user_could_have_planted_is_not_loaded(
    fresh: Path, tmp_path: Path, weak: str, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    library = _plant(fresh, marker)
    if weak == "root writable by others":
        fresh.chmod(0o777)
    elif weak == "folder writable by group":
        library.parent.chmod(0o770)
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give a file to another user")
        os.chown(library, OTHER_UID, OTHER_UID)
    assert native.load(build=False, quiet=True) is None
    assert native.load(build=False, quiet=True) is None
    assert not marker.exists()
    err = capsys.readouterr().err
    assert err.count("native recorder not loaded") == 1 and "using the Python kernel" in err
    assert native.build_in_background() == "unavailable"  # nor built into it


def test_a_build_folder_is_created_private_whatever_the_umask(fresh: Path) -> None:
    old = os.umask(0)
    try:
        native._make_private(fresh / native.module_name())
    finally:
        os.umask(old)
    for path in (fresh, fresh / native.module_name()):
        assert native.untrusted(path) is None
