"""What a `collcheck check` asks of the adoption flow: the fix, suppression and baseline options.

In: the command line's options. Out: an `Adoption` (frozen), read by collcheck.adopt.flow, and the
error every step of the flow raises for a request it cannot carry out. Light on purpose: the
plain check imports this module (its options carry an `Adoption`) and nothing else of the flow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from collcheck.config import Settings
from collcheck.findings import Applicability


class AdoptionError(ValueError):
    """A request that cannot be carried out (a bad baseline, libcst missing): exit code 2."""


def require_libcst() -> None:
    import importlib.util

    if importlib.util.find_spec("libcst") is None:
        raise AdoptionError("fixes need libcst: pip install 'collcheck[fix]'")


@dataclass(frozen=True)
class Adoption:
    """The fix, suppression and baseline options of one `collcheck check`."""

    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    show_fixes: bool = False
    add_ignore: str | None = None  # the reason; "" for none
    baseline: Path | None = None
    write_baseline: Path | None = None

    @property
    def writes(self) -> bool:
        """Whether carrying it out writes files (which then need `WriteRoots`)."""
        return self.fix or self.add_ignore is not None or self.write_baseline is not None

    @property
    def requested(self) -> bool:
        return self.wants_fixes or self.add_ignore is not None or bool(self.baseline or self.write_baseline)

    @property
    def wants_fixes(self) -> bool:
        return self.fix or self.unsafe_fixes or self.diff or self.show_fixes

    @property
    def allowed(self) -> frozenset[Applicability]:
        if self.unsafe_fixes:
            return frozenset(Applicability)
        return frozenset({Applicability.SAFE})


def baseline_path(option: Path | None, settings: Settings) -> Path | None:
    """`--baseline` wins over `baseline = ...` in the configuration."""
    if option is not None:
        return option
    return Path(settings.baseline) if settings.baseline else None
