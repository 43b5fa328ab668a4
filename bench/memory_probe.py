"""A pytest plugin for one measured run: at the session's end it writes the largest amount of memory
Python's allocator held (``tracemalloc``'s peak, in bytes) to the file ``BENCH_TRACEMALLOC_OUT``
names. Load it with ``-p memory_probe`` (this directory on ``PYTHONPATH``) in a process started
with ``-X tracemalloc``: it counts the pytest process only, not the dispatcher it starts."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest


def pytest_unconfigure(config: pytest.Config) -> None:
    _, peak = tracemalloc.get_traced_memory()
    Path(os.environ["BENCH_TRACEMALLOC_OUT"]).write_text(str(peak))
