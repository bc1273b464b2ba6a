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
    save_model_future = None
    save_optim_future = None
    _async_process_group = None

    @classmethod
    def _wait_previous(cls) -> None:
        if cls.save_model_future is not None:
            logger.info_rank0("waiting for previous DCP model saving session to end...")
            cls.save_model_future.result()
            cls.save_model_future = None
        if cls.save_optim_future is not None:
            logger.info_rank0("waiting for previous DCP optimizer saving session to end...")
            cls.save_optim_future.result()
            cls.save_optim_future = None

    @classmethod
    def save(cls, path: str, state: dict, save_async: bool = False, global_steps: int = 0) -> None:
        model_state = {"model": state["model"]}
        optim_state = {"optimizer": state["optimizer"]}
        model_dir = f"{path}/model"
        optim_dir = f"{path}/optimizer"

        if save_async:
            # Lazily create a dedicated Gloo process group for async DCP saves
            if cls._async_process_group is None:
                cls._async_process_group = dist.new_group(backend="gloo")
            cls._wait_previous()
            cls.save_model_future = dcp.async_save(
                model_state, checkpoint_id=model_dir, process_group=cls._async_process_group
            )
            cls.save_optim_future = dcp.async_save(  # DIVERGES: second concurrent session on the same group
                optim_state, checkpoint_id=optim_dir, process_group=cls._async_process_group
            )
        else:
            dcp.save(model_state, checkpoint_id=model_dir)
            dcp.save(optim_state, checkpoint_id=optim_dir)
        logger.info_rank0(f"scheduled DCP save at step {global_steps} to {path}")
