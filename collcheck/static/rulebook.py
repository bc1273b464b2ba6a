"""What the engine asks of the rules, without knowing any: the `Rulebook` protocol and its answers.

In: nothing (types only). Out: `Rulebook` (implemented by collcheck.classify.Classifier, built by
collcheck.api and handed to `engine.analyze_source`), `Candidate` (a finding before
deduplication), `Explanations` (which findings one root cause explains) and `Condition`.

The engine calls the rulebook it is given; it imports no rule and no classification code, so the
arrows between the layers point down only: api -> classify -> checks -> static.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from collcheck.findings import Finding
from collcheck.static.context import ModuleContext
from collcheck.static.divergence import Divergence, DivergenceKind
from collcheck.static.program import Region, Site

# A condition that splits two ranks, as a counterexample's `why` names it: (path, line, text).
Condition = tuple[str, int, str]


@dataclass(frozen=True)
class Candidate:
    """A finding before deduplication: where its divergence arises (`origin`: code, path, line),
    and the calls it went through (`sites`: the helpers that may report it themselves)."""

    finding: Finding
    origin: tuple[str, str, int]
    sites: tuple[Site, ...]


class Explanations(Protocol):
    """What the explaining findings of a run (one function, or a helper run alone) explain."""

    def explain(self, finding: Finding, split: frozenset[Condition], *, elsewhere: bool) -> bool:
        """Every condition of `split` (`finding`'s) splits the ranks of a finding that explains
        `finding`'s code; with `elsewhere`, one found in another function than `finding`."""
        ...


class Rulebook(Protocol):
    """The rules of a run, as the engine asks them about what it found."""

    @property
    def wanted(self) -> frozenset[DivergenceKind]:
        """The kinds of divergence some selected rule claims: the only ones searched for."""
        ...

    @property
    def any(self) -> bool:
        """Some selected rule is about collective programs: extraction and solving are needed."""
        ...

    @property
    def unsearched(self) -> frozenset[str]:
        """Codes some of whose findings this run does not look for."""
        ...

    def every_rule(self) -> Rulebook:
        """Every rule, whatever the run's selection (a helper run alone to place a finding)."""
        ...

    def finding(self, divergence: Divergence) -> Candidate | None:
        """The finding of the rule that owns `divergence`, if any."""
        ...

    def region_findings(self, region: Region, found: list[Divergence]) -> list[Candidate]:
        """The rules' findings about a whole region, told what the solver found in it."""
        ...

    def module_findings(self, context: ModuleContext) -> list[Finding]:
        """The selected rules' checks over the parse tree."""
        ...

    def explainable(self, finding: Finding) -> frozenset[Condition]:
        """The conditions splitting `finding`'s ranks when another rule's finding may explain it."""
        ...

    def root_causes(self, candidates: list[Candidate]) -> Explanations:
        """What the explaining findings among `candidates` explain."""
        ...

    def one_root_cause(self, candidates: list[Candidate]) -> list[Candidate]:
        """`candidates` less those a finding in another function explains."""
        ...
