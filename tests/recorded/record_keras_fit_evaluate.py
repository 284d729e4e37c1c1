"""Records `keras_fit_evaluate.console.txt` and `.history.json` (KERAS_BACKEND=torch PYTHONUNBUFFERED=1, stdout
and stderr to the console file): Keras 3's console of a tiny model.fit + evaluate + keras-io mnist_convnet.py's
closing prints."""

import json

import keras
import numpy as np
from keras import layers

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(320, 8)).astype("float32")
y = keras.utils.to_categorical((x[:, 0] + x[:, 1] > 0).astype(int), 2)
model = keras.Sequential(
    [keras.Input(shape=(8,)), layers.Dense(8, activation="relu"), layers.Dense(2, activation="softmax")]
)
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
history = model.fit(x[:256], y[:256], batch_size=64, epochs=3, validation_split=0.25)
score = model.evaluate(x[256:], y[256:])
print("Test loss:", score[0])
print("Test accuracy:", score[1])
with open("keras_fit_evaluate.history.json", "w") as f:
    json.dump({"history": history.history, "score": score}, f)
