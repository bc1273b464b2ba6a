"""The README's install and test commands: `.ci/run` runs the test command verbatim, and both
commands stand alone in a new shell (each makes or reuses its own venv)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _indented_commands() -> list[str]:
    return [line.strip() for line in README.splitlines() if line.startswith("    python3 -m venv .venv && ")]


def test_the_ci_script_runs_the_readme_test_command_verbatim() -> None:
    test_command = next(c for c in _indented_commands() if c.endswith("python -m pytest -q"))
    script = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in script.splitlines()


def test_each_command_activates_its_own_venv() -> None:
    commands = _indented_commands()
    assert len(commands) >= 2
    assert all(
        command.startswith("python3 -m venv .venv && . .venv/bin/activate && ") for command in commands
    )


def test_only_the_cpu_alternative_names_the_pytorch_index() -> None:
    install, test, *others = _indented_commands()
    assert "download.pytorch.org" not in install + test  # this machine cannot reach it
    assert any("--index-url https://download.pytorch.org/whl/cpu" in command for command in others)


def test_readme_says_where_the_native_build_is_cached() -> None:
    from collcheck.runtime.native_recorder import ENV_NATIVE_DIR, FAILED_MARKER, cache_root

    assert f"${ENV_NATIVE_DIR}" in README and FAILED_MARKER in README
    assert cache_root({"XDG_CACHE_HOME": "/x"}) == Path("/x/collcheck/native")
    assert "$XDG_CACHE_HOME/collcheck/native" in README and "~/.cache/collcheck/native" in README
