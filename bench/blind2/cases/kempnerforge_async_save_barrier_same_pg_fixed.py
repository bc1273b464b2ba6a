"""
Source: https://github.com/KempnerInstitute/KempnerForge/issues/104
Project: KempnerForge
Reported: 2026-05
Backend: NCCL
Hang: With async checkpointing, AsyncCheckpointer hands the state dict to dcp.async_save(), whose
background thread keeps issuing all_gather / gather_object / reduce_scatter on the default process
group. CheckpointManager.save() then returns to the main thread and runs its end-of-save dist.barrier()
on the same default group. The two threads enqueue collectives on one communicator with no cross-rank
ordering, so rank A can post barrier-then-gather while rank B posts gather-then-barrier, and both wedge.
Fix: Create a dedicated gloo group in CheckpointManager.__init__ and run the end-of-save barrier on it.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import Future
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp


class AsyncCheckpointer:
    """Wraps blocking and async DCP saves behind one interface."""

    def __init__(self, mode: str = "disabled", process_group: dist.ProcessGroup | None = None):
        self.mode = mode
        self.process_group = process_group
        self._pending: Future | None = None

    def wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def save(self, state_dict: dict, checkpoint_id: str) -> None:
        self.wait()
        if self.mode == "disabled":
            dcp.save(state_dict, checkpoint_id=checkpoint_id, process_group=self.process_group)
            return
        # async / async_with_pinned_mem: planning + collectives continue on a background thread
        self._pending = dcp.async_save(
            state_dict, checkpoint_id=checkpoint_id, process_group=self.process_group
        )


class CheckpointManager:
    def __init__(self, config, model, optimizer, pp_group: dist.ProcessGroup | None = None):
        self.config = config
        self.model = model
        self.optimizer = optimizer
        self.root = Path(config.checkpoint.dir)
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        # non-pipeline runs pass process_group=None -> default group
        self.checkpointer = AsyncCheckpointer(config.checkpoint.async_mode, process_group=pp_group)
        # dedicated communicator for the end-of-save barrier, independent of DCP's group
        self._sync_group: dist.ProcessGroup | None = (
            dist.new_group(backend="gloo") if dist.is_initialized() else None
        )

    def _sync_barrier(self) -> None:
        if dist.is_initialized():
            dist.barrier(group=self._sync_group)

    def _state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optim": self.optimizer.state_dict()}

    def _write_train_state(self, path: Path, step: int) -> None:
        with open(path / "metadata.json", "w") as f:
            json.dump({"step": step}, f)
        latest = self.root / "latest"
        if latest.is_symlink():
            latest.unlink()
        os.symlink(path.name, latest)

    def _cleanup(self) -> None:
        keep = self.config.checkpoint.keep_last_n
        ckpts = sorted(self.root.glob("step_*"))
        for old in ckpts[:-keep]:
            for f in old.iterdir():
                f.unlink()

    def save(self, step: int) -> None:
        path = self.root / f"step_{step}"
        path.mkdir(parents=True, exist_ok=True)
        self.checkpointer.save(self._state_dict(), checkpoint_id=str(path))
        if self.rank == 0:
            self._write_train_state(path, step)
            self._cleanup()
        # save() is a collective: keep non-zero ranks until rank 0 committed metadata
        self._sync_barrier()


def train(config, model, optimizer, data_iter, step_fn):
    manager = CheckpointManager(config, model, optimizer)
    for step, batch in enumerate(data_iter, start=1):
        step_fn(model, optimizer, batch)
        if step % config.checkpoint.interval == 0:
            manager.save(step)
    manager.checkpointer.wait()
