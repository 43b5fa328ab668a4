"""Which tasks a shard runs: a stable hash of the task index, the same on every machine and run.

Hashing the task index, not the rollout, keeps a task's repeats in one shard, so each
shard's pass@k is computable and the union of shards is the whole run.
"""

from __future__ import annotations

import hashlib


def shard_of(task_index: int, count: int) -> int:
    digest = hashlib.blake2b(str(task_index).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def in_shard(task_index: int, shard: tuple[int, int]) -> bool:
    k, n = shard
    return shard_of(task_index, n) == k
