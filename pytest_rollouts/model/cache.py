"""The model agent's response cache (``--rollouts-cache DIR``): a rerun of an unchanged row does not
call the model again.

A reply is kept under a stable hash of its request: the canonical JSON (sorted keys) of the API,
the request body less the fields that say nothing of the answer (``VOLATILE``), and the rollout's
repeat index, so the repeats of a row stay separate samples rather than one reply copied. One file a
key (``DIR/ab/abcd....json``), written whole and renamed into place: two processes (xdist workers)
writing one key each write the whole reply, and the last rename wins with the same content. Only
usable replies are kept (a 2xx JSON object with its choices or output: ``model/agent.py`` checks
that before ``put``); a failed call (non-2xx, not JSON, a timeout) raises before it could be.

An entry that cannot be read (cut short, not JSON, edited) is a miss, said on stderr, and the
model's reply replaces it. A cache that cannot be written (a full disk) is said once and the run
goes on without keeping more: the cache saves calls, it never fails a rollout.
"""

from __future__ import annotations

import hashlib
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson

from pytest_rollouts.store.jsonl import dumps, loads

# Request fields that change nothing of the answer: who asks, tags, and where the provider stores or
# caches it on its side.
VOLATILE = frozenset({"user", "metadata", "store", "prompt_cache_key", "safety_identifier", "service_tier"})


class ResponseCache:
    """Replies by request, in ``root`` (made on the first reply kept)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._unwritable = False

    def key(self, api: str, body: dict[str, Any], repeat: object) -> str:
        """The stable hash of what decides the reply: the API, the request less ``VOLATILE``, the repeat."""
        request = {name: value for name, value in body.items() if name not in VOLATILE}
        canonical = dumps({"api": api, "request": request, "repeat": repeat}, option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(canonical).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        """The kept reply, or None: none kept, or one that cannot be read (said, and replaced later)."""
        path = self._path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            _say(f"{path}: cannot be read ({exc.strerror or exc}); the model is called instead")
            return None
        try:
            reply = loads(raw)
        except ValueError as exc:
            reply = exc
        if not isinstance(reply, dict):
            why = reply if isinstance(reply, ValueError) else f"a JSON {type(reply).__name__}, not an object"
            _say(f"{path}: a damaged entry ({why}) is a miss; the model's reply replaces it")
            return None
        return reply

    def put(self, key: str, reply: dict[str, Any]) -> None:
        """Keep ``reply`` under ``key``: a private file renamed into place, so no reader sees half of it."""
        if self._unwritable:
            return
        path = self._path(key)
        private = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            private.write_bytes(dumps(reply))
            os.replace(private, path)
        except OSError as exc:
            private.unlink(missing_ok=True)
            self._unwritable = True
            _say(f"{self.root}: cannot keep replies ({exc.strerror or exc}); the run goes on without caching more")

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"


def _say(what: str) -> None:
    """A line on stderr, where the dispatcher's own messages go (the Python API's process too)."""
    sys.stderr.write(f"pytest-rollouts: model cache: {what}\n")
