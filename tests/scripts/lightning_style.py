"""A Lightning 2.6 script written as Lightning's own examples are (`backbone_image_classifier.py`): it prints
only the progress bar (stderr, postfix `v_num`), Lightning's banner lines and "`Trainer.fit` stopped", and
logs to Lightning's loggers, from the folder it runs in (`save_dir="."`).

python tests/scripts/lightning_style.py --lr 0.1 [--logger csv,tensorboard] [--epochs 2] [--truth FILE]

`train_loss` and `valid_loss` are logged on_step and on_epoch (Lightning writes `train_loss_step`,
`train_loss_epoch`, `valid_loss_step` with the validation steps' own counter, `valid_loss_epoch`), and
`test_loss` by `trainer.test` after the fit (at epoch `max_epochs`). Tiny random data (48 training and 24
validation samples of 8 features, 3 classes) and a linear model, on CPU; no torchvision.
--truth FILE: the epoch means the module computed itself, {"valid_loss_epoch": {epoch: value}, ...,
"test_loss": value}: what a sweep's history must hold.
"""

import argparse
import json

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
p.add_argument("--logger", default="csv")  # csv, tensorboard, or both: csv,tensorboard
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--truth", default="")
args = p.parse_args()


class Classifier(L.LightningModule):
    def __init__(self, lr: float):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(8, 3)
        self.losses: dict = {"train": [], "valid": []}
        self.truth: dict = {"train_loss_epoch": {}, "valid_loss_epoch": {}}

    def step(self, batch):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def training_step(self, batch, batch_idx):
        loss = self.step(batch)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.losses["train"].append(loss.detach())
        return loss

    def validation_step(self, batch, batch_idx):
        loss = self.step(batch)
        self.log("valid_loss", loss, on_step=True, on_epoch=True)
        self.losses["valid"].append(loss)

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self.step(batch))

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.truth["valid_loss_epoch"][self.current_epoch] = torch.stack(self.losses["valid"]).mean().item()
        self.losses["valid"] = []

    def on_train_epoch_end(self):
        self.truth["train_loss_epoch"][self.current_epoch] = torch.stack(self.losses["train"]).mean().item()
        self.losses["train"] = []

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def loader(n: int, seed: int) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long()), batch_size=8)


L.seed_everything(1234)
loggers = {"csv": CSVLogger(save_dir="."), "tensorboard": TensorBoardLogger(save_dir=".")}
model = Classifier(args.lr)
trainer = L.Trainer(
    max_epochs=args.epochs,
    accelerator="cpu",
    logger=[loggers[name] for name in args.logger.split(",")],
    log_every_n_steps=2,
    enable_checkpointing=False,
    enable_model_summary=False,
)
trainer.fit(model, loader(48, 0), loader(24, 1))
[test] = trainer.test(model, loader(24, 2), verbose=False)
if args.truth:
    with open(args.truth, "w") as f:
        json.dump({**model.truth, "test_loss": test["test_loss"]}, f)
