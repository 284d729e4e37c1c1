"""A Keras-style script: `Epoch 3/5` on one line, that epoch's metrics on the next, no `epoch` on it.

python tests/scripts/keras_style.py --lr 0.1 --epochs 3
"""

import argparse
import sys

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
p.add_argument("--epochs", type=int, default=3)
args = p.parse_args()
for epoch in range(1, args.epochs + 1):
    print(f"Epoch {epoch}/{args.epochs}")
    acc = 0.5 + 0.1 * epoch * args.lr
    print(
        f"14/14 [==============================] - 0s 2ms/step - loss: {1 / epoch:.4f} - accuracy: {acc:.4f} "
        f"- val_loss: {1.1 / epoch:.4f} - val_accuracy: {acc - 0.01:.4f}"
    )
sys.exit(0)
