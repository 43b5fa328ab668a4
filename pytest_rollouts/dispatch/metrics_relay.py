"""The dispatcher process after ``Closed``: it sends the run's ``/aggregate_metrics`` for pytest.

Every rollout is done and every artifact closed, but this process has an event loop and the HTTP
client loaded, which pytest's process would import only for these few requests (asyncio, ssl and
httptools: about 70 M instructions of a one-row session). So it stays until pytest closes its input,
answering each ``PostMetrics`` with ``MetricsPosted``; pytest's side is ``dispatch/lingering.py``.
"""

from __future__ import annotations

import asyncio
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from pytest_rollouts.dispatch.messages import Fatal, MessageError, MetricsPosted, PostMetrics, decode, encode
from pytest_rollouts.net.blocking import RequestError, bounded
from pytest_rollouts.rows.metric_body import MetricsRequest
from pytest_rollouts.store.jsonl import JsonlError


class Relay:
    """The pipes' receiver once the engine closed (``pipes.Receiver``)."""

    def __init__(self, send: Callable[[bytes], None]) -> None:
        self._send = send
        self._ended = asyncio.Event()
        self._posts: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        """Until pytest closes its input (or goes away); a request still going then is cancelled."""
        await self._ended.wait()
        for task in self._posts:
            task.cancel()
        await asyncio.gather(*self._posts, return_exceptions=True)

    def handle(self, raw: bytes) -> None:
        msg = decode(raw)
        if not isinstance(msg, PostMetrics):
            raise MessageError(f"message {msg.tag!r} is not one pytest sends after close")
        task = asyncio.get_running_loop().create_task(self._post(msg))
        self._posts.add(task)
        task.add_done_callback(self._posts.discard)

    def crash(self, exc: BaseException) -> None:
        """A message out of place, or a bug while sending: said on stderr and to pytest (which then
        scores locally), and the relay ends."""
        why = "a bug in the dispatcher:\n" + "".join(traceback.format_exception(exc))
        sys.stderr.write(f"pytest-rollouts: the metrics relay stopped: {why}\n")
        self._send(encode(Fatal(why)))
        self._ended.set()

    def input_closed(self) -> None:
        self._ended.set()

    async def _post(self, msg: PostMetrics) -> None:
        added = [row.encode() for row in msg.added]
        metrics = MetricsRequest(msg.url, msg.headers, Path(msg.out), msg.order, added, msg.timeout)
        try:
            reply = await bounded("POST", msg.url, *metrics.parts(), timeout=msg.timeout)
        except RequestError as exc:
            answer = MetricsPosted(failed=str(exc))
        except JsonlError as exc:
            answer = MetricsPosted(unreadable=str(exc))
        except OSError as exc:  # the output file gone or unreadable: no body to send
            answer = MetricsPosted(failed=f"cannot read the rows to send: {exc}")
        except Exception as exc:
            self.crash(exc)
            return
        else:
            answer = MetricsPosted(reply.status, reply.body.decode("latin-1"))
        self._send(encode(answer))
