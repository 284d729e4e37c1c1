"""pytorch/examples `mnist/main.py`'s output, line for line (its `train()` and `test()` print formats), no torch.

python tests/scripts/mnist_style.py --lr 1.0 --epochs 2 [--sleep S]

--sleep: seconds each epoch takes (default 0: every epoch printed at once), so that a scheduler's stop can
arrive while the script still trains.
"""

import argparse
import math
import time

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=1.0)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--sleep", type=float, default=0.0)
args = p.parse_args()
for epoch in range(1, args.epochs + 1):
    time.sleep(args.sleep)
    for batch_idx in (0, 10, 937):
        print(
            "Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                epoch, batch_idx * 64, 60000, 100.0 * batch_idx / 938, 2.3 / (epoch + batch_idx)
            )
        )
    correct = 9800 + 47 * epoch - round(100 * abs(math.log10(args.lr)))  # the further from lr 1.0, the worse
    print(
        "\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n".format(
            0.05 / epoch, correct, 10000, 100.0 * correct / 10000
        )
    )
