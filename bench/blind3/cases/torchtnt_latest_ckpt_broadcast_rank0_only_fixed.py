"""
Source: https://github.com/meta-pytorch/tnt/pull/936
Project: torchtnt (meta-pytorch/tnt)
Reported: 2024-10
Backend: unknown (NCCL or gloo process group)
Hang: get_latest_checkpoint_path() is written as a collective: rank 0 lists the checkpoint directory and the
result is sent to the other ranks with broadcast_object_list. Some callers run a "read checkpoint + act on it"
sequence only on rank 0 (e.g. rank-0-only bookkeeping of the checkpoint directory); when that code calls
get_latest_checkpoint_path, rank 0 enters the broadcast while the other ranks never reach it, so rank 0 hangs.
Fix: Split out a torch.distributed-unaware _get_latest_checkpoint_path() for single-rank callers; the public
function keeps the rank-0-read-then-broadcast behaviour for callers on all ranks. (Caller shape rebuilt from
the PR description.)
"""
import logging
import os
from typing import List, Optional

import torch.distributed as dist
from torchtnt.utils.distributed import PGWrapper, get_global_rank
from torchtnt.utils.fsspec import get_filesystem

logger = logging.getLogger(__name__)


def _sorted_checkpoint_dirs(dirpath: str, metadata_fname: Optional[str]) -> List[str]:
    fs = get_filesystem(dirpath)
    if not fs.exists(dirpath):
        return []
    candidates = []
    for path in fs.ls(dirpath, detail=False):
        name = os.path.basename(path)
        if not name.startswith("epoch_"):
            continue
        if metadata_fname and not fs.exists(os.path.join(path, metadata_fname)):
            continue
        step = int(name.split("_step_")[-1])
        candidates.append((step, path))
    return [p for _, p in sorted(candidates)]


def _get_latest_checkpoint_path(dirpath: str, metadata_fname: Optional[str] = None) -> Optional[str]:
    """Single-rank version: no collectives, safe to call from rank-0-only code."""
    dirs = _sorted_checkpoint_dirs(dirpath, metadata_fname)
    return dirs[-1] if dirs else None


def get_latest_checkpoint_path(
    dirpath: str,
    metadata_fname: Optional[str] = None,
    process_group: Optional[dist.ProcessGroup] = None,
) -> Optional[str]:
    """Rank 0 reads the directory, then the answer is broadcast to every rank of process_group."""
    pg = PGWrapper(process_group)
    ret = [None]
    if get_global_rank() == 0:
        ret = [_get_latest_checkpoint_path(dirpath, metadata_fname)]
    pg.broadcast_object_list(ret, src=0)
    return ret[0]


class CheckpointDirManager:
    """Bookkeeping of the checkpoint directory, done only on rank 0 to avoid racing file operations."""

    def __init__(self, dirpath: str, keep_last_n: int, metadata_fname: Optional[str] = None):
        self.dirpath = dirpath
        self.keep_last_n = keep_last_n
        self.metadata_fname = metadata_fname

    def _rank0_upkeep(self) -> None:
        latest = _get_latest_checkpoint_path(self.dirpath, self.metadata_fname)
        logger.info(f"latest checkpoint is {latest}")
        dirs = _sorted_checkpoint_dirs(self.dirpath, self.metadata_fname)
        fs = get_filesystem(self.dirpath)
        for old in dirs[: max(0, len(dirs) - self.keep_last_n)]:
            if old != latest:
                fs.rm(old, recursive=True)

    def after_save(self) -> None:
        if get_global_rank() == 0:
            self._rank0_upkeep()
        dist.barrier()
