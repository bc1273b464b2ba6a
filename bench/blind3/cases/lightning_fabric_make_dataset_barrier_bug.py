"""
Source: https://github.com/Lightning-AI/pytorch-lightning/issues/20536
Project: PyTorch Lightning (Fabric)
Reported: 2025-01
Backend: NCCL
Hang: The user's trainer builds its dataset in make_dataset(): rank 0 creates the TensorDataset and returns
immediately, while the other ranks fall through to fabric.barrier() and return None. Rank 0 never reaches that
barrier; it goes on to set up the dataloader and the model's collectives, so rank 0 and rank 1 block in
different collectives (and rank 1 would iterate a None dataset) - the run deadlocks while loading/training.
Fix: Create the dataset on every rank; if rank-0-only I/O is needed, do only the I/O under the rank check,
then call fabric.barrier() on all ranks (maintainer's answer in the thread).
"""
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

fabric = L.Fabric(accelerator="cuda", devices=2, strategy="ddp")
fabric.launch()


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def forward(self, x):
        return self.net(x)


class Trainer:
    def __init__(self, fabric, epochs=2):
        self.fabric = fabric
        self.epochs = epochs
        model = Model()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        self.model, self.optimizer = fabric.setup(model, optimizer)

    def make_dataset(self, x, y):
        if self.fabric.global_rank == 0:
            # in the real program there is some I/O here, hence the barrier
            dataset = TensorDataset(x, y)
            return dataset  # DIVERGES
        self.fabric.barrier()

    def fit(self, x, y):
        dataset = self.make_dataset(x, y)
        loader = self.fabric.setup_dataloaders(DataLoader(dataset, batch_size=16, shuffle=True))
        for _ in range(self.epochs):
            for xb, yb in loader:
                loss = torch.nn.functional.mse_loss(self.model(xb), yb)
                self.optimizer.zero_grad()
                self.fabric.backward(loss)
                self.optimizer.step()


if __name__ == "__main__":
    x = torch.randn(256, 32)
    y = torch.randn(256, 1)
    Trainer(fabric).fit(x, y)
