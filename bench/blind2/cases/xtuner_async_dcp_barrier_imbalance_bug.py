"""
Source: https://github.com/InternLM/xtuner/pull/1852
Project: XTuner (v1 TrainEngine)
Reported: 2026-05
Backend: NCCL (training) + gloo (dedicated async checkpoint group)
Hang: async_save_dcp lets each rank decide on its own whether a failed async save is retryable, and
each rank checks weights_dir.exists() on a shared (NFS) filesystem by itself. When ranks classify the
exception differently, some retry and go back into the save barrier while others raise and leave; when
the NFS attribute cache disagrees, some ranks raise FileExistsError while the rest enter the DCP save
collectives. Either way the ranks that stayed wait in a collective the others never reach.
Fix: Agree on the retry/fatal decision with all_reduce(MAX) and let rank 0 alone check exists() and
broadcast the result (plus a barrier after rank 0 recreates the .incomplete dir).
"""
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from xtuner.v1.utils import get_logger

logger = get_logger()

_RETRYABLE = ("received 0 items of ancdata", "EADDRINUSE")


def _is_retryable(exc: BaseException) -> bool:
    msg = str(exc)
    return any(key in msg for key in _RETRYABLE)


class TrainEngine:
    def __init__(self, model, optimizer, async_ckpt_group=None, max_retries: int = 2):
        self.model = model
        self.optimizer = optimizer
        self._async_group = async_ckpt_group  # dedicated gloo group for checkpoint collectives
        self._max_retries = max_retries
        self._pending = None

    def _state(self):
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def _prepare_incomplete_dir(self, incomplete: Path) -> None:
        if dist.get_rank() == 0:
            if incomplete.exists():
                shutil.rmtree(incomplete)
            incomplete.mkdir(parents=True)

    def _dispatch(self, incomplete: Path):
        return dcp.async_save(self._state(), checkpoint_id=str(incomplete), process_group=self._async_group)

    def async_save_dcp(self, save_dir: Path) -> None:
        weights_dir = save_dir / "weights"
        if weights_dir.exists():  # DIVERGES: each rank reads its own (possibly stale) NFS view
            raise FileExistsError(f"{weights_dir} already exists")
        incomplete = save_dir / "weights.incomplete"

        attempt = 0
        while True:
            self._prepare_incomplete_dir(incomplete)
            try:
                self._pending = self._dispatch(incomplete)
                self._pending.result()
                break
            except Exception as exc:  # noqa: BLE001
                attempt += 1
                retry = _is_retryable(exc) and attempt <= self._max_retries
                if not retry:  # DIVERGES: per-rank classification of a per-rank exception
                    logger.error(f"async dcp save failed on rank {dist.get_rank()}: {exc}")
                    raise
                logger.warning(f"retrying async dcp save ({attempt})")
            dist.barrier(group=self._async_group)

        dist.barrier(group=self._async_group)
        if dist.get_rank() == 0:
            incomplete.rename(weights_dir)
