"""The messages between pytest and its dispatcher process are typed: a field goes by name, and
one that one side has and the other lacks is an error naming it, never a shifted value."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import threading
import time
import typing
from array import array
from pathlib import Path

import orjson
import pytest

from pytest_rollouts.dispatch import dataclass_codec, messages
from pytest_rollouts.dispatch.frames import FrameBuffer, frame
from pytest_rollouts.dispatch.messages import MessageError, decode, decode_column, encode, encode_column
from pytest_rollouts.rows.masking import MaskingCounts
from pytest_rollouts.rows.records import RolloutOutcome

from ..helpers import plan_header

REPO = Path(__file__).resolve().parents[2]


EXAMPLES: list[messages.Message] = [
    plan_header(health=messages.HealthPlan(workers=2, ignored=["disk"]), headers={"a": {"X-Key": "k"}}),
    plan_header(budget=600.0, margin=1.5),
    messages.CheckHealth(plan_header(health=messages.HealthPlan(workers=4, ignored=[]), headers={"a": {"X-Key": "k"}})),
    messages.HealthChecked(["agent 'a' at http://127.0.0.1:9: HTTP 503"]),
    messages.HealthChecked([]),
    messages.Claim(7),
    messages.Freed(32),
    messages.Close(),
    messages.Ready(),
    messages.Progress(3, 1.25, [4, 1], 10, 42, {"agent_run_error": 2}, [0.5, 1.25], MaskingCounts(3, 2.5, 1, 2, 1)),
    messages.Progress(0, None, None, 0, 0, {}, None, MaskingCounts()),
    messages.Done(
        5,
        [
            RolloutOutcome(0, 1.0, None, "", 0.5, 1),
            RolloutOutcome(1, None, "agent_request_failed", "no reply", 2.0, 3, given_up=True),
            RolloutOutcome(2, 0.0, None, "", 0.0, 0, cached=True),
            RolloutOutcome(3, None, "cancelled", "budget", 0.0, 0, persisted=False),
        ],
    ),
    messages.Error(5, "Traceback ..."),
    messages.Fatal("cannot write out/r.jsonl"),
    messages.Closed(3),
    messages.PostMetrics(
        "http://127.0.0.1:9", {"Authorization": "Bearer k"}, "out/r.jsonl", [0, -1, 120], ['{"reward":NaN}'], 30.0
    ),
    messages.MetricsPosted(200, '{"mean/reward": 0.5}'),
    messages.MetricsPosted(failed="Server disconnected"),
]


def payload(msg: messages.Message) -> bytes:
    [raw] = FrameBuffer().feed(encode(msg))
    return raw


def test_every_message_round_trips() -> None:
    assert {type(m) for m in EXAMPLES} == set(typing.get_args(messages.Message)), "an example of each type"
    for msg in EXAMPLES:
        assert decode(payload(msg)) == msg


def test_outcomes_travel_by_field_name() -> None:
    """A reward is never read from the place a failure class used to sit: a task's outcomes go as
    a table whose columns are named, once per message rather than once per rollout."""
    raw = payload(
        messages.Done(1, [RolloutOutcome(0, 0.75, None, "", 0.5, 1), RolloutOutcome(1, 0.25, None, "", 0.5, 1)])
    )
    tag, fields = orjson.loads(raw)
    assert tag == "done"
    table = fields["outcomes"]
    assert table["fields"][:3] == ["rollout_index", "reward", "failure_class"]
    assert [row[1] for row in table["rows"]] == [0.75, 0.25] and table["rows"][0][2] is None


def outcome_table(**changes: object) -> dict[str, object]:
    table = orjson.loads(payload(messages.Done(1, [RolloutOutcome(0, 1.0, None, "", 0.5, 1)])))[1]["outcomes"]
    return {**table, **changes}


@pytest.mark.parametrize(
    ("tag", "fields", "said"),
    [
        # A field one side added: refused, naming it, instead of shifting the fields after it.
        (
            "done",
            {"slot": 1, "outcomes": outcome_table(fields=[*outcome_table()["fields"], "x"])},
            "message 'done.outcomes' has field 'x' its type does not define",
        ),
        # The same columns in another order: refused, never read by place.
        (
            "done",
            {"slot": 1, "outcomes": outcome_table(fields=sorted(outcome_table()["fields"]))},
            f"message 'done.outcomes' has its fields in the order {sorted(outcome_table()['fields'])}",
        ),
        (
            "done",
            {"slot": 1, "outcomes": outcome_table(rows=[[0, 1.0]])},
            "message 'done.outcomes' has a row that is not 11 values",
        ),
        # A field the other side lacks.
        ("claim", {}, "message 'claim' has no field 'slot'"),
        (
            "progress",
            {"in_flight": 0, "oldest_age": None, "oldest": None, "tasks_done": 0, "rollouts_sent": 0, "sent": 1},
            "message 'progress' has field 'sent' its type does not define and no field 'failures' and no field "
            "'latency' and no field 'limits' and no field 'masking'",
        ),
    ],
)
def test_a_field_one_side_lacks_is_an_error_naming_message_and_field(
    tag: str, fields: dict[str, object], said: str
) -> None:
    with pytest.raises(MessageError) as caught:
        decode(orjson.dumps([tag, fields]))
    assert str(caught.value) == said


def _engine_answer(tmp_path: Path, sent: bytes) -> messages.Message:
    """What a real dispatcher process answers ``sent`` (a plan it cannot read), once it has exited 1."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_rollouts.dispatch.engine"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
    )
    out, _ = proc.communicate(sent, timeout=60)
    assert proc.returncode == 1
    [raw] = FrameBuffer().feed(out)
    return decode(raw)


def test_a_plan_with_a_field_the_engine_lacks_stops_it_naming_the_field(tmp_path: Path) -> None:
    """A real dispatcher process answers a plan it cannot read with why, then exits."""
    fields = orjson.loads(orjson.dumps(plan_header()))
    fields["priority"] = 1
    assert _engine_answer(tmp_path, frame(orjson.dumps(["plan", fields]))) == messages.Fatal(
        "the dispatcher could not read the plan: message 'plan' has field 'priority' its type does not define"
    )


@pytest.mark.parametrize(("code", "values"), [("B", [0, 255]), ("H", [256, 65_535]), ("I", [70_000]), ("q", [5 << 32])])
def test_a_plan_column_goes_as_narrow_as_the_plan_holds_it(code: str, values: list[int]) -> None:
    """A million rollouts' task numbers go (and are held by the dispatcher) in 4 bytes each, not 8."""
    [raw] = FrameBuffer().feed(encode_column(array(code, values)))
    column = decode_column(raw)
    assert (column.typecode, column.tolist()) == (code, values)


@pytest.mark.parametrize("payload", [b"d" + array("d", [1.5]).tobytes(), b"q" + bytes(7)])
def test_a_plan_column_the_engine_cannot_read_stops_it_saying_so(tmp_path: Path, payload: bytes) -> None:
    """A column of floats, or one cut short, is no plan's: the dispatcher process says so and exits."""
    reply = _engine_answer(tmp_path, encode(plan_header()) + frame(payload))
    assert isinstance(reply, messages.Fatal)
    assert reply.why.startswith("the dispatcher could not read the plan: not a plan column: b'" + payload[:1].decode())


def test_a_message_type_resolves_without_compiling_each_annotation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both processes resolve the types they meet as they start: ``typing.get_type_hints`` compiled
    each annotation on its own (a plan header's 27), most of what resolving a type cost."""

    def one_at_a_time(*args: object, **kwargs: object) -> None:
        raise AssertionError("typing.get_type_hints compiles each annotation on its own")

    monkeypatch.setattr(typing, "get_type_hints", one_at_a_time)
    for cls in typing.get_args(messages.Message):
        dataclass_codec.builder(cls)
        dataclass_codec.encoder(cls)


@dataclasses.dataclass
class _Outcomes:
    outcomes: list[RolloutOutcome]


@dataclasses.dataclass
class _TaskOutcomes(_Outcomes):
    slot: int


def test_a_field_its_base_class_annotates_is_resolved_too() -> None:
    """Only a type's own annotations are evaluated together; one a base class holds is evaluated with it."""
    msg = _TaskOutcomes([RolloutOutcome(0, 1.0, None, "", 0.5, 1)], 3)
    sent = orjson.loads(orjson.dumps(dataclass_codec.encoder(_TaskOutcomes)(msg)))
    assert sent["outcomes"]["fields"][:2] == ["rollout_index", "reward"]
    assert dataclass_codec.builder(_TaskOutcomes)(sent) == msg


@dataclasses.dataclass
class _Quoted:
    one: "RolloutOutcome"  # noqa: UP037 (quoted on purpose: a forward reference inside a postponed annotation)
    many: list["RolloutOutcome"]  # noqa: UP037


def test_a_quoted_name_inside_an_annotation_resolves_to_its_type() -> None:
    """One ``eval`` of ``list["Inner"]`` leaves the string ``'Inner'``: the outcomes would decode as
    plain dicts, silently. Such a type is resolved as ``typing.get_type_hints`` resolves it."""
    outcome = RolloutOutcome(0, 1.0, None, "", 0.5, 1)
    sent = orjson.loads(orjson.dumps(dataclass_codec.encoder(_Quoted)(_Quoted(outcome, [outcome]))))
    assert sent["many"]["fields"][:2] == ["rollout_index", "reward"]
    assert dataclass_codec.builder(_Quoted)(sent) == _Quoted(outcome, [outcome])


@pytest.mark.parametrize("cls", sorted(messages._BY_TAG.values(), key=lambda cls: cls.tag), ids=lambda cls: cls.tag)
def test_each_message_type_resolves_as_typing_does(cls: type) -> None:
    hints = typing.get_type_hints(cls)
    assert dataclass_codec._field_types(cls) == {field.name: hints[field.name] for field in dataclasses.fields(cls)}


def test_the_dispatcher_resolves_its_message_types_while_it_waits_for_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan header's builder, with the types it holds, was most of what the first health check cost
    the dispatcher: resolved before its first read, which waits for pytest, it costs the check nothing."""
    from pytest_rollouts.dispatch.intake import read_plan

    monkeypatch.setattr(messages, "_BUILDERS", messages._PerTag(messages.builder))
    monkeypatch.setattr(messages, "_ENCODERS", messages._PerTag(messages.encoder))
    read_end, write_end = os.pipe()
    seen: list[set[str]] = []

    def watch_then_close() -> None:
        deadline = time.monotonic() + 10
        while "plan" not in messages._BUILDERS and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(set(messages._BUILDERS) | set(messages._ENCODERS))
        os.close(write_end)  # pytest went away: nothing was ever sent

    watcher = threading.Thread(target=watch_then_close)
    watcher.start()
    with open(read_end, "rb", buffering=0) as stdin:
        assert asyncio.run(read_plan(stdin, sys.stdout)) is None
    watcher.join()
    assert {"check_health", "plan", "health_checked", "ready", "done"} <= seen[0]
