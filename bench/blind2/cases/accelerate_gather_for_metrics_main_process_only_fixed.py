"""
Source: https://github.com/huggingface/accelerate/issues/2785
Project: Hugging Face Accelerate (user training script)
Reported: 2024-05
Backend: NCCL
Hang: A ResNet-18/CIFAR-10 training script evaluates at the end of each epoch only on
the main process (inside `if accelerator.is_main_process:`), and that evaluation calls
accelerator.gather_for_metrics() on the predictions and labels. gather_for_metrics is an
all_gather over every process, so the main process blocks in it while the other
processes have skipped the evaluation and moved on to the next epoch's forward/backward
(whose DDP allreduce the main process never joins).
Fix: run the evaluation loop (and gather_for_metrics) on every process and keep only
the printing/logging under is_main_process, as the reporter found.
"""
import torch
import torch.nn as nn
from accelerate import Accelerator
from torch import optim
from torch.utils.data import DataLoader
from torchvision import datasets, transforms
from torchvision.models import resnet18

EPOCHS = 50
GRADIENT_ACCUM_STEPS = 2
BATCH_SIZE = 128
LEARNING_RATE = 1e-3


class Trainer:
    def __init__(self):
        self.accelerator = Accelerator(gradient_accumulation_steps=GRADIENT_ACCUM_STEPS)
        tfm = transforms.Compose([transforms.Resize((64, 64)), transforms.ToTensor()])
        mini_bs = BATCH_SIZE // GRADIENT_ACCUM_STEPS
        train = datasets.CIFAR10(root=".", train=True, transform=tfm, download=True)
        test = datasets.CIFAR10(root=".", train=False, transform=tfm, download=True)
        model = resnet18()
        optimizer = optim.AdamW(model.parameters(), lr=LEARNING_RATE)
        (self.model, self.optimizer, self.trainloader, self.testloader) = self.accelerator.prepare(
            model, optimizer,
            DataLoader(train, batch_size=mini_bs, shuffle=True, num_workers=8),
            DataLoader(test, batch_size=mini_bs, shuffle=False, num_workers=8),
        )
        self.loss_fn = nn.CrossEntropyLoss()

    def train_one_epoch(self):
        self.model.train()
        for images, targets in self.trainloader:
            with self.accelerator.accumulate(self.model):
                loss = self.loss_fn(self.model(images), targets)
                self.accelerator.backward(loss)
                self.optimizer.step()
                self.optimizer.zero_grad()

    @torch.no_grad()
    def evaluate(self) -> float:
        self.model.eval()
        correct, total = 0, 0
        for images, targets in self.testloader:
            preds = self.model(images).argmax(dim=-1)
            preds, targets = self.accelerator.gather_for_metrics((preds, targets))
            correct += (preds == targets).sum().item()
            total += targets.numel()
        return correct / max(total, 1)

    def fit(self):
        for epoch in range(EPOCHS):
            self.train_one_epoch()
            acc = self.evaluate()  # every process takes part in gather_for_metrics
            if self.accelerator.is_main_process:
                self.accelerator.print(f"epoch {epoch}: test acc {acc:.4f}")


if __name__ == "__main__":
    Trainer().fit()
