"""Every rule's documented examples run: the code under *Example* is flagged with the rule's code,
the code under *Use instead* is not (the way Fixit turns VALID/INVALID into tests).

An example is a fragment: it runs at module level after a fixed prelude that imports the usual
modules and binds `rank` and `world_size` the way programs do. A memory rule's example states
its assumptions in a `# pyproject.toml: [tool.collcheck.memory] ...` comment, read here as the
run's memory settings."""

from __future__ import annotations

import re

import pytest

from collcheck.api import analyze_text
from collcheck.checks import Rule, all_rules
from collcheck.config import Settings

SECTION = re.compile(r"^## (Example|Use instead)\n(.*?)(?=^## |\Z)", re.S | re.M)
CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
MEMORY = re.compile(r"#\s*pyproject\.toml: \[tool\.collcheck\.memory\](.*?)\n(?!#\s{5,})", re.S)
PRELUDE = (
    "import math\nimport os\nimport random\nimport time\n\nimport torch\nimport torch.distributed as dist\n\n"
    "rank = dist.get_rank()\nworld_size = dist.get_world_size()\n\n"
)


def _examples(rule: Rule) -> list[tuple[str, str]]:
    found = [
        (section, code) for section, body in SECTION.findall(rule.doc) for code in CODE_BLOCK.findall(body)
    ]
    return found


def _memory(code: str) -> tuple[tuple[str, object], ...]:
    """`# pyproject.toml: [tool.collcheck.memory] seq_len = 32768, budget = "16GiB"` -> settings."""
    match = MEMORY.search(code)
    if match is None:
        return ()
    text = " ".join(line.lstrip("# ").strip() for line in match.group(1).splitlines())
    pairs = [part.split("=", 1) for part in text.split(",") if "=" in part]
    return tuple((name.strip(), _value(value.strip())) for name, value in pairs)


def _value(text: str) -> object:
    return text.strip('"') if text.startswith('"') else int(text)


CASES = [
    pytest.param(rule, section, code, id=f"{rule.code}-{section.replace(' ', '_').lower()}-{index}")
    for rule in all_rules()
    for index, (section, code) in enumerate(_examples(rule))
]


def test_every_rule_documents_a_bug_and_its_fix() -> None:
    for rule in all_rules():
        sections = {section for section, _ in _examples(rule)}
        assert sections == {"Example", "Use instead"}, rule.code


@pytest.mark.parametrize(("rule", "section", "code"), CASES)
def test_documented_example_runs(rule: Rule, section: str, code: str) -> None:
    settings = Settings(cache=False, select=(rule.code,), memory=_memory(code))
    result = analyze_text(PRELUDE + code, f"{rule.code.lower()}_example.py", settings)
    assert result.error is None
    codes = [finding.code for finding in result.findings]
    if section == "Example":
        assert rule.code in codes, result.notes
    else:
        assert rule.code not in codes, [finding.message for finding in result.findings]
