"""
Source: https://github.com/ByteDance-Seed/VeOmni/pull/107
Project: VeOmni
Reported: 2025-09
Backend: gloo (dedicated async DCP group)
Hang: DistributedCheckpointer.save() with save_async starts two separate dcp.async_save sessions, one
for the model and one for the optimizer, both on the same lazily created gloo group. Each session runs
its planning/collectives on its own background thread, so on one rank the optimizer session's
gather can be posted before the model session's while another rank posts them in the other order; the
two sessions' collectives pair up wrongly and the save hangs sometimes (issue #102).
Fix: Save model and optimizer together in one DCP session with a single future.
"""
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from veomni.utils import logging

logger = logging.get_logger(__name__)


class DistributedCheckpointer:
    dcp_save_future = None
    _async_process_group = None

    @classmethod
    def _wait_previous(cls) -> None:
        if cls.dcp_save_future is not None:
            logger.info(f"[RANK {dist.get_rank()}] waiting for previous DCP saving session to end...")
            cls.dcp_save_future.result()
            cls.dcp_save_future = None

    @classmethod
    def save(cls, path: str, state: dict, save_async: bool = False, global_steps: int = 0) -> None:
        full_state = {"model": state["model"], "optimizer": state["optimizer"]}

        if save_async:
            # Lazily create a dedicated Gloo process group for async DCP saves
            if cls._async_process_group is None:
                cls._async_process_group = dist.new_group(backend="gloo")
            cls._wait_previous()
            cls.dcp_save_future = dcp.async_save(
                full_state, checkpoint_id=path, process_group=cls._async_process_group
            )
        else:
            dcp.save(full_state, checkpoint_id=path)
        logger.info_rank0(f"scheduled DCP save at step {global_steps} to {path}")
