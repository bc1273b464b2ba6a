"""What one file's analysis read of the other files of the run: the key its cached answer keeps.

In: the loader's reports, each time it hands out another file's model (built now or kept from an
earlier file), of what that model was built from: the file's real path with the index's digest of
its text (`project.text_digest`), and what building and completing the model read in turn
(`ModuleInfo.reads`); and the index's report of where each name looked up landed
(`Project.lookup`). Out: per analysed file, {read: digest} of every other file its answer was
computed from and every name it looked up (`FileResult.reads`). The cache serves a stored answer
only while each file still has that digest and each name lands where it did
(`project.Project.still_reads`), so that an edit re-checks the files that read the edited one, and
an added file the files whose names land in it, not every file whose imports could reach them
(issue 26: one quiet edit in vllm re-checked 764 of 951 files by the index's reach).

Recording is a stack of frames, one per analysed file and one per model being built inside it:
a frame's reads are added to the frame below when it closes, so a model's own reads are known
when it is kept for later files (which then report them again), and the analysed file gets them
all. Reads made with no frame open (package summaries) are not recorded. A process memo that
keeps what was computed from other files across analysed files must keep its reads with it and
report them again when it answers (`engine._standalone_origins`); memos of one file's syntax
need not.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

# A name looked up in the index (`Project.lookup`) is recorded as LOOKUP, the importer's folder,
# NUL, the name, with where it landed as its "digest" (a real path never starts with NUL).
LOOKUP = "\0lookup\0"
# A file read twice with two different digests (edited during the run): no later run has it, so
# an answer computed from both texts is never served.
MIXED = "!mixed"


class _Frame:
    """The reads of one frame, and the models whose reads it already took (by the identity of
    their `reads` table, each held so that its identity is not reused while the frame lives): a
    model is handed out many times in one analysis, and taking its reads again would be a dict
    update each time (measured: 3% of a cold vllm run)."""

    def __init__(self) -> None:
        self.reads: dict[str, str] = {}
        self.models: dict[int, Mapping[str, str]] = {}


_FRAMES: list[_Frame] = []


@contextmanager
def recording() -> Iterator[dict[str, str]]:
    """A frame for the reads of what runs inside; on exit they are also the enclosing frame's."""
    frame = _Frame()
    _FRAMES.append(frame)
    try:
        yield frame.reads
    finally:
        _FRAMES.pop()
        note(frame.reads)


def note(reads: Mapping[str, str]) -> None:
    """Record reads of other files into the innermost open frame (none open: nothing to do)."""
    if not _FRAMES or not reads:
        return
    frame = _FRAMES[-1].reads
    for path, digest in reads.items():
        if frame.setdefault(path, digest) != digest:
            frame[path] = MIXED


def note_model(reads: Mapping[str, str]) -> None:
    """Record what a model handed out was built from (its `ModuleInfo.reads`, complete by then),
    once per frame."""
    if not _FRAMES:
        return
    frame = _FRAMES[-1]
    if id(reads) not in frame.models:
        frame.models[id(reads)] = reads
        note(reads)
