"""Label noise: realised rates, pair-flip maps and transition matrices against their definitions."""

import numpy as np
import pytest

from trainables.noise import add_label_noise, asym_pairs, expected_transition_matrix, transition_matrix

N, C = 20_000, 10


@pytest.fixture
def clean():
    return np.random.default_rng(123).integers(0, C, size=N)


def within(observed, p, n, sigmas=5):
    """True when a binomial proportion is within `sigmas` standard errors of p."""
    return abs(observed - p) <= sigmas * np.sqrt(p * (1 - p) / n) + 1e-12


@pytest.mark.parametrize("rate", [0.0, 0.125, 0.5, 0.75])
def test_symmetric_flip_rate_and_other_class(clean, rate):
    noisy = add_label_noise(clean, "sym", rate, C, seed=1)
    assert within(np.mean(noisy != clean), rate, N)
    T = transition_matrix(clean, noisy, C)
    off_diagonal = T[~np.eye(C, dtype=bool)]
    # flips are uniform over the *other* C-1 classes
    assert np.allclose(off_diagonal, rate / (C - 1), atol=5 * np.sqrt(rate / (C - 1) / (N / C)) + 1e-9)
    assert np.allclose(np.diag(T), 1 - rate, atol=0.04)


def test_digits_pair_flip_map(clean):
    rate = 0.4
    noisy = add_label_noise(clean, "asym", rate, C, seed=2, dataset="digits")
    pairs = {2: 7, 3: 8, 5: 6, 6: 5, 7: 1}
    for c in range(C):
        members = clean == c
        if c in pairs:
            flipped = noisy[members] != c
            assert within(flipped.mean(), rate, members.sum())
            assert set(noisy[members][flipped]) == {pairs[c]}  # only ever to its pair
        else:
            assert np.all(noisy[members] == c)  # other classes are never touched


def test_cifar10_and_default_pair_maps():
    assert asym_pairs("cifar10", 10) == {
        9: 1,
        2: 0,
        4: 7,
        3: 5,
        5: 3,
    }  # truck→automobile, bird→airplane, deer→horse, cat↔dog
    assert asym_pairs("npz", 4) == {0: 1, 1: 2, 2: 3, 3: 0}


def test_transition_matrix_matches_definition(clean):
    rate = 0.3
    for noise_type in ("sym", "asym"):
        noisy = add_label_noise(clean, noise_type, rate, C, seed=3, dataset="cifar10")
        T = transition_matrix(clean, noisy, C)
        assert np.allclose(T.sum(axis=1), 1.0)
        assert np.abs(T - expected_transition_matrix(noise_type, rate, C, "cifar10")).max() < 0.04


def test_noise_is_reproducible_and_input_untouched(clean):
    before = clean.copy()
    a = add_label_noise(clean, "sym", 0.5, C, seed=7)
    b = add_label_noise(clean, "sym", 0.5, C, seed=7)
    c = add_label_noise(clean, "sym", 0.5, C, seed=8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.array_equal(clean, before)


def test_transition_matrix_hand_example():
    clean = np.array([0, 0, 0, 0, 1, 1])
    noisy = np.array([0, 1, 1, 0, 1, 1])
    assert np.allclose(transition_matrix(clean, noisy, 3), [[0.5, 0.5, 0], [0, 1, 0], [0, 0, 1]])


@pytest.mark.parametrize("noise_type,rate", [("pair", 0.1), ("sym", 1.0), ("sym", -0.1)])
def test_bad_noise_arguments(clean, noise_type, rate):
    with pytest.raises(ValueError, match="noise"):
        add_label_noise(clean, noise_type, rate, C, seed=0)
