"""The textual prefilter's pattern: words that mean a file may communicate, and the catalog's words
that mark a function as computing something from the rank (the project index reads both). Cheap
to import."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from collcheck.catalog import Catalog


class Trigger:
    """Does a text mention communication? Distinctive names (`all_reduce`, `barrier`) suffice;
    plain words that other libraries use too (`gather`, `reduce`, `save`) count only as a call or
    import (`.gather(`) in a text that also names a distributed library."""

    def __init__(
        self,
        distinctive: list[str],
        plain: list[str],
        markers: tuple[str, ...] = (),
        assumed: frozenset[str] = frozenset(),
    ) -> None:
        # Sets of identifiers, not one big alternation: Python's re has no multi-pattern matcher,
        # and an alternation of a few hundred words costs ~1 ms per file.
        self.distinctive = frozenset(distinctive)
        self.plain = frozenset(plain)
        # Catalog-driven library markers (`.accelerator.`: a catalogued attribute of a framework
        # class, `self.accelerator.gather(...)` in a transformers Trainer subclass).
        self.markers = markers
        # Of those words, the ones that communicate only under an assumed gradient reduction
        # (`backward`, `training_step`: `Catalog.assumed_trigger_words`, less any word that also
        # names real communication).
        self.assumed = assumed

    def communicating(self, text: str, positions: list[int]) -> list[int]:
        """Of `positions` (a text's uses), those of words that communicate whatever is assumed:
        what makes a function worth following from another file (`project.file_facts`)."""
        if not self.assumed:
            return positions
        return [at for at in positions if _word_at(text, at) not in self.assumed]

    def positions(self, text: str, words: frozenset[str] | None = None) -> list[int]:
        """Where the text uses a communicating name as code: called, reached through a dot or
        imported (a word in prose or a comment, `a barrier to entry`, is not a use). Plain words
        count only in a text that also names a distributed library."""
        words = frozenset(IDENTIFIER.findall(text)) if words is None else words
        strong = words & self.distinctive
        plain = words & self.plain if names_distributed_library(text, self.markers) else frozenset()
        if not strong and not plain:
            return []
        # Only the few words this text contains are searched for, as whole words.
        found = []
        import_before = _ImportBefore(text)
        for match in whole_words(word_pattern(strong | plain), text):
            word = match.group()
            if word in strong:
                if _used_as_code(text, match.start(), match.end(), import_before):
                    found.append(match.start())
            elif (
                _after_dot(text, match.start(), import_before)
                and _receiver(text, match.start()) not in _OTHER_RECEIVERS
            ):
                found.append(match.start())
        return code_positions(text, found) if found else found

    def search(self, text: str, pos: int = 0, endpos: int | None = None) -> bool:
        end = len(text) if endpos is None else endpos
        return self.matches(frozenset(IDENTIFIER.findall(text, pos, end)), text[pos:end])

    def matches(self, words: frozenset[str], text: str) -> bool:
        """`search` for a text whose identifiers are already known."""
        if words.isdisjoint(self.distinctive) and words.isdisjoint(self.plain):
            return False
        return bool(self.positions(text, words=words))


def trigger_pattern(catalog: Catalog) -> Trigger:
    trigger = _TRIGGERS.get(catalog.fingerprint)
    if trigger is None:
        words = sorted(catalog.trigger_words, key=len, reverse=True)
        distinctive = [w for w in words if "_" in w.strip("_") or w in DISTINCTIVE_WORDS]
        markers = tuple(f".{attribute}." for attribute in sorted(catalog.typed_attributes))
        assumed = catalog.assumed_trigger_words - catalog.communication_words
        trigger = Trigger(distinctive, [w for w in words if w not in distinctive], markers, assumed)
        _TRIGGERS[catalog.fingerprint] = trigger
    return trigger


_TRIGGERS: dict[str, Trigger] = {}
_RANK_WORDS: dict[str, frozenset[str]] = {}


def rank_words(catalog: Catalog) -> frozenset[str]:
    """Words that mark a function as computing something from the rank (catalog-driven)."""
    words = _RANK_WORDS.get(catalog.fingerprint)
    if words is None:
        found = {name.rsplit(".", 1)[-1] for name in catalog.rank_functions}
        found |= set(catalog.rank_env) | set(catalog.rank_attributes) | set(catalog.rank_methods)
        found |= {name.rsplit(".", 1)[-1] for name in catalog.rank_decorators}
        # `x.size()` is everywhere and says nothing about a rank.
        words = _RANK_WORDS[catalog.fingerprint] = frozenset(found - {"size"})
    return words


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _word_at(text: str, position: int) -> str:
    match = IDENTIFIER.match(text, position)
    return match.group() if match is not None else ""


def word_pattern(words: Iterable[str]) -> re.Pattern[str]:
    """Any of `words` ending a word; `whole_words` keeps those that also start one. Without a
    leading `\b` the regex engine skips to the words' first letters instead of trying every
    character (about 2.5 times faster on the torch tree)."""
    listed = sorted(words)
    if not listed:
        return re.compile(r"(?!)")  # no word: never a match (an empty alternation matches anywhere)
    return re.compile("(?:" + "|".join(map(re.escape, listed)) + r")\b")


def whole_words(
    pattern: re.Pattern[str], text: str, start: int = 0, end: int | None = None
) -> Iterator[re.Match[str]]:
    """The matches of a `word_pattern` between `start` and `end` that start a word. A match that
    does not lies inside one word (it ends where that word ends), so none is skipped by going on
    after it."""
    position, stop = start, len(text) if end is None else end
    while (match := pattern.search(text, position, stop)) is not None:
        at = match.start()
        if at == 0 or not (text[at - 1].isalnum() or text[at - 1] == "_"):
            yield match
        position = max(match.end(), at + 1)  # never stuck on an empty match


# A comment, or a string literal whole (any prefix; an escaped quote does not close it; one never
# closed runs to the end of its line, or of the text for a triple-quoted one): text that is no
# code. No alternative can fail once it has opened, and each runs of plain characters are taken
# in one step, so a scan is linear in the text, whatever it holds.
_NOT_CODE = re.compile(
    r"#[^\n]*"
    r'|"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*(?:"""|\Z)'
    r"|'''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*(?:'''|\Z)"
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*(?:"|$)'
    r"|'[^'\\\n]*(?:\\.[^'\\\n]*)*(?:'|$)",
    re.DOTALL | re.MULTILINE,
)


def code_positions(text: str, positions: list[int]) -> list[int]:
    """Of `positions` (ascending), those outside comments and string literals: a docstring that
    quotes `loss.backward()`, a comment naming `dist.barrier()`, are prose. The text is read from
    its start to the last position only (a string opens before the word it holds)."""
    kept: list[int] = []
    index, last = 0, positions[-1]
    for match in _NOT_CODE.finditer(text, 0, last + 1):
        start, end = match.span()
        while index < len(positions) and positions[index] < start:
            kept.append(positions[index])
            index += 1
        while index < len(positions) and positions[index] < end:
            index += 1  # inside the comment or string
        if index == len(positions):
            return kept
    kept.extend(positions[index:])
    return kept


def _used_as_code(text: str, start: int, end: int, import_before: _ImportBefore) -> bool:
    """`all_reduce(`, `.barrier`, `from m import all_reduce`: the word names the API."""
    after = text[end : end + 3].lstrip(" ")
    return after.startswith("(") or _after_dot(text, start, import_before)


def _after_dot(text: str, position: int, import_before: _ImportBefore) -> bool:
    """`x.gather(` or `from m import gather`: the plain word is used as an API name."""
    before = text[max(0, position - 1) : position]
    return before == "." or import_before(position)


class _ImportBefore:
    """Whether `import` stands on a position's line before it, for positions asked in ascending
    order (a text's matches): the line's start and how far it was searched are carried along, so
    a long line with many matches is read once, not once a match (a 2 MB line of them took 47 s)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.scanned = self.line_start = self.searched = 0
        self.found = False

    def __call__(self, position: int) -> bool:
        text = self.text
        if position < self.scanned:  # out of order: read the line
            return "import" in text[text.rfind("\n", 0, position) + 1 : position]
        newline = text.rfind("\n", self.scanned, position)
        if newline != -1:
            self.line_start = self.searched = newline + 1
            self.found = False
        self.scanned = position
        if not self.found:
            # from a little before the last search's end: an `import` may straddle it
            self.found = text.find("import", max(self.line_start, self.searched - 5), position) != -1
            self.searched = position
        return self.found


def _receiver(text: str, position: int) -> str:
    """`functools` in `functools.reduce`: the word before the dot ("" when there is none)."""
    start = position - 1
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    return text[start : position - 1]


# Receivers whose `reduce`, `gather`, `save`, `load`, `scatter`, ... are not communication.
_OTHER_RECEIVERS = frozenset(
    {
        "functools",
        "torch",
        "json",
        "pickle",
        "yaml",
        "np",
        "numpy",
        "jnp",
        "jit",
        "operator",
        "os",
        "importlib",
        "sympy",
        "math",
        "shutil",
        "tf",
        "Tensor",
        "marshal",
        "toml",
        "tomllib",
    }
)
DISTINCTIVE_WORDS = frozenset({"barrier", "allreduce", "allgather", "reducescatter", "alltoall"})
# Names that show a text imports or names a distributed library (plain words count only there).
# Substring tests: one regex alternation over a whole file costs ~1 ms.
_LIBRARY_MARKERS = (
    "torch.distributed",
    "c10d",
    "import distributed",
    "deepspeed",
    "accelerate",
    "lightning",
    "megatron",
    "vllm",
    "torch_npu",
)


def names_distributed_library(text: str, extra: tuple[str, ...] = ()) -> bool:
    return any(marker in text for marker in _LIBRARY_MARKERS) or any(marker in text for marker in extra)
