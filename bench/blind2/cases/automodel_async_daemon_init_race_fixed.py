"""
Source: https://github.com/NVIDIA-NeMo/Automodel/pull/3824
Project: NeMo AutoModel (checkpointing with process-based async DCP saves)
Reported: 2026-09
Backend: NCCL / gloo (checkpoint group)
Hang: The process-based async checkpoint executor decides on the caller thread whether the checkpoint
daemon still has to be created (module global _CHECKPOINT_PROCESS is None) but assigns that global
later, on its worker thread, after an initialization broadcast over the checkpoint group. AutoModel
submits the model save and then the optimizer save back to back; on a rank whose worker thread has
already assigned the global, the optimizer save skips the initialization broadcast, while on a rank
whose worker is slower the optimizer save starts a second initialization and enters the broadcast.
The two rank sets wait in different collectives.
Fix: Make the first daemon initialization synchronous: wrap the executor's first execute_save so it
returns only after the rank-local daemon has been assigned (failures propagate).
"""
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import torch.distributed as dist

_CHECKPOINT_PROCESS = None


class _CheckpointDaemon:
    def __init__(self, pg):
        # rank 0 picks the port; everybody learns it (collective on the checkpoint group)
        info = [{"port": 29611} if dist.get_rank(pg) == 0 else None]
        dist.broadcast_object_list(info, src=0, group=pg)
        self.port = info[0]["port"]

    def save(self, staged_state, checkpoint_id):
        return checkpoint_id


class ProcessBasedAsyncCheckpointExecutor:
    def __init__(self):
        self._executor = ThreadPoolExecutor(max_workers=1)

    @staticmethod
    def _execute_save_impl(need_init, pg, staged_state, checkpoint_id):
        global _CHECKPOINT_PROCESS
        if need_init:
            _CHECKPOINT_PROCESS = _CheckpointDaemon(pg)  # assigned on the worker thread
        return _CHECKPOINT_PROCESS.save(staged_state, checkpoint_id)

    def execute_save(self, staged_state, checkpoint_id, process_group) -> Future:
        need_init = _CHECKPOINT_PROCESS is None
        return self._executor.submit(self._execute_save_impl, need_init, process_group, staged_state, checkpoint_id)


class Checkpointer:
    def __init__(self, config, ckpt_group):
        self.config = config
        self.ckpt_group = ckpt_group
        self._executor = ProcessBasedAsyncCheckpointExecutor()
        self._lock = threading.Lock()
        self._futures = []
        self._daemon_ready = False

    def _async_save(self, state, path):
        with self._lock:
            fut = self._executor.execute_save(state, path, self.ckpt_group)
            if not self._daemon_ready:
                # first save: wait until the daemon is assigned on this rank, so the next
                # submission sees it and no rank starts a second initialization broadcast
                fut.result()
                self._daemon_ready = True
        self._futures.append(fut)
        return fut

    def save_checkpoint(self, model_state, optim_state, step):
        base = f"{self.config.checkpoint_dir}/step_{step}"
        self._async_save(model_state, f"{base}/model")
        self._async_save(optim_state, f"{base}/optim")  # submitted right after the model save

    def wait(self):
        for f in self._futures:
            f.result()
        self._futures.clear()
