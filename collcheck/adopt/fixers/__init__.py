"""The fixers: one module per kind of fix, each serving one rule.

Each module of this package declares

    RULE      the code of the rule whose findings it rewrites (a code of collcheck.checks' table)
    VARIANTS  the shapes of that rule's findings it handles: members of the rule module's
              `Variant` Enum, which the rule's `variant(finding)` tells apart
    fix(source, finding) -> Rewrite | None

In: a finding. Out: the fixers to try on it (`fixers_for`): the finding's rule, found in the rule
table by its code, names the finding's variant; the modules here whose `RULE` is that code and
whose `VARIANTS` hold that variant are its fixers. The modules are found by listing this package,
so adding a fixer is adding its module (no list to keep); tests/test_fixes.py checks that each
declares a rule of the table and variants of that rule. Every module here imports libcst: this
package is imported only when a fix is asked for.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from types import ModuleType

from collcheck.adopt.rewrite import Fixer
from collcheck.checks import rule_by_code
from collcheck.findings import Finding


@lru_cache(maxsize=1)
def fixer_modules() -> tuple[ModuleType, ...]:
    """Every fixer module of this package, by name."""
    names = sorted(info.name for info in pkgutil.iter_modules(__path__))
    return tuple(importlib.import_module(f"{__name__}.{name}") for name in names)


def fixers_for(finding: Finding) -> tuple[Fixer, ...]:
    """The fixers that handle `finding`'s rule and variant, by module name; () when none."""
    rule = rule_by_code(finding.code)
    classify = getattr(rule.module, "variant", None) if rule is not None else None
    variant = classify(finding) if classify is not None else None
    if variant is None:
        return ()
    return tuple(
        module.fix for module in fixer_modules() if finding.code == module.RULE and variant in module.VARIANTS
    )
