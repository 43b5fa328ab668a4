"""The metrics file, ``<stem>_aggregate_metrics.json``: one entry per group, written in pieces.

A group's lazy ``group_level_metrics`` (``TaskEntries``) is built task by task as it is
written, never held whole, and the file replaces the old one only once it is complete.

It is strict JSON: a non-finite number (an infinite mean, a NaN a server's reply held) is
``null``, which every reader of it takes as no value. ``NaN`` and ``Infinity``, which Python's
``json`` writes and reads, are refused by ``jq``, JavaScript and most JSON tools.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from pytest_rollouts.rows.episodes import taskset_of
from pytest_rollouts.rows.schema import ENVIRONMENT_SERVER
from pytest_rollouts.scoring.task_entries import TaskEntries
from pytest_rollouts.store.jsonl import dumps, replaced_atomically

if TYPE_CHECKING:
    from pytest_rollouts.scoring.aggregate import GroupScore


# The names of a metrics entry (``group_label``), which the group's metrics never replace.
LABEL = frozenset({"agent_ref", ENVIRONMENT_SERVER})


def write_metrics_file(path: Path, scores: Sequence[GroupScore], split: str | None = None) -> Path:
    """Each group's metrics with its coverage and where its metrics came from, and the run's
    split (``train``, ``validation``, ``benchmark``) when it has one: numbers from two splits
    must never be read as one."""
    entries = [
        {
            **(s.label or {"agent_ref": {"name": s.agent}}),
            **({"split": split} if split is not None else {}),
            # A server's reply names no group: its names are the run's (``LABEL``), whatever it sent.
            **{k: v for k, v in s.metrics.items() if k not in LABEL},
            "coverage": s.coverage.as_dict(),
            "metrics_source": s.source,
            **({"metrics_note": s.note} if s.note else {}),
        }
        for s in scores
    ]
    with replaced_atomically(path) as out:
        for chunk in _metrics_chunks(entries):
            out.write(chunk)
    return path


def group_label(group: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """A metrics entry's names, as NeMo Gym labels its entries: the agent the group's rows ran on as
    ``agent_ref``, and ``_ng_environment_server`` for a group of rows sent through one (``group``
    itself, where ``row``, one of its materialized rows, names another agent or carries its stamp). An
    episode row's ``agent_ref`` (one its dataset gave it) names no agent it ran on."""
    ref = row.get("agent_ref") if taskset_of(row) is None else None
    agent = ref.get("name") if isinstance(ref, Mapping) else None
    agent = agent if isinstance(agent, str) and agent else None
    server = row.get(ENVIRONMENT_SERVER) or (group if agent is not None and agent != group else None)
    return {"agent_ref": {"name": agent or group}, **({ENVIRONMENT_SERVER: server} if server else {})}


def _metrics_chunks(entries: list[dict[str, Any]]) -> Iterator[bytes]:
    """The metrics file in pieces, lists one element per line."""
    yield b"["
    for n, entry in enumerate(entries):
        yield (b"," if n else b"") + b"\n  {"
        for k, (key, value) in enumerate(entry.items()):
            yield (b"," if k else b"") + b"\n    " + orjson.dumps(key) + b": "
            if isinstance(value, (list, TaskEntries)) and len(value):
                yield b"["
                for i, item in enumerate(value):
                    yield (b"," if i else b"") + b"\n      " + _dumps(item)
                yield b"\n    ]"
            else:
                yield _dumps(value)
        yield b"\n  }"
    yield b"\n]\n"


def _dumps(value: Any) -> bytes:
    """Strict JSON, a non-finite number ``null`` (as every reader takes it: no value)."""
    return dumps(value, option=orjson.OPT_SERIALIZE_NUMPY, strict=True)
