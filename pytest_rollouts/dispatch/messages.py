"""Every message between pytest and its dispatcher process, each defined once as a typed dataclass.

Both sides import these types, and a message goes over the pipe as ``[tag, {field: value}]``:
fields travel by name, never by position. A field one side adds and the other does not know
(an engine and a pytest from different checkouts, or a change made on one side only) is a
``MessageError`` naming the message and the field, where a list read back by index would have
shifted every later value into the wrong place without a word. orjson writes dataclasses
natively; a list of them (a task's outcomes) goes as a table whose columns are named once.

The plan goes as a ``PlanHeader`` and then the plan's columns in ``rows.planned.COLUMNS`` order,
each one frame (``frames.py``) of its array's type code and raw values, as narrow as the plan holds
them: at 100k rollouts a column is one frame, not 100k values in JSON.

The types are not frozen: a message lives from its decoding to its handling and nothing keeps or
changes it, while a frozen dataclass costs nearly twice as much to build, once at import (two
more generated methods a type) and once a message (a setter call a field).
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import orjson

from pytest_rollouts.config.bounds import AdaptiveParallel
from pytest_rollouts.datatype import datatype
from pytest_rollouts.dispatch.dataclass_codec import Builder, Mismatch, builder, encoder
from pytest_rollouts.dispatch.frames import frame
from pytest_rollouts.dispatch.record import DispatchRecord, LimitSeries
from pytest_rollouts.model.spec import ModelPlan
from pytest_rollouts.net.auth import headers_for
from pytest_rollouts.rows.masking import MaskingCounts
from pytest_rollouts.rows.planned import WIDTHS
from pytest_rollouts.rows.records import RolloutOutcome

if TYPE_CHECKING:  # the dispatcher process reads headers and must not pay for pydantic
    from pytest_rollouts.config.settings import Settings


class MessageError(ValueError):
    """A message whose fields are not its type's: the two sides disagree on what it carries."""


@datatype(slots=True)
class HealthPlan:
    """Check the agents' health before any request: this many at once, these checks ignored."""

    workers: int
    ignored: list[str]


@datatype(slots=True)
class PlanHeader:
    """What the engine needs besides the plan's columns: agents, artifacts, bounds and retries."""

    tag: ClassVar[str] = "plan"
    urls: dict[str, str]
    # Agent names; the ``agent`` column indexes this list.
    agents: list[str]
    bodies: str
    out: str
    failures: str
    parallel: int
    # Rollouts admitted ahead of pytest (0: only what pytest claims, as an xdist worker).
    limit: int
    timeout: float
    retries: int
    retry_backoff: float
    max_attempts: int
    budget: float | None
    margin: float | None
    # xdist workers share the output; a crashed worker's tasks are re-queued elsewhere.
    shared_output: bool
    # Secrets travel over the pipe, never the command line.
    headers: dict[str, dict[str, str]]
    health: HealthPlan | None
    # The model agents among ``agents``, run in the dispatcher itself; their calls' timeout and bound.
    models: dict[str, ModelPlan]
    model_timeout: float
    model_parallel: int
    # A result with ``invalid_judge_response: true`` is a ``judge_invalid`` failure (the suite opted in).
    retry_invalid_judge: bool = False
    # Seconds between the engine's progress reports while no result comes (its heartbeat).
    progress_interval: float = 2.0
    # ``parallel`` is a ceiling each agent's own limit adapts under (``--rollouts-parallel auto:MAX``).
    adaptive: bool = False
    # Retries at most this fraction of recent first tries, plus a floor (``retry_budget.py``).
    retry_budget: float = 0.1
    # The model agents' response cache, an absolute folder ("": none; ``model/cache.py``).
    cache: str = ""
    # The type of each environment server among ``agents`` (its key under ``environment_servers:`` in
    # the head server's config), stamped ``_ng_result_type`` on the rows it runs, as NeMo Gym does.
    result_types: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(
        cls,
        settings: Settings,
        urls: Mapping[str, str],
        *,
        parallel: int,
        limit: int,
        paths: tuple[str, str, str] = ("", "", ""),
        shared_output: bool = False,
        models: Mapping[str, ModelPlan] | None = None,
        model_parallel: int | None = None,
        result_types: Mapping[str, str] | None = None,
    ) -> PlanHeader:
        """The header of a plan for ``urls``' agents (sorted by name: the ``agent`` column's order),
        with the run's bounds, retries, budget, headers and health checks from ``settings``.
        ``paths``: the materialized inputs, the outputs and the failures sidecar (none in memory).
        ``models``: the model agents among them; ``model_parallel``: their calls in flight (``parallel``
        unless given: this process's share of ``--rollouts-model-parallel``); ``result_types``: the
        environment servers' types (``Cleared.result_types``)."""
        agents = sorted(urls)
        bodies, out, failures = paths
        return cls(
            urls={name: urls[name] for name in agents},
            agents=agents,
            bodies=bodies,
            out=out,
            failures=failures,
            parallel=parallel,
            limit=limit,
            timeout=settings.timeout,
            retries=settings.retries,
            retry_backoff=settings.retry_backoff,
            max_attempts=settings.max_attempts,
            budget=settings.dispatch_budget,
            margin=settings.drain_margin,
            shared_output=shared_output,
            headers={name: headers_for(settings.agent_header, name) for name in agents},
            health=None
            if settings.no_health_check
            else HealthPlan(settings.health_workers, sorted(settings.health_ignore)),
            models={name: plan for name, plan in (models or {}).items() if name in agents},
            model_timeout=settings.model_timeout,
            model_parallel=model_parallel or parallel,
            retry_invalid_judge=settings.retry_invalid_judge_responses,
            progress_interval=settings.progress_interval,
            adaptive=isinstance(settings.parallel, AdaptiveParallel),
            retry_budget=settings.retry_budget,
            cache="" if settings.cache is None else str(settings.cache.absolute()),
            result_types={name: kind for name, kind in (result_types or {}).items() if name in agents},
        )


# -- pytest to the engine ------------------------------------------------------------------


@datatype(slots=True)
class CheckHealth:
    """Before any plan: check the health of ``header``'s agents (its headers, its health plan) and
    answer ``HealthChecked``. pytest asks the dispatcher process it started early, which has the
    HTTP client and an event loop loaded already, rather than loading them in its own process."""

    tag: ClassVar[str] = "check_health"
    header: PlanHeader


@datatype(slots=True)
class Claim:
    """pytest waits on this task before the look-ahead reached it: start it now."""

    tag: ClassVar[str] = "claim"
    slot: int


@datatype(slots=True)
class Freed:
    """pytest consumed this many rollouts: room to admit more."""

    tag: ClassVar[str] = "freed"
    count: int


@datatype(slots=True)
class Close:
    """Cancel what still runs, write and fsync everything, answer ``Closed``."""

    tag: ClassVar[str] = "close"


@datatype(slots=True)
class PostMetrics:
    """After ``Closed``: send a group's ``/aggregate_metrics`` (its body as ``rows/metric_body.py``
    reads it from ``out``) and answer ``MetricsPosted``. pytest's process has no event loop or HTTP
    client loaded, and this process has both."""

    tag: ClassVar[str] = "post_metrics"
    url: str
    headers: dict[str, str]
    out: str
    order: list[int]
    # The added rows, each as JSON text (``rows/metric_body.MetricsRequest``).
    added: list[str]
    timeout: float


# -- the engine to pytest ------------------------------------------------------------------


@datatype(slots=True)
class HealthChecked:
    """The answer to ``CheckHealth``: one line per agent that failed its check (none: all healthy)."""

    tag: ClassVar[str] = "health_checked"
    unhealthy: list[str]


@datatype(slots=True)
class Ready:
    """The agents are healthy (or unchecked): dispatch started."""

    tag: ClassVar[str] = "ready"


@datatype(slots=True)
class Progress:
    """What only the engine knows: requests in flight, the oldest one's age and (task, rollout),
    the tasks finished, rollouts sent and failures by class so far, the p50 and p90 latency
    of every rollout finished (None before the first), what the run lost to masking and
    dropped rollouts (``rows/masking.py``), and each agent's adaptive limit now (none under a
    fixed ``parallel``), for the live status file."""

    tag: ClassVar[str] = "progress"
    in_flight: int
    oldest_age: float | None
    oldest: list[int] | None
    tasks_done: int
    rollouts_sent: int
    failures: dict[str, int]
    latency: list[float] | None
    masking: MaskingCounts
    limits: dict[str, int] = dataclasses.field(default_factory=dict)


@datatype(slots=True)
class Done:
    """Every rollout of the task in ``slot`` finished and its rows are written."""

    tag: ClassVar[str] = "done"
    slot: int
    outcomes: list[RolloutOutcome]


@datatype(slots=True)
class Error:
    """Dispatching the task in ``slot`` hit a bug: the item fails with this traceback."""

    tag: ClassVar[str] = "error"
    slot: int
    traceback: str


@datatype(slots=True)
class Fatal:
    """A bug or a lost artifact outside any one rollout: the engine closes."""

    tag: ClassVar[str] = "fatal"
    why: str


@datatype(slots=True)
class Closed:
    """The engine's last message: every artifact is written, fsynced and closed. ``rollouts_sent``:
    all this dispatch sent, those no item reported (``-x``, Ctrl-C) included."""

    tag: ClassVar[str] = "closed"
    rollouts_sent: int
    # ``DispatchRecord``'s fields, flat: a list of dataclasses goes as a table only at the top.
    limits: list[LimitSeries] = dataclasses.field(default_factory=list)
    retries: dict[str, int] = dataclasses.field(default_factory=dict)
    retries_refused: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def record(self) -> DispatchRecord:
        return DispatchRecord(self.limits, self.retries, self.retries_refused)


@datatype(slots=True)
class MetricsPosted:
    """The answer to ``PostMetrics``: the reply's status and body (latin-1, so any bytes pass), or
    ``failed`` (no reply: why, naming no URL), or ``unreadable`` (a row of the body could not be read)."""

    tag: ClassVar[str] = "metrics_posted"
    status: int = 0
    body: str = ""
    failed: str = ""
    unreadable: str = ""


ToEngine = CheckHealth | Claim | Freed | Close | PostMetrics
FromEngine = HealthChecked | Ready | Progress | Done | Error | Fatal | Closed | MetricsPosted
Message = PlanHeader | ToEngine | FromEngine


def encode(msg: Message) -> bytes:
    """One framed message, ready to write."""
    return frame(orjson.dumps([msg.tag, _ENCODERS[msg.tag](msg)]))


def encode_column(column: array) -> bytes:
    """One of the plan's columns framed: its type code, then its values."""
    return frame(column.typecode.encode() + column.tobytes())


def decode_column(raw: bytes) -> array:
    """A plan's column from its frame's payload; ``MessageError`` for one no plan holds."""
    code = raw[:1].decode("ascii", "replace")
    if code not in WIDTHS or (len(raw) - 1) % array(code).itemsize:
        raise MessageError(f"not a plan column: {raw[:20]!r} ({len(raw)} bytes)")
    column = array(code)
    column.frombytes(memoryview(raw)[1:])
    return column


def decode(raw: bytes) -> Message:
    """The message in a frame's payload, built only if its fields are exactly its type's."""
    try:
        tag, fields = orjson.loads(raw)
        build = _BUILDERS[tag]
    except (ValueError, KeyError) as exc:  # orjson's JSONDecodeError is a ValueError
        raise MessageError(f"not a dispatcher message: {raw[:200]!r}") from exc
    try:
        return build(fields)
    except Mismatch as exc:
        raise MessageError(f"message {tag + exc.path!r} has {exc.said}") from None


def resolve() -> None:
    """Resolve the builders and encoders of the types every dispatched session exchanges now, for a
    process to call where it waits anyway (the dispatcher for pytest's first message, pytest for the
    health check's answer): the first message of each type then reads as fast as the next. A plan
    header's builder, with the types it holds, was most of what a first health check cost."""
    for cls in (CheckHealth, PlanHeader, HealthChecked, Ready, Progress, Done, Close, Closed):
        _BUILDERS[cls.tag]  # a lookup resolves it
        _ENCODERS[cls.tag]


class _PerTag(dict[str, Any]):
    """Each message type's builder (or encoder), resolved the first time its tag is met: resolving
    a type's hints is most of what importing this module costs, and each process meets only some
    of the types (a one-row run, few). A tag met before is a plain dict lookup; an unknown one a
    ``KeyError``."""

    def __init__(self, make: Callable[[type], Any]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, tag: str) -> Any:
        made = self[tag] = self._make(_BY_TAG[tag])
        return made


_BY_TAG = {
    cls.tag: cls
    for cls in (
        PlanHeader,
        CheckHealth,
        Claim,
        Freed,
        Close,
        HealthChecked,
        Ready,
        Progress,
        Done,
        Error,
        Fatal,
        Closed,
        PostMetrics,
        MetricsPosted,
    )
}
_BUILDERS: dict[str, Builder] = _PerTag(builder)
_ENCODERS: dict[str, Callable[[Any], Any]] = _PerTag(encoder)
