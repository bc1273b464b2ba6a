"""
Source: https://github.com/lucidrains/imagen-pytorch/issues/309
Project: imagen-pytorch (ImagenTrainer on HF accelerate)
Reported: 2023-02
Backend: NCCL
Hang: The user's loop samples and calls `trainer.save(...)` only when `trainer.is_main` is true.
`ImagenTrainer.save` itself begins with `accelerator.wait_for_everyone()` (and only then returns
early on ranks that cannot checkpoint), so the barrier is entered by rank 0 alone while the other
ranks carry on into the next training step's gradient all-reduce; the job stalls at the save step.
Fix: Call `trainer.save` on every rank (it already restricts the file writing to the checkpointing
rank internally) and keep only sampling/image writing under `is_main`, as suggested in the thread.
"""
from pathlib import Path

import torch
from accelerate import Accelerator


class ImagenTrainer(torch.nn.Module):
    def __init__(self, imagen, lr=1e-4, **accelerate_kwargs):
        super().__init__()
        self.accelerator = Accelerator(**accelerate_kwargs)
        self.imagen = imagen
        self.optimizer = torch.optim.Adam(imagen.parameters(), lr=lr)
        self.imagen, self.optimizer = self.accelerator.prepare(self.imagen, self.optimizer)
        self.register_buffer("steps", torch.tensor([0]))

    @property
    def is_main(self):
        return self.accelerator.is_main_process

    @property
    def is_local_main(self):
        return self.accelerator.is_local_main_process

    @property
    def can_checkpoint(self):
        return self.is_local_main

    def save(self, path, **kwargs):
        self.accelerator.wait_for_everyone()
        if not self.can_checkpoint:
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_obj = dict(
            model=self.accelerator.unwrap_model(self.imagen).state_dict(),
            optim=self.optimizer.state_dict(),
            steps=self.steps.cpu(),
            **kwargs,
        )
        torch.save(save_obj, str(path))

    @torch.no_grad()
    def sample(self, *args, **kwargs):
        return self.accelerator.unwrap_model(self.imagen).sample(*args, **kwargs)

    def forward(self, images, texts=None, unet_number=1):
        loss = self.imagen(images, texts=texts, unet_number=unet_number)
        self.accelerator.backward(loss)  # DDP gradient all-reduce
        return loss.item()

    def update(self, unet_number=1):
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.steps += 1


def run(trainer, dataloader, num_steps):
    data_iter = iter(dataloader)
    for i in range(num_steps):
        images, texts = next(data_iter)
        loss = trainer(images, texts=texts, unet_number=1)
        trainer.update(unet_number=1)

        if not (i % 2000) and trainer.is_main:  # DIVERGES
            images = trainer.sample(batch_size=1, stop_at_unet_number=1, return_pil_images=True)
            images[0].save(f"./results/sample_step{i}.png")
            trainer.save(f"./checkpoints/checkpoint_step{i}.pt")  # DIVERGES
