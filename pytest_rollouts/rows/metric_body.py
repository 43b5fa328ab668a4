"""The body of a group's ``/aggregate_metrics`` request, read from the run's files as it is sent.

Built where the request is sent: in pytest's process for the Python API and an xdist controller,
in the dispatcher process for a pytest session (``dispatch/metrics_relay.py``), which has the HTTP
client loaded. Both get the same ``MetricsRequest`` (its ``order``: a row's byte offset in the
output file, or ``ADDED``), so the two bodies cannot differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.schema import CREATE_PARAMS
from pytest_rollouts.store.jsonl import LineReader, dumps, parse_object

# In a body's ``order``: the next of the rows the scoring policies add (no row in the output file).
ADDED = -1
BODY_CHUNK_BYTES = 1 << 16
ROUTE = "/aggregate_metrics"


@datatype
class MetricsRequest:
    """One group's ``/aggregate_metrics``, as whichever process sends it needs it: where to, and the
    body's recipe (``metrics_body``). ``added``: the zeros the scoring policies add, already written
    as JSON (``store.jsonl.dumps``: NaN and integers past 64 bits as Python's ``json`` writes them,
    which a dispatcher message cannot carry as values)."""

    url: str
    headers: Mapping[str, str]
    out: Path
    order: Iterable[int]
    added: list[bytes]
    timeout: float

    def parts(self) -> tuple[str, dict[str, str], Iterator[bytes]]:
        """The route, head and body, as both senders send them."""
        head = {**self.headers, "Content-Type": "application/json"}
        return ROUTE, head, metrics_body(self.out, self.order, self.added)


def metric_input(row: dict[str, Any]) -> dict[str, Any]:
    """What ``/aggregate_metrics`` gets of a row: no request params, and of the response only its usage."""
    row.pop(CREATE_PARAMS, None)
    response = row.get("response")
    if isinstance(response, dict):
        row["response"] = {"usage": response["usage"]} if "usage" in response else {}
    return row


def metrics_body(out: Path, order: Iterable[int], added: Iterable[bytes]) -> Iterator[bytes]:
    """``{"verify_responses": [...]}`` in chunks of about ``BODY_CHUNK_BYTES`` (one send each, not
    one per row): each of ``order`` is the row at that offset of ``out``, or (``ADDED``) the next
    of ``added``, metric input already written as JSON."""
    return _batches(_verify_responses(out, order, iter(added)))


def _verify_responses(out: Path, order: Iterable[int], added: Iterator[bytes]) -> Iterator[bytes]:
    yield b'{"verify_responses":['
    with LineReader() as reader:
        for position, offset in enumerate(order):
            if offset == ADDED:
                row = next(added)
            else:
                row = dumps(metric_input(parse_object(reader.read(out, offset), out, 0)))
            yield (b"," if position else b"") + row
    yield b"]}"


def _batches(pieces: Iterator[bytes]) -> Iterator[bytes]:
    batch: list[bytes] = []
    size = 0
    for piece in pieces:
        batch.append(piece)
        size += len(piece)
        if size >= BODY_CHUNK_BYTES:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)
