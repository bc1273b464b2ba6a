"""World size 1: async verify on the native kernel, started twice in one process, with one line
that issues two ops into two groups. Prints, as JSON, the (session, group, op) of every collective
the kernel handed to the gate (the check before a (group, op, call site)'s first collective)."""

import functools
import json
import sys

import torch
import torch.distributed as dist
from common import join

from collcheck.runtime import hook, native_feed, tracer

gated: list[tuple[int, str, str]] = []
session = 0  # the tracer started so far (1, then 2), read by counting_gate
original_gate = native_feed.NativeFeed.gate


def counting_gate(self: native_feed.NativeFeed, line: str) -> None:
    row = json.loads(line)
    gated.append((session, row["group"], row["op"]))
    original_gate(self, line)


native_feed.NativeFeed.gate = counting_gate  # type: ignore[method-assign]
join()
groups = (dist.new_group([0]), dist.new_group([0]))
config = tracer.TraceConfig(sys.argv[1], verify=True, timeout_s=30)
for started in (1, 2):
    session = started
    tracer.start(config)
    for _step in range(3):
        for group in groups:
            for call in (dist.all_reduce, functools.partial(dist.broadcast, src=0)):
                call(torch.ones(4), group=group)  # ONE_LINE
    tracer.stop()
    hook.uninstall()
print(json.dumps(gated), flush=True)
dist.destroy_process_group()
