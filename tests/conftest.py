from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from .agents import ScriptedAgent


@pytest.fixture
def agent() -> Iterator[ScriptedAgent]:
    with ScriptedAgent() as server:
        yield server


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def tasks(n: int) -> list[dict[str, Any]]:
    """``n`` rows for ``agents.verifier``: every third one answered wrong."""
    return [
        {
            "responses_create_params": {"input": f"q{i}"},
            "expected_answer": str(i),
            "answer": str(i) if i % 3 else "wrong",
        }
        for i in range(n)
    ]
