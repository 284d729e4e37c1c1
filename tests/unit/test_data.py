"""Data loaders: digits split, CIFAR-10 python batches and npz files written by the tests."""

import pickle

import numpy as np
import pytest

from trainables.config import TrainConfig
from trainables.data import CIFAR10_FILES, load_data


def write_cifar10(folder, per_batch=30):
    """Write files in the official cifar-10-python format: dicts of bytes keys, uint8 rows of 3072."""
    rng = np.random.default_rng(0)
    for name in CIFAR10_FILES:
        batch = {
            b"batch_label": name.encode(),
            b"labels": [int(i % 10) for i in range(per_batch)],
            b"data": rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8),
            b"filenames": [f"{i}.png".encode() for i in range(per_batch)],
        }
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)


def test_digits_split_is_stratified_disjoint_and_fixed_by_seed():
    a = load_data(TrainConfig(data_seed=0))
    b = load_data(TrainConfig(data_seed=0))
    c = load_data(TrainConfig(data_seed=1))
    sizes = [len(a[f"y_{s}"]) for s in ("train", "val", "test")]
    assert sum(sizes) == 1797 and a["num_classes"] == 10
    assert a["x_train"].shape[1:] == (1, 8, 8) and a["x_train"].dtype == np.float32
    assert np.array_equal(a["y_val"], b["y_val"]) and not np.array_equal(a["y_val"], c["y_val"])
    # stratified: every split has each class in about the pool's proportion (10 %)
    for split in ("train", "val", "test"):
        shares = np.bincount(a[f"y_{split}"], minlength=10) / len(a[f"y_{split}"])
        assert np.all(np.abs(shares - 0.1) < 0.02)
    # no sample in two splits
    rows = {s: {r.tobytes() for r in a[f"x_{s}"]} for s in ("train", "val", "test")}
    assert not (rows["val"] & rows["test"]) and len(rows["train"] & rows["val"]) < 5  # digits has a few duplicates


def test_cifar10_python_batches(tmp_path):
    write_cifar10(tmp_path)
    data = load_data(TrainConfig(dataset="cifar10", data_root=str(tmp_path), val_fraction=0.2))
    assert data["x_train"].shape[1:] == (3, 32, 32) and data["x_train"].dtype == np.uint8
    assert len(data["y_train"]) + len(data["y_val"]) == 150 and len(data["y_test"]) == 30
    assert data["mean"].shape == (3,) and np.all((0 < data["mean"]) & (data["mean"] < 1))


def test_cifar10_missing_files_named(tmp_path):
    write_cifar10(tmp_path)
    (tmp_path / "data_batch_3").unlink()
    with pytest.raises(ValueError, match="data_batch_3"):
        load_data(TrainConfig(dataset="cifar10", data_root=str(tmp_path)))


def test_cifar10_pickle_that_runs_code_is_refused(tmp_path):
    write_cifar10(tmp_path)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    with open(tmp_path / "data_batch_1", "wb") as f:
        pickle.dump({b"data": Evil(), b"labels": []}, f)
    with pytest.raises(ValueError, match="refusing"):
        load_data(TrainConfig(dataset="cifar10", data_root=str(tmp_path)))
    assert not marker.exists()


def test_npz_with_and_without_test_split(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.random((200, 12)).astype(np.float32), np.arange(200) % 4
    np.savez(tmp_path / "plain.npz", x=x, y=y)
    np.savez(tmp_path / "split.npz", x=x, y=y, x_test=x[:40], y_test=y[:40])
    plain = load_data(TrainConfig(dataset="npz", data_root=str(tmp_path / "plain.npz")))
    split = load_data(TrainConfig(dataset="npz", data_root=str(tmp_path / "split.npz")))
    assert plain["num_classes"] == 4 and len(plain["y_test"]) == 40  # 20 % carved out
    assert len(split["y_test"]) == 40 and len(split["y_train"]) + len(split["y_val"]) == 200


@pytest.mark.parametrize("content,match", [(b"not a zip at all", "not a readable"), (None, "needs x and y")])
def test_bad_npz(tmp_path, content, match):
    path = tmp_path / "bad.npz"
    if content is None:
        np.savez(path, features=np.zeros((3, 2)))
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=match):
        load_data(TrainConfig(dataset="npz", data_root=str(path)))


# --- data sanity: refused before Ray starts, naming the file and the number --------------------


def write_npz(path, y, x=None, **arrays):
    """A small .npz of 4 float features per sample (or `x`), labels `y`."""
    y = np.asarray(y)
    x = np.random.default_rng(0).random((len(y), 4)).astype(np.float32) if x is None else x
    np.savez(path, x=x, y=y, **arrays)
    return str(path)


def nan_features(n=60):
    x = np.random.default_rng(0).random((n, 4)).astype(np.float32)
    x[3, 1], x[7, 0], x[7, 2] = np.nan, np.inf, -np.inf
    return x


@pytest.mark.parametrize(
    "y,x,extra,match",
    [
        (
            [0] * 60,
            None,
            {},
            r"bad.npz: the training data has 1 class\(es\) \(60 samples\); classification needs at least 2",
        ),
        (np.arange(60) % 3, nan_features(), {}, r"bad.npz: x holds 3 NaN/inf value\(s\) in 2 of 60 samples"),
        (
            np.arange(60) % 3 + 1,
            None,
            {},
            r"bad.npz: labels must be 0..C-1 but class\(es\) \[0\] of 0..3 have no sample; "
            r"relabel the classes present \(\[1, 2, 3\]\) as 0..2",
        ),
        (
            [0] * 30 + [1] * 28 + [2] * 2,
            None,
            {},
            r"bad.npz: class sizes \{2: 2\} \(class: samples\) are below the 3 per class "
            r"the stratified test and val split\(s\) need",
        ),
        (np.arange(18) % 6, None, {}, r"bad.npz: 18 samples split 0.2 for test give 4 / 14, fewer than the 6 classes"),
        (
            np.arange(60) % 3,
            None,
            {"x_test": np.zeros((4, 4), np.float32), "y_test": np.array([0, 1, 2, 5])},
            r"bad.npz: y_test has labels outside 0..2",
        ),
        (
            np.arange(60) % 3,
            None,
            {"x_test": np.full((4, 4), np.nan, np.float32), "y_test": np.array([0, 1, 2, 2])},
            r"bad.npz: x_test holds 16 NaN/inf value\(s\) in 4 of 4 samples",
        ),
    ],
)
def test_data_no_trial_can_learn_from_is_refused(tmp_path, y, x, extra, match):
    path = write_npz(tmp_path / "bad.npz", y, x, **extra)
    with pytest.raises(ValueError, match=match):
        load_data(TrainConfig(dataset="npz", data_root=path))


@pytest.mark.parametrize("seed", range(5))
def test_a_class_at_the_stated_minimum_splits(tmp_path, seed):
    """3 samples of a class (the minimum named above) pass both stratified splits, whatever the seed."""
    path = write_npz(tmp_path / "ok.npz", [0] * 30 + [1] * 28 + [2] * 3)
    data = load_data(TrainConfig(dataset="npz", data_root=path, data_seed=seed))
    assert data["num_classes"] == 3 and 2 in data["y_train"]
    assert sum(int((data[f"y_{split}"] == 2).sum()) for split in ("train", "val", "test")) == 3


def test_given_test_split_needs_only_two_per_class(tmp_path):
    """With x_test given there is one stratified split (val): 2 samples of a class are enough, 1 is not."""
    test = {"x_test": np.zeros((3, 4), np.float32), "y_test": np.array([0, 1, 2])}
    data = load_data(
        TrainConfig(dataset="npz", data_root=write_npz(tmp_path / "ok.npz", [0] * 20 + [1] * 20 + [2] * 2, **test))
    )
    assert sorted(np.concatenate([data["y_train"], data["y_val"]]).tolist()).count(2) == 2
    with pytest.raises(ValueError, match=r"class sizes \{2: 1\} .* below the 2 per class the stratified val split"):
        load_data(
            TrainConfig(dataset="npz", data_root=write_npz(tmp_path / "one.npz", [0] * 20 + [1] * 20 + [2], **test))
        )


def test_cifar10_batches_with_a_single_class_are_refused(tmp_path):
    write_cifar10(tmp_path)
    for name in CIFAR10_FILES[:5]:
        with open(tmp_path / name, "rb") as f:
            batch = pickle.load(f)
        batch[b"labels"] = [4] * len(batch[b"labels"])
        with open(tmp_path / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
    with pytest.raises(ValueError, match=rf"{tmp_path}: labels must be 0..C-1 but class\(es\) \[0, 1, 2, 3\] of 0..4"):
        load_data(TrainConfig(dataset="cifar10", data_root=str(tmp_path)))
