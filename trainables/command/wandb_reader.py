"""The history of a W&B run, read from its transaction log (`run-<id>.wandb`) with no network.

The only module that touches W&B's file format and its generated protobuf classes
(`wandb.proto.wandb_internal_pb2`, not a documented API); `pyproject.toml`'s `trackers` extra pins the
wandb versions it is tested with (tests/sweeps/test_trackers.py). Since wandb 0.18 the Python reader of the
log (`wandb.sdk.internal.datastore`) is gone: wandb-core (Go) writes the file; this reads it.

The log is LevelDB's log format (https://github.com/google/leveldb/blob/main/doc/log_format.md) behind
a 7-byte header `:W&B`, magic 0xBEE1, version 0: 32 KiB blocks of chunks, each `crc32 (4, little
endian, IEEE, seeded with the type byte) | length (2) | type (1: full, 2: first, 3: middle, 4: last)`
then the bytes of one protobuf `Record` (or of a part of it).
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

FILE_HEADER = b":W&B\xe1\xbe\x00"  # ident, magic 0xBEE1 (little endian), version 0
BLOCK = 32768
CHUNK_HEADER = 7  # crc32, length, type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
RUN_GLOB = "wandb/*run-*/run-*.wandb"  # under WANDB_DIR: offline-run-<time>-<id>/ or run-<time>-<id>/


def read_history(path: Path, offset: int = 0) -> tuple[list[dict], int]:
    """The `wandb.log` rows written to the run log `path` since byte `offset`.

    Args:
        path: a `run-<id>.wandb` file, possibly still being written.
        offset: 0, or the offset returned by the previous call.
    Returns:
        ([{"step": the row's step (`_step`, as logged), "metrics": {name: number}}, ...], new offset).
        Nested keys are joined with `/` (`wandb.log({"val": {"acc": 0.8}})` is `val/acc`); values that
        are not numbers (media, tables) and `_step`, `_runtime`, `_timestamp` are left out. A record cut
        short (the run still writing, or killed) or failing its checksum ends the read: the offset stays
        at its start, so the next call reads it once it is whole.
    Raises:
        ValueError: `path` is not a W&B run log (its header).
    """
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:  # only what was written since `offset`: a long run's log is read once
        f.seek(offset)
        data = f.read()
    if offset == 0:
        if len(data) < len(FILE_HEADER):
            return [], 0
        if data[: len(FILE_HEADER)] != FILE_HEADER:
            raise ValueError(f"{path} is not a W&B run log (header {data[:7]!r}, expected {FILE_HEADER!r})")
    rows = []
    for payload, offset_after in _records(data, max(offset, len(FILE_HEADER)), offset):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") == "history":
            rows.append(_history_row(record.history))
        offset = offset_after
    return rows, offset


def _records(data: bytes, pos: int, base: int):
    """`(record bytes, offset after it)` for each whole record from file offset `pos`, joining
    first/middle/last chunks; `data` is the file from offset `base` on."""
    parts: list[bytes] = []
    while True:
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:  # a block's tail too short for a header is zero padding
            pos += left
            continue
        at = pos - base
        if at + CHUNK_HEADER > len(data):
            return
        crc, length, kind = struct.unpack_from("<IHB", data, at)
        end = at + CHUNK_HEADER + length
        if end > len(data) or zlib.crc32(data[at + CHUNK_HEADER : end], zlib.crc32(bytes([kind]))) != crc:
            return  # cut short (or being written): read again from the record's start next time
        parts.append(data[at + CHUNK_HEADER : end])
        pos = base + end
        if kind in (FULL, LAST):
            yield b"".join(parts), pos
            parts = []


def _history_row(history) -> dict:
    """`{"step": n, "metrics": {...}}` of one `HistoryRecord`."""
    metrics, step = {}, history.step.num
    for item in history.item:
        name = "/".join(item.nested_key) if item.nested_key else item.key
        try:
            value = json.loads(item.value_json)
        except ValueError:
            continue
        if name == "_step" and not history.HasField("step"):
            step = value
        elif name not in ("_step", "_runtime", "_timestamp") and isinstance(value, (int, float)):
            metrics[name] = value if not isinstance(value, bool) else int(value)
    return {"step": step, "metrics": metrics}
