"""SARIF, GitHub annotations, JUnit and the JSON contract, on hand-made results (no engine needed)."""

from __future__ import annotations

import json
import re
import types
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from collcheck.checks import Rule, all_rules
from collcheck.findings import (
    Budget,
    BudgetCut,
    Counterexample,
    FileError,
    FileResult,
    Finding,
    Location,
    RunResult,
    Severity,
    TraceStep,
    UnusedSuppression,
)
from collcheck.report import FORMATS, render
from collcheck.report import sarif as sarif_module
from collcheck.report.github import escape_data, escape_property, render_github
from collcheck.report.json import result_to_json
from collcheck.report.junit import render_junit
from collcheck.report.sarif import FINGERPRINT_KEY, LEVELS, render_sarif, sarif_log

# --- hand-made results ---------------------------------------------------------------------------

TRAINER = "src/trainer.py"
UTILS = "src/comm utils.py"  # a space: URIs must be percent-encoded

EXAMPLE = Counterexample(
    world_size=2,
    ranks=(
        (0, (TraceStep("barrier", UTILS, 17, chain=("save", "synchronize")),)),
        (1, ()),
    ),
    values=(("n_steps", "3"),),
)

MISMATCH = Finding(
    code="CC001",
    severity=Severity.ERROR,
    location=Location(TRAINER, 12, 4, 12, 16),
    message_template="collective sequence differs between ranks {a} and {b} at {where}",
    message_args=(("a", "0"), ("b", "1"), ("where", "comm utils.py:17")),
    counterexample=EXAMPLE,
    function="train",
)

TRICKY = Finding(
    code="CC002",
    severity=Severity.WARNING,
    location=Location(TRAINER, 30, 0, 31, 2),
    message_template="loop bound {bound} depends on the rank",
    message_args=(("bound", "len(x[r:], 50%)\r\nnext: a,b"),),
    function="loop",
)

NOTE = Finding(
    code="CC101",
    severity=Severity.INFO,
    location=Location(UTILS, 5, 8),  # no end: region runs to the end of the line
    message_template="all_gather of {size} per rank",
    message_args=(("size", "2 GiB"),),
)


def make_result() -> RunResult:
    return RunResult(
        files=[
            FileResult(path=TRAINER, findings=[TRICKY, MISMATCH]),
            FileResult(
                path=UTILS,
                findings=[NOTE],
                unused_suppressions=[UnusedSuppression(Location(UTILS, 3), ("CC003",))],
            ),
            FileResult(path="src/broken.py", error=FileError("src/broken.py", "invalid syntax", line=4)),
            FileResult(path="src/binary.py", error=FileError("src/binary.py", "binary file")),
            FileResult(path="src/clean.py"),
        ]
    )


def fake_rule(code: str, severity: Severity, status: str = "stable") -> Rule:
    doc = f"## What it does\nChecks {code} things.\n\n## Why is this bad?\nDeadlocks.\n"
    return Rule(
        code=code,
        name=f"rule-{code.lower()}",
        severity=severity,
        message="{x}",
        status=status,
        since="0.1.0",
        default_enabled=status == "stable",
        doc=doc,
        module=types.ModuleType(f"fake_{code}"),
    )


FAKE_RULES = (fake_rule("CC001", Severity.ERROR), fake_rule("CC101", Severity.INFO, "preview"))


@pytest.fixture
def fake_registry(monkeypatch: pytest.MonkeyPatch) -> tuple[Rule, ...]:
    monkeypatch.setattr(sarif_module, "all_rules", lambda: FAKE_RULES)
    return FAKE_RULES


# --- a small SARIF 2.1.0 structural validator ----------------------------------------------------

SARIF_LEVELS = {"none", "note", "warning", "error"}


class Problems(list[str]):
    def require(self, condition: bool, where: str, what: str) -> None:
        if not condition:
            self.append(f"{where}: {what}")

    def typed(self, data: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> bool:
        present = key in data and isinstance(data[key], kind)
        self.require(present, where, f"'{key}' missing or not {kind}")
        return present


def _check_message(problems: Problems, holder: dict[str, Any], where: str) -> None:
    if problems.typed(holder, "message", dict, where):
        problems.typed(holder["message"], "text", str, f"{where}.message")


def _check_region(problems: Problems, region: dict[str, Any], where: str) -> None:
    if not problems.typed(region, "startLine", int, where):
        return
    problems.require(region["startLine"] >= 1, where, "startLine is 1-based")
    for key in ("startColumn", "endLine", "endColumn"):
        if key in region:
            problems.require(isinstance(region[key], int) and region[key] >= 1, where, f"{key} is 1-based")
    end_line = region.get("endLine", region["startLine"])
    problems.require(end_line >= region["startLine"], where, "endLine before startLine")
    if end_line == region["startLine"] and "endColumn" in region:
        problems.require(region["endColumn"] >= region.get("startColumn", 1), where, "endColumn before start")


def _check_location(problems: Problems, location: dict[str, Any], bases: set[str], where: str) -> None:
    if not problems.typed(location, "physicalLocation", dict, where):
        return
    physical = location["physicalLocation"]
    if problems.typed(physical, "artifactLocation", dict, f"{where}.physicalLocation"):
        artifact = physical["artifactLocation"]
        problems.typed(artifact, "uri", str, f"{where}.artifactLocation")
        if "uriBaseId" in artifact:
            problems.require(artifact["uriBaseId"] in bases, where, "uriBaseId not in originalUriBaseIds")
            problems.require(not artifact["uri"].startswith("/"), where, "relative uri must not be absolute")
        problems.require(" " not in artifact["uri"] and "\\" not in artifact["uri"], where, "uri not encoded")
    if "region" in physical:
        _check_region(problems, physical["region"], f"{where}.region")


def _check_rules(problems: Problems, rules: list[dict[str, Any]]) -> None:
    ids = [rule.get("id") for rule in rules]
    problems.require(len(ids) == len(set(ids)), "driver.rules", "duplicate rule ids")
    for position, rule in enumerate(rules):
        where = f"rules[{position}]"
        problems.typed(rule, "id", str, where)
        for key in ("shortDescription", "fullDescription", "help"):
            if key in rule:
                problems.typed(rule[key], "text", str, f"{where}.{key}")
        if "defaultConfiguration" in rule:
            level = rule["defaultConfiguration"].get("level")
            problems.require(level in SARIF_LEVELS, where, f"bad default level {level!r}")


def _check_result(
    problems: Problems, result: dict[str, Any], rules: list[dict[str, Any]], bases: set[str], where: str
) -> None:
    _check_message(problems, result, where)
    problems.typed(result, "ruleId", str, where)
    if "ruleIndex" in result:
        index = result["ruleIndex"]
        problems.require(isinstance(index, int) and 0 <= index < len(rules), where, "ruleIndex out of range")
        if isinstance(index, int) and 0 <= index < len(rules):
            problems.require(
                rules[index]["id"] == result.get("ruleId"), where, "ruleIndex names another rule"
            )
    problems.require(result.get("level", "warning") in SARIF_LEVELS, where, "bad level")
    for position, location in enumerate(result.get("locations", [])):
        _check_location(problems, location, bases, f"{where}.locations[{position}]")
    for position, location in enumerate(result.get("relatedLocations", [])):
        _check_location(problems, location, bases, f"{where}.relatedLocations[{position}]")
        _check_message(problems, location, f"{where}.relatedLocations[{position}]")
    for flow in result.get("codeFlows", []):
        problems.require(bool(flow.get("threadFlows")), where, "codeFlow without threadFlows")
        for thread in flow.get("threadFlows", []):
            problems.require(bool(thread.get("locations")), where, "threadFlow without locations")
            for step in thread.get("locations", []):
                _check_location(problems, step.get("location", {}), bases, f"{where}.threadFlow")
    fingerprints = result.get("partialFingerprints", {})
    problems.require(
        all(isinstance(v, str) for v in fingerprints.values()), where, "fingerprints are strings"
    )


def _check_invocations(problems: Problems, run: dict[str, Any], bases: set[str]) -> None:
    for position, invocation in enumerate(run.get("invocations", [])):
        where = f"invocations[{position}]"
        problems.typed(invocation, "executionSuccessful", bool, where)
        for number, note in enumerate(invocation.get("toolExecutionNotifications", [])):
            _check_message(problems, note, f"{where}.notifications[{number}]")
            problems.require(note.get("level", "warning") in SARIF_LEVELS, where, "bad notification level")
            for location in note.get("locations", []):
                _check_location(problems, location, bases, f"{where}.notifications[{number}]")


def validate_sarif(log: dict[str, Any]) -> list[str]:
    """Problems with `log` against the required parts of the SARIF 2.1.0 schema (empty: valid)."""
    problems = Problems()
    problems.require(log.get("version") == "2.1.0", "log", "version must be '2.1.0'")
    problems.typed(log, "$schema", str, "log")
    if not problems.typed(log, "runs", list, "log"):
        return problems
    for number, run in enumerate(log["runs"]):
        driver = run.get("tool", {}).get("driver", {})
        problems.typed(driver, "name", str, f"runs[{number}].tool.driver")
        rules = driver.get("rules", [])
        _check_rules(problems, rules)
        bases = set(run.get("originalUriBaseIds", {}))
        for position, result in enumerate(run.get("results", [])):
            _check_result(problems, result, rules, bases, f"results[{position}]")
        _check_invocations(problems, run, bases)
    return problems


def test_validator_catches_broken_logs() -> None:
    log = sarif_log(make_result())
    broken = json.loads(json.dumps(log))
    broken["version"] = "2.0.0"
    result = broken["runs"][0]["results"][0]
    result["ruleIndex"] = len(broken["runs"][0]["tool"]["driver"]["rules"])
    result["locations"][0]["physicalLocation"]["region"]["startColumn"] = 0
    del result["message"]
    problems = " | ".join(validate_sarif(broken))
    for expected in ("version", "ruleIndex out of range", "startColumn is 1-based", "'message' missing"):
        assert expected in problems


# --- SARIF ---------------------------------------------------------------------------------------


def test_sarif_is_structurally_valid(fake_registry: tuple[Rule, ...]) -> None:
    log = json.loads(render_sarif(make_result()))
    assert validate_sarif(log) == []
    assert log["$schema"].endswith("sarif-2.1.0.json")
    assert len(log["runs"]) == 1


def test_sarif_valid_with_the_real_registry() -> None:
    log = sarif_log(make_result())
    assert validate_sarif(log) == []
    ids = [rule["id"] for rule in log["runs"][0]["tool"]["driver"]["rules"]]
    assert {rule.code for rule in all_rules()} <= set(ids)
    assert {"CC001", "CC002", "CC101"} <= set(ids)  # codes without a registered module still resolve


def test_sarif_driver_lists_every_rule(fake_registry: tuple[Rule, ...]) -> None:
    driver = sarif_log(RunResult())["runs"][0]["tool"]["driver"]
    assert driver["name"] == "collcheck"
    assert driver["version"] and driver["informationUri"].startswith("https://")
    by_id = {rule["id"]: rule for rule in driver["rules"]}
    for rule in fake_registry:
        descriptor = by_id[rule.code]
        assert descriptor["name"] == rule.name
        assert descriptor["shortDescription"]["text"] == rule.summary
        assert descriptor["help"]["markdown"] == rule.doc.strip()
        assert descriptor["defaultConfiguration"]["level"] == LEVELS[rule.severity]
    assert by_id["CC101"]["defaultConfiguration"]["level"] == "note"


def test_sarif_results_carry_locations_and_levels(fake_registry: tuple[Rule, ...]) -> None:
    run = sarif_log(make_result())["runs"][0]
    results = {result["ruleId"]: result for result in run["results"]}
    rules = run["tool"]["driver"]["rules"]
    for finding in (MISMATCH, TRICKY, NOTE):
        result = results[finding.code]
        assert rules[result["ruleIndex"]]["id"] == finding.code
        assert result["level"] == LEVELS[finding.severity]
        assert result["message"]["text"].startswith(finding.message)
        artifact = result["locations"][0]["physicalLocation"]["artifactLocation"]
        assert artifact["uriBaseId"] == "%SRCROOT%"
    region = results["CC001"]["locations"][0]["physicalLocation"]["region"]
    loc = MISMATCH.location
    assert region == {
        "startLine": loc.line,
        "startColumn": loc.column + 1,
        "endLine": loc.end_line,
        "endColumn": (loc.end_column or 0) + 1,
    }
    assert "endColumn" not in results["CC101"]["locations"][0]["physicalLocation"]["region"]
    assert (
        results["CC101"]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        == "src/comm%20utils.py"
    )


def test_sarif_counterexample_steps_are_related_locations(fake_registry: tuple[Rule, ...]) -> None:
    result = next(r for r in sarif_log(make_result())["runs"][0]["results"] if r["ruleId"] == "CC001")
    steps = [(rank, step) for rank, sequence in EXAMPLE.ranks for step in sequence]
    related = result["relatedLocations"]
    assert len(related) == len(steps)
    for entry, (rank, step) in zip(related, steps, strict=True):
        assert entry["physicalLocation"]["region"]["startLine"] == step.line
        assert entry["message"]["text"].startswith(f"rank {rank}: ")
        assert f"{step.op} at {Path(step.path).name}:{step.line}" in entry["message"]["text"]
    assert len({entry["id"] for entry in related}) == len(related)
    flows = result["codeFlows"][0]["threadFlows"]
    assert [flow["id"] for flow in flows] == ["rank 0"]  # rank 1 reaches no collective: no empty flow


def test_sarif_fingerprints_stable_and_distinct(fake_registry: tuple[Rule, ...]) -> None:
    def fingerprints(result: RunResult) -> list[str]:
        return [r["partialFingerprints"][FINGERPRINT_KEY] for r in sarif_log(result)["runs"][0]["results"]]

    first = fingerprints(make_result())
    assert first == fingerprints(make_result())
    assert len(set(first)) == len(first)

    def shifted(finding: Finding) -> Finding:
        args = tuple((name, value.replace(":17", ":22")) for name, value in finding.message_args)
        return replace(
            finding, location=replace(finding.location, line=finding.location.line + 5), message_args=args
        )

    moved = RunResult(
        files=[
            FileResult(path=TRAINER, findings=[shifted(TRICKY), shifted(MISMATCH)]),
            *make_result().files[1:],
        ]
    )
    assert fingerprints(moved) == first  # inserting lines above a finding keeps its identity
    twice = RunResult(
        files=[
            FileResult(path=TRAINER, findings=[MISMATCH, replace(MISMATCH, location=Location(TRAINER, 40))])
        ]
    )
    assert len(set(fingerprints(twice))) == 2


def test_sarif_unanalysable_files_are_notifications(fake_registry: tuple[Rule, ...]) -> None:
    run = sarif_log(make_result())["runs"][0]
    notes = run["invocations"][0]["toolExecutionNotifications"]
    errors = [note for note in notes if note["level"] == "error"]
    assert len(errors) == len(make_result().errors)
    uris = {note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for note in errors}
    assert uris == {"src/broken.py", "src/binary.py"}
    assert all(
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] not in uris for r in run["results"]
    )


def test_sarif_uris_relative_to_root(tmp_path: Path, fake_registry: tuple[Rule, ...]) -> None:
    inside = str(tmp_path / "pkg" / "a.py")
    outside = "/elsewhere/b.py"
    result = RunResult(
        files=[
            FileResult(path=p, findings=[replace(NOTE, location=Location(p, 1))]) for p in (inside, outside)
        ]
    )
    run = sarif_log(result, root=tmp_path)["runs"][0]
    artifacts = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in run["results"]]
    assert {"uri": "pkg/a.py", "uriBaseId": "%SRCROOT%"} in artifacts
    assert {"uri": "file:///elsewhere/b.py"} in artifacts
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
    assert validate_sarif(sarif_log(result, root=tmp_path)) == []


# --- JSON contract -------------------------------------------------------------------------------


def test_json_contract_keys() -> None:
    data = json.loads(render(make_result(), "json"))
    assert set(data) == {
        "findings",
        "errors",
        "notes",
        "budget_cuts",
        "unused_suppressions",
        "stale_baseline",
        "summary",
    }
    assert set(data["summary"]) == {"files", "findings", "errors", "budget_cuts", "by_code"}
    first = data["findings"][0]
    assert {
        "code",
        "severity",
        "path",
        "line",
        "column",
        "end_line",
        "end_column",
        "message",
        "function",
    } <= set(first)
    with_example = next(item for item in data["findings"] if item["code"] == "CC001")
    assert set(with_example["counterexample"]) == {"world_size", "ranks", "values"}
    assert data == result_to_json(make_result())
    assert data["summary"]["errors"] == 2 and data["summary"]["files"] == 5


# --- GitHub annotations --------------------------------------------------------------------------

COMMAND = re.compile(r"^::(?P<command>\w+)(?: (?P<props>[^:]*))?::(?P<message>.*)$")


def unescape(text: str) -> str:
    for escaped, raw in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(escaped, raw)
    return text


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    match = COMMAND.match(line)
    assert match is not None, line
    props = dict(item.split("=", 1) for item in (match["props"] or "").split(",") if item)
    return (
        match["command"],
        {key: unescape(value) for key, value in props.items()},
        unescape(match["message"]),
    )


def test_github_escaping_round_trips() -> None:
    raw = "50% a:b,c\r\nd %0A"
    assert "\n" not in escape_data(raw) and "\r" not in escape_data(raw)
    assert ":" not in escape_property(raw) and "," not in escape_property(raw)
    assert unescape(escape_property(raw)) == raw
    assert unescape(escape_data(raw)) == raw
    assert ":" in escape_data(raw)  # the message keeps ':' and ',' (only properties escape them)


def test_github_annotations() -> None:
    lines = render_github(make_result()).splitlines()
    assert all(line.startswith("::") for line in lines)
    parsed = [parse_command(line) for line in lines]
    by_file_line = {(props.get("file"), props.get("line")): (cmd, props, msg) for cmd, props, msg in parsed}
    command, props, message = by_file_line[(TRICKY.location.path, str(TRICKY.location.line))]
    assert command == "warning"
    assert props["col"] == str(TRICKY.location.column + 1)
    assert props["endLine"] == str(TRICKY.location.end_line)
    assert props["endColumn"] == str((TRICKY.location.end_column or 0) + 1)
    assert props["title"].startswith("CC002")
    assert message == TRICKY.message  # survived escaping intact
    command, props, message = by_file_line[(MISMATCH.location.path, str(MISMATCH.location.line))]
    assert command == "error" and message.startswith(MISMATCH.message) and "world_size=2" in message
    command, _, _ = by_file_line[(NOTE.location.path, str(NOTE.location.line))]
    assert command == "notice"
    errors = [
        (props, msg)
        for cmd, props, msg in parsed
        if cmd == "error" and "title" in props and "CC" not in props["title"]
    ]
    assert {props["file"] for props, _ in errors} == {"src/broken.py", "src/binary.py"}
    assert any(props.get("line") == "4" for props, _ in errors)


def test_github_title_uses_rule_name(
    fake_registry: tuple[Rule, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    from collcheck.report import github

    monkeypatch.setattr(
        github, "rule_by_code", lambda code: next((r for r in FAKE_RULES if r.code == code), None)
    )
    _, props, _ = parse_command(render_github(RunResult(files=[FileResult(TRAINER, [MISMATCH])])))
    assert props["title"] == f"CC001 {FAKE_RULES[0].name}"


# --- JUnit ---------------------------------------------------------------------------------------


def test_junit_parses_and_counts() -> None:
    text = render_junit(make_result())
    root = ET.fromstring(text.encode())
    suites = root.findall("testsuite")
    assert root.tag == "testsuites" and len(suites) == 1
    cases = {case.get("name"): case for case in suites[0].findall("testcase")}
    assert set(cases) == {item.path for item in make_result().files}
    assert len(cases[TRAINER].findall("failure")) == 2
    assert {f.get("type") for f in cases[TRAINER].findall("failure")} == {"CC001", "CC002"}
    assert len(cases["src/clean.py"]) == 0
    assert cases["src/broken.py"].find("error") is not None
    assert (
        suites[0].get("tests") == "5" and suites[0].get("errors") == "2" and suites[0].get("failures") == "2"
    )
    failure = next(f for f in cases[TRAINER].findall("failure") if f.get("type") == "CC002")
    assert failure.get("message") == f"CC002 {TRICKY.message}"


def test_junit_survives_control_characters() -> None:
    finding = replace(NOTE, message_args=(("size", "\x00\x1b[31mred"),))
    root = ET.fromstring(render_junit(RunResult(files=[FileResult(UTILS, [finding])])).encode())
    assert root.find("testsuite/testcase/failure") is not None


# --- dispatch ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_renders(fmt: str) -> None:
    text = render(make_result(), fmt)
    assert isinstance(text, str) and text
    assert render(RunResult(), fmt) is not None


# --- functions cut short by a work budget --------------------------------------------------------


def test_a_budget_cut_is_a_note_in_every_report_and_fails_nothing() -> None:
    cut = BudgetCut("src/big.py", 12, "Trainer.step", Budget.PATHS, 256)
    result = RunResult(files=[FileResult(path="src/big.py", budget_cuts=[cut])])
    expected = "src/big.py:12: Trainer.step: analysis cut short by the work budget `max-paths` (256)"

    text = render(result, "text")
    assert f"note: {expected}" in text and "All checks passed (1 file)." in text
    assert "1 function cut short by a work budget" in text
    data = json.loads(render(result, "json"))
    assert data["budget_cuts"] == [
        {"path": "src/big.py", "line": 12, "function": "Trainer.step", "budget": "max-paths", "limit": 256}
    ]
    [note] = [
        n for n in sarif_log(result, Path("."))["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    ]
    assert note["level"] == "note" and note["descriptor"]["id"] == "collcheck/budget-cut"
    assert render_github(result).startswith("::notice file=src/big.py,line=12,")
    assert result.exit_code == 0 and result.gate(False) == 0 and result.gate(True) == 1
