"""Three ranks; rank 2's all_reduce differs from the others'. Rank 0 hosts the store and, like a
host that dies at the worst moment, exits the instant the abort key appears: rank 1 must still
learn of the abort (and exit with collcheck's status), not find the store gone."""

import os
import sys
import threading
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from common import join


def exit_on_abort() -> None:
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    c10d: Any = dist  # TCPStore is re-exported without type stubs
    client = c10d.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=120))
    # The key verify_protocol.key_prefix names for this (never restarted) attempt.
    client.wait(["collcheck/attempt0/abort"], timedelta(seconds=120))
    os._exit(3)


rank = join()
if rank == 0:
    threading.Thread(target=exit_on_abort, daemon=True).start()
dist.all_reduce(torch.ones(4))
dist.all_reduce(torch.ones(8 if rank == 2 else 4))  # DIFFERS_ON_2
print("finished", flush=True)
sys.stdout.flush()
dist.destroy_process_group()
