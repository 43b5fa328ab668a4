"""pytest's side of the dispatcher process after ``Closed``: the run's ``/aggregate_metrics`` sent
through it (``metrics_relay.py``), so pytest's process loads no event loop or HTTP client for it;
then the process ended, once scoring is done.

Each request is bounded there by its own timeout; here the answer is waited for a little longer
than that, and a process that does not answer by then is ended: the group's metrics are computed
locally, as for any server that failed.
"""

from __future__ import annotations

import subprocess
import time
from collections import deque

from pytest_rollouts.dispatch.frames import ChannelClosed, ChannelStuck, FrameBuffer, next_frame, write_all
from pytest_rollouts.dispatch.messages import Fatal, MessageError, MetricsPosted, PostMetrics, decode, encode
from pytest_rollouts.dispatch.process import end_process, exit_status
from pytest_rollouts.net.blocking import RequestFailed, RequestTimeout
from pytest_rollouts.rows.metric_body import MetricsRequest
from pytest_rollouts.store.jsonl import JsonlError

# Past a request's own timeout, how long its answer is waited for before the process is taken as stuck.
ANSWER_GRACE_S = 5.0
# The dispatcher reads its input at once, whatever its request is doing: this long without taking
# any of a message, it is stuck.
WRITE_LIMIT_S = 60.0


class Lingering:
    """A dispatcher process that said ``Closed``; ``post_metrics`` is a ``scoring.MetricsPost``."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process: subprocess.Popen[bytes] | None = process
        # Why it did not exit once ended (here, or by a failed request), or "": ``end`` returns it.
        self._unended = ""
        self._frames = FrameBuffer()
        self._inbox: deque[bytes] = deque()

    def post_metrics(self, metrics: MetricsRequest) -> tuple[int, bytes]:
        """One group's request, sent by the dispatcher process: the reply's status and body.
        ``RequestFailed`` or ``RequestTimeout`` without one, ``JsonlError`` for a row it could not read."""
        process = self._process
        if process is None or process.stdin is None or process.stdin.closed:
            raise RequestFailed("the dispatcher process has ended")
        assert process.stdout is not None
        timeout, added = metrics.timeout, [row.decode() for row in metrics.added]
        msg = PostMetrics(metrics.url, dict(metrics.headers), str(metrics.out), list(metrics.order), added, timeout)
        try:
            write_all(process.stdin.fileno(), encode(msg), WRITE_LIMIT_S)
            answer = self._answer(process.stdout.fileno(), time.monotonic() + timeout + ANSWER_GRACE_S)
        except (TimeoutError, ChannelStuck):
            self.end(stuck=True)
            raise RequestTimeout(
                f"the dispatcher process did not answer within {timeout + ANSWER_GRACE_S:g}s"
            ) from None
        except (ChannelClosed, OSError, MessageError) as exc:  # gone, or no longer speaking its part
            self.end()
            why = exit_status(process) if isinstance(exc, ChannelClosed) else exc
            raise RequestFailed(f"the dispatcher process went away ({why})") from None
        if isinstance(answer, Fatal):
            self.end()
            raise RequestFailed(f"the dispatcher process failed: {answer.why.splitlines()[0]}")
        if answer.unreadable:
            raise JsonlError(answer.unreadable)
        if answer.failed:
            raise RequestFailed(answer.failed)
        return answer.status, answer.body.encode("latin-1")

    def end(self, *, stuck: bool = False, wait: bool = True) -> str:
        """Close its input: it cancels what it still sends and exits (``stuck``: killed at once).

        Why it did not exit even when killed, or "": for the caller to say, as nothing else
        reports it after scoring. A process ended already (a request that failed ended it) is not
        ended again, but why it did not exit then is returned again. ``wait=False``: its input is
        closed and "" returned, so it exits while pytest goes on (its summary); a later ``end``
        waits for that exit."""
        if not wait:
            if self._process is not None:
                assert self._process.stdin is not None
                self._process.stdin.close()
            return ""
        process, self._process = self._process, None
        if process is not None:
            self._unended = end_process(process, stuck=stuck)
        return self._unended

    def _answer(self, fd: int, deadline: float) -> MetricsPosted | Fatal:
        answer = decode(next_frame(fd, self._frames, self._inbox, deadline))
        if not isinstance(answer, MetricsPosted | Fatal):
            raise MessageError(f"message {answer.tag!r} is not the answer to a metrics request")
        return answer
