"""Which finding a divergence becomes: the layer between the static analyzer and the rules.

In: what collcheck.static found — a `Divergence` (solve, p2p_schedule), a `Region` with the
divergences found in it, a `ModuleContext` — and the rules of collcheck.checks with their hooks:
`CLAIMS`, `applies` and `PRECEDENCE` (which rule owns a divergence), `ANCHOR` and `cause` (where
its finding is shown), `describe` and `in_local_ranks` (its words), `EXPLAINS` (which other
rules' findings one of its findings explains), `describe_region`, `check_module`.
Out: `Candidate`s (a `Finding`, the place its divergence arises, the calls it went through), and
the one-root-cause policy over them (`RootCauses`, `Classifier.one_root_cause`).

A `Classifier` is the `static.rulebook.Rulebook` that collcheck.api hands the engine: the static
package calls it without importing it, and names no rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from collcheck.catalog import is_assumed_op
from collcheck.checks import Rule, StaticRules, all_rules, static_rules
from collcheck.config import Settings
from collcheck.findings import Finding, Location, Severity
from collcheck.static.anchor import Anchor, locate
from collcheck.static.context import ModuleContext
from collcheck.static.counterexample import counterexample
from collcheck.static.divergence import Divergence, DivergenceKind
from collcheck.static.program import LoopEvent, Region, Site
from collcheck.static.rulebook import Candidate, Condition


def splitting_conditions(finding: Finding) -> frozenset[Condition]:
    """The conditions that split the ranks of `finding`'s counterexample."""
    example = finding.counterexample
    if example is None:
        return frozenset()
    return frozenset((reason.path, reason.line, reason.condition) for reason in example.why)


@dataclass(frozen=True)
class RootCauses:
    """Findings that explain other rules' findings (a rule's `EXPLAINS`): for each code explained,
    the conditions that split the ranks of the explaining findings, each with the functions where
    such a finding was found."""

    by_code: Mapping[str, Mapping[Condition, frozenset[str]]]

    def explain(self, finding: Finding, split: frozenset[Condition], *, elsewhere: bool) -> bool:
        """Every condition of `split` (`finding`'s) splits the ranks of a finding that explains
        `finding`'s code; with `elsewhere`, one found in another function than `finding`."""
        causes = self.by_code.get(finding.code, {})
        return bool(split) and all(
            condition in causes and (not elsewhere or causes[condition] - {finding.function})
            for condition in split
        )


class Classifier:
    """The rules of a run (`StaticRules`), asked about what the static analyzer found (the engine's
    `Rulebook`)."""

    def __init__(self, rules: StaticRules) -> None:
        self.rules = rules
        self.explained_by: dict[str, frozenset[str]] = {}
        for rule in all_rules():
            for code in rule.explains:
                self.explained_by[code] = self.explained_by.get(code, frozenset()) | {rule.code}

    @property
    def wanted(self) -> frozenset[DivergenceKind]:
        """The kinds of divergence some selected rule claims: the only ones searched for."""
        return self.rules.wanted

    @property
    def any(self) -> bool:
        """Some selected rule is about collective programs: extraction and solving are needed."""
        return self.rules.any

    @property
    def unsearched(self) -> frozenset[str]:
        """Codes some of whose findings this run does not look for."""
        return self.rules.unsearched

    def every_rule(self) -> Classifier:
        """Every rule, whatever the run's selection (a helper run alone to place a finding)."""
        return classifier(None)

    def owner(self, divergence: Divergence) -> Rule | None:
        """The rule that reports `divergence`: the first, by precedence, that claims it (selected or
        not: a divergence whose owner is deselected is not handed to the next rule)."""
        return next((rule for rule in self.rules.claiming if rule.claim(divergence)), None)

    def finding(self, divergence: Divergence) -> Candidate | None:
        """The finding of the rule that owns `divergence`, where it arises, and the calls it went
        through."""
        rule = self.owner(divergence)
        if rule is None:
            return None
        template, args = rule.describe(divergence)
        primary, origin = locate(divergence, rule.anchor)
        cause = getattr(rule.module, "cause", None)
        cause_at: Location | None = cause(divergence) if cause is not None else None
        shown_at = getattr(rule.module, "shown_at", None)  # else at the cause
        shown: Location | None = shown_at(divergence) if shown_at is not None else cause_at
        if rule.anchor is Anchor.GUARD and shown is not None and shown.path == primary.path:
            primary = shown  # the guard that reads the cause, in the file of the finding
        finding = Finding(
            code=rule.code,
            # a divergence over a reduction assumed, not seen, is as sure as that assumption
            severity=Severity.WARNING if _rests_on_assumption(divergence) else rule.severity,
            location=primary,
            message_template=template,
            message_args=tuple(sorted(args.items())),
            counterexample=counterexample(divergence),
            function=divergence.region.function,
            cause=cause_at,
        )
        code = rule.code
        key = (code, origin[0], origin[1]) if origin else (code, primary.path, primary.line)
        sites = _divergence_sites(divergence)
        if code in self.explained_by and any(r.path != divergence.region.path_name for r in divergence.why):
            # Split in a helper of another file: ask that helper too whether its own finding
            # explains this one.
            sites = _sequence_sites(divergence, sites)
        return Candidate(finding, key, sites)

    def region_findings(self, region: Region, found: list[Divergence]) -> list[Candidate]:
        """The rules' findings about a whole region, told what the solver found in it (`found`)."""
        candidates = []
        for rule in self.rules.region_rules:
            described = rule.module.describe_region(region, found)
            if described is None:
                continue
            template, args = described
            location = Location(region.path_name, region.line, 0)
            finding = Finding(
                rule.code,
                rule.severity,
                location,
                template,
                tuple(sorted(args.items())),
                None,
                region.function,
            )
            candidates.append(Candidate(finding, (rule.code, region.path_name, region.line), ()))
        return candidates

    def module_findings(self, context: ModuleContext) -> list[Finding]:
        """The selected rules' checks over the parse tree (`check_module`)."""
        findings: list[Finding] = []
        for rule in all_rules():
            if rule.code not in self.rules.selected:
                continue  # a rule switched off costs nothing
            check = getattr(rule.module, "check_module", None)
            if check is not None:
                findings.extend(check(context))
        return findings

    def explainable(self, finding: Finding) -> frozenset[Condition]:
        """The conditions splitting `finding`'s ranks when another rule's finding may explain it."""
        return splitting_conditions(finding) if finding.code in self.explained_by else frozenset()

    def root_causes(self, candidates: list[Candidate]) -> RootCauses:
        """What the explaining findings among `candidates` explain, by code and condition."""
        by_code: dict[str, dict[Condition, frozenset[str]]] = {}
        for candidate in candidates:
            finding = candidate.finding
            explained = [code for code, by in self.explained_by.items() if finding.code in by]
            if not explained:
                continue
            for condition in splitting_conditions(finding):
                for code in explained:
                    causes = by_code.setdefault(code, {})
                    causes[condition] = causes.get(condition, frozenset()) | {finding.function}
        return RootCauses(by_code)

    def one_root_cause(self, candidates: list[Candidate]) -> list[Candidate]:
        """A cause found in one function is reported once, there: an early exit in a helper
        (CC003's `EXPLAINS`) makes the helper's callers see ranks issue different sequences (the
        `return` ends only the helper), the same cause, not reported again as CC001 there. A
        finding is explained when every condition that splits its ranks also splits those of a
        finding that explains its code, found in another function."""
        causes = self.root_causes(candidates)
        if not causes.by_code:
            return candidates
        return [
            candidate
            for candidate in candidates
            if not causes.explain(candidate.finding, self.explainable(candidate.finding), elsewhere=True)
        ]


def classifier(settings: Settings | None = None) -> Classifier:
    """The rules of `settings`'s selection (None: every rule, as when reporting in another file)."""
    return Classifier(static_rules(settings))


def _rests_on_assumption(d: Divergence) -> bool:
    """Either rank's element at the divergence is (or loops over) an assumed gradient reduction."""
    elements = [e for e in (d.event_a, d.event_b) if e is not None]
    return any(
        is_assumed_op(op) for e in elements for op in (e.body_ops if isinstance(e, LoopEvent) else (e.op,))
    )


def _sequence_sites(d: Divergence, sites: tuple[Site, ...]) -> tuple[Site, ...]:
    """`sites`, then the calls through which either rank's sequence went before the divergence."""
    found = dict.fromkeys(sites)
    for sequence in (d.sequence_a, d.sequence_b):
        for element in sequence[: d.index + 1]:
            found.update(dict.fromkeys(element.chain))
    return tuple(found)


def _divergence_sites(d: Divergence) -> tuple[Site, ...]:
    sites: dict[Site, None] = {}
    for element in (d.event_a, d.event_b):
        if element is not None:
            sites.update(dict.fromkeys(element.chain))
    if d.exit is not None:
        sites.update(dict.fromkeys(d.exit.chain))
    return tuple(sites)
