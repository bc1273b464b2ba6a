"""Where two ranks' collective sequences part: aligned, not compared position by position.

In: two ranks' sequences of elements (`program.Element`) on one channel. Out: a `Parting` (or
None when the sequences agree position by position, signature by signature): how many elements
both ranks issue alike before it (`index`, the same position in both sequences, since everything
before it pairs up in order), and which rank's element at that position pairs with nothing
(`Unmatched`): each rank's (they issue different calls there, or one of them has ended), or only
one rank's (a call the other rank does not make at that point: after it, the rank issues what the
other issues from there on).

Why align: under `if rank == 0:` rank 0 runs `model(x)` once more before the training
`model(x)`, and issues [forward, forward, backward] where rank 1 issues [forward, backward].
Position by position, the guarded forward pairs with rank 1's training forward and the ranks
appear to part at the training forward against the backward; the call to report is the extra
one. The alignment is a longest common subsequence of the elements' signatures (what pairs at
run time), and among the longest, the one that pairs most calls made at the same place in the
code (`_site`): the training forward of rank 0 pairs with rank 1's, and the guarded one is left.

Two sequences that hold the same signatures in another order are a swap, not an insertion and a
deletion: they part where the orders first differ, with both ranks' elements there (as the
positional comparison says). Cost is bounded: the common prefix and suffix of identical calls are
taken off first, and a middle larger than `MAX_CELLS` is compared position by position.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from collcheck.static.program import Element

# Cells of the alignment table (the two middles' lengths multiplied) above which the sequences are
# compared position by position; the middles are what is left once the common prefix and suffix
# of identical calls are off, a few elements in practice.
MAX_CELLS = 10_000


class Unmatched(Enum):
    """Whose element at the parting position pairs with nothing."""

    BOTH = "both"  # each rank issues another call there (or one of them has ended)
    A = "a"  # only the first rank's: an element it issues that the second does not, at that point
    B = "b"  # only the second rank's


@dataclass(frozen=True)
class Parting:
    """The first place where two sequences part: the first `index` elements of each pair up."""

    index: int
    unmatched: Unmatched = Unmatched.BOTH

    def shows_a(self) -> bool:
        """The first rank's element at `index` (if it has one) is part of the difference."""
        return self.unmatched is not Unmatched.B

    def shows_b(self) -> bool:
        return self.unmatched is not Unmatched.A


def positional_parting(seq_a: Sequence[Element], seq_b: Sequence[Element]) -> int | None:
    """The first position whose two elements differ in signature (or where one sequence ends)."""
    for index, (x, y) in enumerate(zip(seq_a, seq_b, strict=False)):
        if x.signature() != y.signature():
            return index
    if len(seq_a) != len(seq_b):
        return min(len(seq_a), len(seq_b))
    return None


def first_parting(seq_a: Sequence[Element], seq_b: Sequence[Element]) -> Parting | None:
    """Where the sequences part (None: they agree position by position)."""
    positional = positional_parting(seq_a, seq_b)
    if positional is None:
        return None
    if Counter(e.signature() for e in seq_a) == Counter(e.signature() for e in seq_b):
        return Parting(positional)  # the same calls in another order: a swap, shown on both ranks
    start = _common_prefix(seq_a, seq_b)
    end_a, end_b = len(seq_a), len(seq_b)
    while end_a > start and end_b > start and _identical(seq_a[end_a - 1], seq_b[end_b - 1]):
        end_a, end_b = end_a - 1, end_b - 1
    middle_a, middle_b = seq_a[start:end_a], seq_b[start:end_b]
    if len(middle_a) * len(middle_b) > MAX_CELLS:
        return Parting(positional)
    offset, unmatched = _first_unmatched_run(middle_a, middle_b)
    return Parting(start + offset, unmatched)


def _site(element: Element) -> tuple[object, ...]:
    return (element.path, element.line, element.column, element.chain)


def _identical(x: Element, y: Element) -> bool:
    """The same call: the same signature, made at the same place (through the same calls)."""
    return x.signature() == y.signature() and _site(x) == _site(y)


def _common_prefix(seq_a: Sequence[Element], seq_b: Sequence[Element]) -> int:
    count = 0
    for x, y in zip(seq_a, seq_b, strict=False):
        if not _identical(x, y):
            break
        count += 1
    return count


def _first_unmatched_run(seq_a: Sequence[Element], seq_b: Sequence[Element]) -> tuple[int, Unmatched]:
    """The position of the first elements of an optimal alignment that pair with nothing, and
    whose they are. An alignment pairs elements of equal signature in order; the best pairs the
    most, then the most made at the same place. Walked from the start, pairing whenever pairing
    stays optimal, so that the run found is the earliest."""
    n, m = len(seq_a), len(seq_b)
    weight = min(n, m) + 1  # one more pair outweighs any number of same-place pairs
    # best[i][j]: the score of the best alignment of seq_a[i:] with seq_b[j:]
    best = [[0] * (m + 1) for _ in range(n + 1)]
    signatures_b = [e.signature() for e in seq_b]
    sites_b = [_site(e) for e in seq_b]
    for i in range(n - 1, -1, -1):
        signature, site = seq_a[i].signature(), _site(seq_a[i])
        row, below = best[i], best[i + 1]
        for j in range(m - 1, -1, -1):
            score = max(below[j], row[j + 1])
            if signatures_b[j] == signature:
                score = max(score, below[j + 1] + weight + (site == sites_b[j]))
            row[j] = score
    i = j = 0
    while i < n and j < m:
        pair = weight + (_site(seq_a[i]) == sites_b[j])
        if signatures_b[j] == seq_a[i].signature() and best[i][j] == best[i + 1][j + 1] + pair:
            i, j = i + 1, j + 1
            continue
        skips_a = best[i][j] == best[i + 1][j]
        skips_b = best[i][j] == best[i][j + 1]
        if skips_a and skips_b:
            return i, Unmatched.BOTH
        return i, Unmatched.A if skips_a else Unmatched.B
    # One middle is used up: the rest of the other pairs with nothing (or both are: no parting
    # left inside the middles, which cannot happen when the sequences differ).
    return i, Unmatched.A if i < n else Unmatched.B
