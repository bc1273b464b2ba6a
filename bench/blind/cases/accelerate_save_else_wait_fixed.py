"""
Source: https://github.com/huggingface/accelerate/issues/2690
Project: HF accelerate (run_clm_no_trainer-style script)
Reported: 2024-04
Backend: NCCL
Hang: The user's checkpoint block lets the main process save the model while only the *other*
ranks call `accelerator.wait_for_everyone()` in an `else` branch. Non-main ranks block in the
barrier; the main process finishes saving, never enters the barrier, and goes on to the next
training step whose gradient all-reduce is matched against the others' barrier, so every GPU stalls.
Fix: Call `accelerator.wait_for_everyone()` unconditionally on all ranks after the main-process-only
saving block (no `else`).
"""
import math

import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM, AutoTokenizer, get_scheduler


class CheckpointConfig:
    def __init__(self, output_dir, checkpointing_steps, num_train_epochs, lr=5e-5):
        self.output_dir = output_dir
        self.checkpointing_steps = checkpointing_steps
        self.num_train_epochs = num_train_epochs
        self.lr = lr


def save_model(accelerator, model, tokenizer, output_dir):
    if accelerator.is_main_process:
        unwrapped_model = accelerator.unwrap_model(model)
        state_dict = accelerator.get_state_dict(model)
        unwrapped_model.save_pretrained(output_dir, state_dict=state_dict, safe_serialization=True)
        tokenizer.save_pretrained(output_dir)
    accelerator.wait_for_everyone()


def train(cfg, model_name, train_dataloader):
    accelerator = Accelerator()
    tokenizer = AutoTokenizer.from_pretrained(model_name)
    model = AutoModelForCausalLM.from_pretrained(model_name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    num_update_steps = math.ceil(len(train_dataloader)) * cfg.num_train_epochs
    lr_scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0,
                                 num_training_steps=num_update_steps)
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, lr_scheduler
    )

    completed_steps = 0
    for epoch in range(cfg.num_train_epochs):
        model.train()
        for batch in train_dataloader:
            outputs = model(**batch)
            accelerator.backward(outputs.loss)  # gradient all-reduce
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            completed_steps += 1

            if completed_steps % cfg.checkpointing_steps == 0:
                out = f"{cfg.output_dir}/step_{completed_steps}"
                save_model(accelerator, model, tokenizer, out)

    save_model(accelerator, model, tokenizer, cfg.output_dir)
