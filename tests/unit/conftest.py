"""The unit lane's own fixture: a trial config that trains in well under a second (no Ray here: tests/conftest.py
refuses a unit test that asks for a Ray fixture)."""

from __future__ import annotations

import pytest


@pytest.fixture
def tiny_config(tmp_path) -> dict:
    """A trial config that trains in well under a second on one CPU core."""
    return {"dataset": "digits", "model": "mlp", "epochs": 3, "batch_size": 128, "lr": 0.05, "seed": 0}
