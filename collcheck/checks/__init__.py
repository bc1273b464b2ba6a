"""The rule registry: one module per code, and one central table of codes.

Each rule module defines `CODE`, `NAME`, `SEVERITY`, `MESSAGE` (a `str.format` template) and a
docstring in fixed sections (What it does / Why is this bad? / Example / Use instead / References).
`collcheck rule CODE` prints that docstring and the README's rule table is generated from it.
Codes are a public contract: never renumbered, never reused.

A rule about collective ordering also declares what it claims and how it reports it:
`CLAIMS` (the `DivergenceKind`s it may report), `PRECEDENCE` (lower is asked first: a divergence
belongs to the first rule whose claims hold), `ANCHOR` (where its finding is shown),
`applies(divergence)` (optional: a finer test than the kind) and `describe(divergence)` (its
message template and arguments). Optional hooks: `in_local_ranks(template, args, divergence)`
(how it names ranks among a group's members; else `_describe.in_local_ranks`), `cause(divergence)`
(where the cause is read), `EXPLAINS` (the codes whose findings one of its findings in another
function explains: CC003's helper exit explains its callers' CC001), `describe_region(region,
divergences)` (a finding about a whole region, e.g. a loop over a set, told what the solver found
in it) or `check_module(context)` (a check over the parse tree). collcheck.classify asks these
hooks; nothing in collcheck.static names a rule.
A rule with fixes also declares `Variant` (the shapes of its findings) and `variant(finding)`
(collcheck.adopt.fixers). Adding a rule takes no code beyond its module and one line in
`CODE_TABLE`; docs/architecture.md ("Adding a rule") lists every file it touches.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cached_property, lru_cache
from types import ModuleType

from collcheck.checks._describe import in_local_ranks
from collcheck.config import RuleSelection, Settings
from collcheck.findings import Severity
from collcheck.static.anchor import Anchor
from collcheck.static.divergence import Divergence, DivergenceKind

# code -> (module, status, version it appeared in). Status: stable | preview | removed.
CODE_TABLE: dict[str, tuple[str, str, str]] = {
    "CC001": ("cc001_mismatched_collective_sequence", "stable", "0.1.0"),
    "CC002": ("cc002_rank_dependent_loop", "stable", "0.1.0"),
    "CC003": ("cc003_rank_dependent_early_exit", "stable", "0.1.0"),
    "CC004": ("cc004_divergent_group_creation", "stable", "0.1.0"),
    "CC005": ("cc005_point_to_point_deadlock", "stable", "0.1.0"),
    "CC006": ("cc006_rank_dependent_collective_argument", "stable", "0.1.0"),
    "CC007": ("cc007_per_process_value_guard", "stable", "0.1.0"),
    "CC008": ("cc008_per_rank_data_guard", "stable", "0.2.0"),
    "CC009": ("cc009_collective_during_async_save", "stable", "0.2.0"),
    "CC101": ("cc101_all_gather_over_budget", "stable", "0.1.0"),
    "CC102": ("cc102_all_gather_object_on_tensors", "preview", "0.1.0"),
}


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    message: str
    status: str
    since: str
    default_enabled: bool
    doc: str
    module: ModuleType
    claims: frozenset[DivergenceKind] = frozenset()
    precedence: int = 0
    anchor: Anchor = Anchor.ELEMENT
    explains: frozenset[str] = frozenset()

    def claim(self, divergence: Divergence) -> bool:
        """This rule reports `divergence` unless a rule of lower precedence claims it first."""
        if divergence.kind not in self.claims:
            return False
        applies = getattr(self.module, "applies", None)
        return applies is None or bool(applies(divergence))

    def describe(self, divergence: Divergence) -> tuple[str, dict[str, str]]:
        """The rule's message template and arguments for `divergence`, in the rule's own words
        for ranks among a group's members (its `in_local_ranks`, else the shared one)."""
        template, args = self.module.describe(divergence)
        phrase = getattr(self.module, "in_local_ranks", in_local_ranks)
        described: tuple[str, dict[str, str]] = phrase(template, args, divergence)
        return described

    @property
    def summary(self) -> str:
        """The first paragraph of the rule's *What it does* section."""
        lines = self.doc.strip().splitlines()
        body: list[str] = []
        for line in lines[1:] if lines and lines[0].lower().startswith("## what") else lines:
            if not line.strip():
                if body:
                    break
                continue
            if line.startswith("##"):
                continue
            body.append(line.strip())
        return " ".join(body)


def _load(code: str) -> Rule | None:
    module_name, status, since = CODE_TABLE[code]
    try:
        module = importlib.import_module(f"collcheck.checks.{module_name}")
    except ModuleNotFoundError as error:
        if error.name == f"collcheck.checks.{module_name}":
            return None  # a code reserved in the table whose module has not landed yet
        raise
    return Rule(
        code=module.CODE,
        name=module.NAME,
        severity=module.SEVERITY,
        message=module.MESSAGE,
        status=status,
        since=since,
        default_enabled=getattr(module, "DEFAULT_ENABLED", status == "stable"),
        doc=module.__doc__ or "",
        module=module,
        claims=getattr(module, "CLAIMS", frozenset()),
        precedence=getattr(module, "PRECEDENCE", 0),
        anchor=getattr(module, "ANCHOR", Anchor.ELEMENT),
        explains=frozenset(getattr(module, "EXPLAINS", ())),
    )


@lru_cache(maxsize=1)
def all_rules() -> tuple[Rule, ...]:
    rules = (_load(code) for code in CODE_TABLE)
    return tuple(rule for rule in rules if rule is not None)


def rule_by_code(code: str) -> Rule | None:
    code = code.upper()
    return next((rule for rule in all_rules() if rule.code == code), None)


def default_enabled_codes() -> frozenset[str]:
    return frozenset(rule.code for rule in all_rules() if rule.default_enabled)


def markdown_table() -> str:
    """The README's rule table, generated from the rule docstrings (never written twice)."""
    lines = ["| code | name | severity | default | what it finds |", "| --- | --- | --- | --- | --- |"]
    for rule in all_rules():
        default = "on" if rule.default_enabled else "off"
        lines.append(f"| {rule.code} | {rule.name} | {rule.severity.value} | {default} | {rule.summary} |")
    return "\n".join(lines)


def rule_selection(settings: Settings) -> RuleSelection:
    """Which codes this run reports, ruff-style (select, extend-select, ignore; prefixes allowed)."""
    select = settings.select + settings.extend_select if settings.select else settings.extend_select
    return RuleSelection(
        select=select if settings.select else (),
        ignore=settings.ignore,
        default_enabled=default_enabled_codes() | frozenset(settings.extend_select),
    )


@dataclass(frozen=True)
class StaticRules:
    """The rules a run asks about divergences and regions.

    `claiming` holds every rule with claims, by precedence, selected or not: a divergence belongs to
    the first rule that claims it, and is not reported when that rule is deselected (it is not
    handed to the next rule; the API drops it after suppressions are matched, so a suppression of a
    switched-off rule is still used). Only the kinds selected rules claim are searched for
    (`wanted`); rules that claim a kind not searched for are `unsearched`.
    """

    claiming: tuple[Rule, ...]
    selected: frozenset[str]

    @cached_property
    def wanted(self) -> frozenset[DivergenceKind]:
        return frozenset(kind for rule in self.claiming if rule.code in self.selected for kind in rule.claims)

    @cached_property
    def region_rules(self) -> tuple[Rule, ...]:
        return tuple(rule for rule in all_rules() if hasattr(rule.module, "describe_region"))

    @cached_property
    def any(self) -> bool:
        """Some selected rule is about collective programs: extraction and solving are needed."""
        return bool(self.wanted) or any(rule.code in self.selected for rule in self.region_rules)

    @cached_property
    def unsearched(self) -> frozenset[str]:
        """Codes some of whose findings this run does not look for (nothing to suppress there)."""
        if not self.any:
            return frozenset(rule.code for rule in (*self.claiming, *self.region_rules))
        return frozenset(rule.code for rule in self.claiming if not rule.claims <= self.wanted)


def static_rules(settings: Settings | None = None) -> StaticRules:
    """The rules of `settings`'s selection (None: every rule, as when reporting in another file)."""
    claiming = tuple(sorted((r for r in all_rules() if r.claims), key=lambda r: r.precedence))
    if settings is None:
        return StaticRules(claiming, frozenset(rule.code for rule in all_rules()))
    selection = rule_selection(settings)
    return StaticRules(claiming, frozenset(rule.code for rule in all_rules() if selection.enabled(rule.code)))
