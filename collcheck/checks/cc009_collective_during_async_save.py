"""## What it does
Finds a collective issued on the process group that a background checkpoint save is still using:
`torch.distributed.checkpoint.async_save` returns at once and goes on issuing collectives on its
`process_group` (the default group when none is passed) from a background thread until its future
is waited on (`future.result()`). A barrier or all-reduce of the main thread on that same group
before the wait, or a second `async_save` on it while the first is still running, is reported.
The handle is followed through local variables, object attributes (stored on `self` in one method,
waited in another) and the file's own helpers; a group is the same when it is the default group in
both, one object handed to both, or what one memoizing factory returns. Where that cannot be told
(the handle handed to other code, a group of unknown origin), nothing is reported.

A save started under a flag and waited under the same flag (`if self.async_mode:`), waited in a
context manager's `__exit__`, in a base class's method reached through `super()`, or inside a
`try` whose handler carries on, is followed as such. A save whose kind (`async_checkpointer_type`,
`no_dist`) is passed as a variable may be one without collectives on the group: it is not reported.

## Why is this bad?
Two threads that issue collectives on one communicator give no order between them: rank 0 may post
the barrier before the save's gather and rank 1 after it, so each waits in a different collective
and the job hangs, only sometimes, and only with asynchronous checkpointing switched on. Two async
saves on one group interleave their planning collectives the same way.

## Example
```python
import torch.distributed.checkpoint as dcp

def save(step, state, path):
    future = dcp.async_save(state, checkpoint_id=path)   # collectives go on in the background
    if dist.get_rank() == 0:
        write_metadata(path, step)
    dist.barrier()                                       # the same (default) group
    future.result()
```

## Use instead
```python
import torch.distributed.checkpoint as dcp

SAVE_GROUP = dist.new_group(backend="gloo")             # a group of the save's own

def save(step, state, path):
    future = dcp.async_save(state, checkpoint_id=path, process_group=SAVE_GROUP)
    if dist.get_rank() == 0:
        write_metadata(path, step)
    dist.barrier()
    future.result()
```
or wait for the save (`future.result()`) before the barrier, or save everything in one session.

## References
- [torch.distributed.checkpoint.async_save](https://pytorch.org/docs/stable/distributed.checkpoint.html#torch.distributed.checkpoint.state_dict_saver.async_save)
- PyTorch recipe "Asynchronous Saving with Distributed Checkpoint (DCP)": give `async_save` a
  separate (gloo) process group, since its collectives run beside the training loop's.
"""

from __future__ import annotations

from collcheck.findings import Finding, Location, Severity
from collcheck.static.async_sessions import CallSite, RaceKind, SessionRace, session_races
from collcheck.static.context import ModuleContext

CODE = "CC009"
NAME = "collective-during-async-save"
# An error: the program gives the two threads' collectives no order on any schedule; whether a run
# hangs is chance, but the code is wrong every time the pattern is reached.
SEVERITY = Severity.ERROR
MESSAGE = (
    "`{call}` runs on {group}, the group of the {what} started by `{session}` at line {session_line} "
    "({session_group}), which may still issue collectives on it from its background thread; wait for "
    'its future first, or give one of them a dedicated group (`dist.new_group(backend="gloo")`)'
)
MESSAGE_SECOND = (
    "`{call}` starts a second {what} on {group} while the one started by `{session}` at line "
    "{session_line} ({session_group}) may still run there: their background collectives can pair up "
    "differently on each rank; wait for the first's future, or save both in one call"
)


def _location(context: ModuleContext, site: CallSite) -> Location:
    return Location(context.source.path, site.line, site.column, site.end_line, site.end_column)


def _finding(context: ModuleContext, race: SessionRace) -> Finding:
    args = {
        "call": race.racing.call,
        "group": f"`{race.group}`" if race.group else "the default process group",
        "what": race.what,
        "session": race.session.call,
        "session_line": str(race.session.line),
        "session_group": f"`{race.session_group}`" if race.session_group else "the default process group",
    }
    template = MESSAGE_SECOND if race.kind is RaceKind.SECOND_SESSION else MESSAGE
    return Finding(
        code=CODE,
        severity=SEVERITY,
        location=_location(context, race.racing),
        message_template=template,
        message_args=tuple(sorted(args.items())),
        function=race.racing.function,
        cause=_location(context, race.session),
    )


def check_module(context: ModuleContext) -> list[Finding]:
    races = session_races(context.tree, context.imports, context.catalog, context.source.text)
    return [_finding(context, race) for race in races]
