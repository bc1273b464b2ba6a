"""
Source: https://github.com/bytedance/UNO/issues/71
Project: UNO (bytedance, accelerate-based DiT training)
Reported: 2025-06
Backend: NCCL
Hang: The checkpoint branch is guarded by `accelerator.is_main_process` (together with the
sync/step test), and `accelerator.wait_for_everyone()` is called *inside* that branch. Only rank 0
reaches the barrier; the other ranks skip the block and continue into the next step's forward and
backward, so rank 0's barrier is never matched and training sticks at the save step.
Fix: No fix in the thread; the obvious fix applied here is to take the barrier out of the
main-process guard so every rank calls it at the save step, and let only rank 0 write files.
"""
import os

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from safetensors.torch import save_file

logger = get_logger(__name__)


class TrainArgs:
    def __init__(self, project_dir, checkpointing_steps, max_train_steps, gradient_accumulation_steps=1):
        self.project_dir = project_dir
        self.checkpointing_steps = checkpointing_steps
        self.max_train_steps = max_train_steps
        self.gradient_accumulation_steps = gradient_accumulation_steps


def _should_checkpoint(accelerator, args, global_step):
    return accelerator.sync_gradients and global_step % args.checkpointing_steps == 0


def _trainable_state(accelerator, dit):
    unwrapped_model = accelerator.unwrap_model(dit)
    state = unwrapped_model.state_dict()
    keep = [k for k, v in unwrapped_model.named_parameters() if v.requires_grad]
    return {k: state[k] for k in keep}


def train_loop(args, dit, optimizer, lr_scheduler, train_dataloader, compute_loss):
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        project_dir=args.project_dir,
    )
    dit, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        dit, optimizer, train_dataloader, lr_scheduler
    )
    global_step = 0
    while global_step < args.max_train_steps:
        for batch in train_dataloader:
            with accelerator.accumulate(dit):
                loss = compute_loss(dit, batch)
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                global_step += 1

            if _should_checkpoint(accelerator, args, global_step):
                accelerator.wait_for_everyone()
                if accelerator.is_main_process:
                    logger.info(f"saving checkpoint in {global_step=}")
                    save_path = os.path.join(args.project_dir, f"checkpoint-{global_step}")
                    os.makedirs(save_path, exist_ok=True)
                    state = _trainable_state(accelerator, dit)
                    save_file(state, os.path.join(save_path, "dit_lora.safetensors"))
                    torch.save(optimizer.state_dict(), os.path.join(save_path, "optimizer.bin"))

            if global_step >= args.max_train_steps:
                break
    accelerator.wait_for_everyone()
    accelerator.end_training()
