"""Two call sites in turn, under async verify, with the tracer's store client counted: prints how
often this rank read a rolling hash (`rh/`) from the job store. argv: trace dir, then `clean` or
`diverge` (rank 3 issues step 61 at the other, already known, call site)."""

import json
import sys
import time

import torch
import torch.distributed as dist
from common import join

import collcheck.runtime
from bench.runtime_scale import CountingStore, Counts
from collcheck.runtime import verify_store

counts = Counts()
connect = verify_store.connect_store
verify_store.connect_store = lambda address, timeout: CountingStore(connect(address, timeout), counts)
collcheck.runtime.enable(sys.argv[1], verify=True, timeout=30.0, adapters=False)
rank = join()
diverge = sys.argv[2] == "diverge"
for step in range(120):
    x = torch.ones(4)
    if step % 2 == 0 or (diverge and rank == 3 and step == 61):
        dist.all_reduce(x)  # SITE_A
    else:
        dist.all_reduce(x)  # SITE_B
    time.sleep(0.01)
time.sleep(1.0)  # ticks enough for the last collectives to be compared through the relay
print("RESULT " + json.dumps({"rank": rank, "chain_reads": counts.chain_reads}), flush=True)
dist.barrier()
dist.destroy_process_group()
