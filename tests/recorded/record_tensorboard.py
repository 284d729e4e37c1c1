"""Regenerate the TensorBoard recordings of `tests/recorded/` with the installed packages, offline, on CPU.

/work/uservenv/bin/python tests/recorded/record_tensorboard.py   # any python with lightning, torch, tensorboard

- `lightning_tb_steps/`: Lightning's default `TensorBoardLogger` as `examples/pytorch/basics/
  backbone_image_classifier.py` uses it (`self.log("train_loss", ..., on_epoch=True)`, `valid_loss` with
  `on_step=True` as validation logs by default plus `on_epoch`, `test_loss` from `trainer.test`), 3 epochs of
  4 batches and `limit_val_batches=5`: the validation-step counter (0..14) runs past the epochs and starts
  before the first `epoch` scalar (`log_every_n_steps=50` is more than an epoch's batches).
- `add_scalars_tb/`: `torch.utils.tensorboard.SummaryWriter.add_scalars('dashboard', {..., 'epoch': e},
  global_step)` as the co-teaching repos write it, one run folder per key, 3 epochs of 4 batches; plus a
  per-batch `add_scalar('train/loss', ..., global_step)`.
"""

import shutil
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter

HERE = Path(__file__).resolve().parent


class Classifier(L.LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(8, 2)

    def loss(self, batch):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("valid_loss", self.loss(batch), on_step=True)

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self.loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def lightning_run(out: Path) -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=16)
    trainer = L.Trainer(
        max_epochs=3, limit_val_batches=5, accelerator="cpu", default_root_dir=out, enable_progress_bar=False,
        enable_checkpointing=False, enable_model_summary=False, log_every_n_steps=50,
    )  # fmt: skip
    model = Classifier()
    val = DataLoader(TensorDataset(torch.randn(96, 8), torch.randint(0, 2, (96,))), batch_size=16)
    trainer.fit(model, loader, val)
    trainer.test(model, val)


def add_scalars_run(out: Path) -> None:
    torch.manual_seed(0)
    writer = SummaryWriter(out)
    step = 0
    for epoch in range(3):
        for _ in range(4):
            step += 1
            writer.add_scalar("train/loss", 1.0 / step, step)
        acc, pure = 50.0 + 10 * epoch + torch.rand(1).item(), 100.0 - epoch
        writer.add_scalars("dashboard", {"test_acc_1": acc, "pure_ratio_1": pure, "epoch": epoch}, step)
    writer.close()


if __name__ == "__main__":
    for name, run in (("lightning_tb_steps", lightning_run), ("add_scalars_tb", add_scalars_run)):
        shutil.rmtree(HERE / name, ignore_errors=True)
        run(HERE / name)
    for path in (HERE / "lightning_tb_steps").rglob("*"):
        if path.is_file() and "tfevents" not in path.name:
            path.unlink()  # hparams.yaml: not read
