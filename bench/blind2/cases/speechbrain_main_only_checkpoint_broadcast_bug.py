"""
Source: https://github.com/speechbrain/speechbrain/issues/2401
Project: SpeechBrain
Reported: 2024-02
Backend: NCCL
Hang: Following a recipe, the user saves the end-of-epoch checkpoint only on the main process
(run_on_main / if_main_process around checkpointer.save_and_keep_only). Inside, Checkpointer.save_checkpoint
creates the folder on the main process and then calls torch.distributed.broadcast_object_list to tell
every process the folder name. Only rank 0 reaches that broadcast; rank 1 has skipped the save and is
already in the next epoch's DDP all-reduce, so rank 0 runs BROADCAST while rank 1 runs ALLREDUCE.
Fix: Route the checkpoint-directory broadcast through a ddp_broadcast helper that does no
communication when called from inside a main-process-only section (PR #2404).
"""
import os
import pathlib

import torch
import speechbrain as sb
from speechbrain.utils.distributed import if_main_process, run_on_main

METAFNAME = "CKPT.yaml"


class Checkpointer:
    def __init__(self, checkpoints_dir, recoverables=None):
        self.checkpoints_dir = pathlib.Path(checkpoints_dir)
        self.recoverables = dict(recoverables or {})

    def _new_checkpoint_dirpath(self):
        import time

        return self.checkpoints_dir / ("CKPT+" + time.strftime("%Y-%m-%d+%H-%M-%S"))

    def save_checkpoint(self, meta=None, end_of_epoch=True, name=None):
        ckpt_dir = None
        if if_main_process():
            ckpt_dir = self._new_checkpoint_dirpath()
            os.makedirs(ckpt_dir)
            with open(ckpt_dir / METAFNAME, "w") as f:
                f.write(repr(meta or {}))

        # Communicate ckpt_dir to all procs (needed e.g. for FSDP shards)
        if torch.distributed.is_initialized():
            communication_list = [ckpt_dir]
            torch.distributed.broadcast_object_list(communication_list, src=0)  # DIVERGES: reached only by the main process here
            ckpt_dir = communication_list[0]

        for name_, obj in self.recoverables.items():
            if if_main_process():
                torch.save(obj.state_dict(), ckpt_dir / f"{name_}.ckpt")
        return ckpt_dir

    def save_and_keep_only(self, meta=None, end_of_epoch=True, num_to_keep=1, **kwargs):
        self.save_checkpoint(meta=meta, end_of_epoch=end_of_epoch)


class ClassifierBrain(sb.Brain):
    def compute_forward(self, batch, stage):
        x, _ = batch
        return self.modules.model(x.to(self.device))

    def compute_objectives(self, predictions, batch, stage):
        _, y = batch
        return self.hparams.loss(predictions.squeeze(-1), y.to(self.device).float())

    def on_stage_end(self, stage, stage_loss, epoch=None):
        if stage == sb.Stage.VALID:
            # end-of-epoch checkpoint, written once
            run_on_main(
                self.checkpointer.save_and_keep_only,
                kwargs={"meta": {"loss": stage_loss}, "num_to_keep": 1},
            )
