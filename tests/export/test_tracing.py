"""OpenTelemetry spans of a run (``export/tracing.py``): a ``job`` span, and a ``rollout`` span per
rollout sent, its child, made where outcomes arrive; nothing imported when no provider is set.

Spans are read back through the SDK's ``InMemorySpanExporter``. A tracer provider is global to a
process and set once, so the fixture sets one for a test and takes it back after (as
OpenTelemetry's own test utilities do), and runs that set their own go in a child process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

trace = pytest.importorskip("opentelemetry.trace")
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.util._once import Once  # noqa: E402

from pytest_rollouts import CollectionConfig, run, run_from_config  # noqa: E402
from pytest_rollouts.export.tracing import JOB, ROLLOUT, RunTrace  # noqa: E402

from ..agents import Reply, ScriptedAgent, verifier  # noqa: E402
from ..helpers import QUIET, read_rows, run_rollouts, tasks, write_rows  # noqa: E402  # noqa: E402

# Task 2 fails every time, with a status no retry follows.
FAILING_TASK = 2


def failing_task(row: dict[str, Any], seen: int) -> Reply:
    if row["_ng_task_index"] == FAILING_TASK:
        return Reply(status=400, json={"error": "bad request"})
    return verifier(row, seen)


def _reset_provider() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """A tracer provider for this process, with an in-memory exporter; the process has none after."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_provider()
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    _reset_provider()


def check_run_spans(finished: list[ReadableSpan], out: Path, rollouts: int) -> ReadableSpan:
    """One ``job`` span, a ``rollout`` span for each rollout its child, with the attributes the rows
    on disk say (a failed rollout's class as the sidecar has it); the ``job`` span."""
    [job] = [span for span in finished if span.name == JOB]
    children = [span for span in finished if span.name == ROLLOUT]
    assert len(finished) == 1 + len(children)
    assert len(children) == rollouts
    assert job.parent is None
    for span in children:
        assert span.parent is not None and span.parent.span_id == job.context.span_id
        assert span.context.trace_id == job.context.trace_id
        # Where the rollout ran on the clock: sent after the run began, answered before it ended.
        assert job.start_time < span.start_time < span.end_time < job.end_time
    by_key = {(s.attributes["rollouts.task_index"], s.attributes["rollouts.rollout_index"]): s for s in children}
    assert len(by_key) == rollouts
    results = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in read_rows(out)}
    failures = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in read_rows(out.with_name("r_failures.jsonl"))}
    assert set(by_key) == set(results) | set(failures)
    for key, span in by_key.items():
        attributes = span.attributes
        assert attributes["rollouts.agent"] == {**results, **failures}[key]["agent_ref"]["name"]
        # The span lasts its latency, the rollout's elapsed time as the row records it.
        latency = attributes["rollouts.latency_s"]
        assert (span.end_time - span.start_time) / 1e9 == pytest.approx(latency, abs=1e-6)
        if key in failures:
            failure_class = failures[key]["_ng_failure_class"]
            assert attributes["rollouts.failure_class"] == attributes["rollouts.status"] == failure_class
            assert span.status.status_code == trace.StatusCode.ERROR
            assert "rollouts.reward" not in attributes
        else:
            assert attributes["rollouts.status"] == "scored"
            assert attributes["rollouts.reward"] == results[key]["reward"]
            assert latency == pytest.approx(results[key]["elapsed_seconds"], abs=1e-6)
            assert "rollouts.failure_class" not in attributes
    assert job.attributes["rollouts.out"] == str(out)
    assert job.attributes["rollouts.planned"] == rollouts
    return job


def test_a_pytest_session_traces_its_job_and_each_rollout(
    pytester: pytest.Pytester, spans: InMemorySpanExporter
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(6))
    with ScriptedAgent(failing_task) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2")
    assert result.parseoutcomes() == {"passed": 5, "agent_run_error": 1}
    job = check_run_spans(list(spans.get_finished_spans()), pytester.path / "out" / "r.jsonl", 12)
    # tasks(6): tasks 0 and 3 answered wrong, task 2 failed: 6 of the 10 scored rollouts score 1.
    assert job.attributes["rollouts.mean_reward"] == pytest.approx(6 / 10)
    assert (job.attributes["rollouts.expected"], job.attributes["rollouts.failed"]) == (12, 2)


def test_a_resumed_run_traces_only_the_rollouts_it_sends(
    pytester: pytest.Pytester, spans: InMemorySpanExporter
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(6))
    with ScriptedAgent(failing_task) as agent:
        run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2")
    spans.clear()
    with ScriptedAgent() as agent:
        resumed = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2", "--rollouts-resume"
        )
    resumed.assert_outcomes(passed=6)
    sent = [span for span in spans.get_finished_spans() if span.name == ROLLOUT]
    assert sorted(s.attributes["rollouts.rollout_index"] for s in sent) == [0, 1]
    assert {s.attributes["rollouts.task_index"] for s in sent} == {FAILING_TASK}


def test_the_python_api_traces_its_job_and_each_rollout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spans: InMemorySpanExporter
) -> None:
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(6))
    with ScriptedAgent(failing_task) as agent:
        config = CollectionConfig(input="data.jsonl", out="out/r.jsonl", agents={"policy": agent.url}, repeats=2)
        result = run(config)
    assert result.exit_status == 0
    job = check_run_spans(list(spans.get_finished_spans()), Path("out/r.jsonl"), 12)
    assert job.attributes["rollouts.mean_reward"] == pytest.approx(result.mean_reward)


@pytest.mark.asyncio
async def test_run_from_config_traces_in_the_callers_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spans: InMemorySpanExporter
) -> None:
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(3))
    with ScriptedAgent() as agent:
        await run_from_config({"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"policy": agent.url}})
    check_run_spans(list(spans.get_finished_spans()), Path("out/r.jsonl"), 3)


def test_no_provider_no_trace() -> None:
    """OpenTelemetry imported but no provider set (the API's no-op proxy): tracing is off."""
    _reset_provider()
    assert RunTrace.start({}) is None


# A conftest that says, as the session ends, which OpenTelemetry modules the process imported.
IMPORTED = """
import json, sys
def pytest_unconfigure(config):
    loaded = sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")
    (config.rootpath / "imported.json").write_text(json.dumps(loaded))
"""


def test_without_a_provider_nothing_is_imported(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(4))
    pytester.makeconftest(IMPORTED)
    result = pytester.runpytest_subprocess(
        *QUIET, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-out=out/r.jsonl"
    )
    result.assert_outcomes(passed=4)
    assert json.loads((pytester.path / "imported.json").read_text()) == []


# A conftest that sets a tracer provider, as a user would, whose exporter appends each span as it
# ends to a file named for the process's xdist role (a worker may end before its unconfigure runs).
WORKERS_PROVIDER = """
import json
from pathlib import Path
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

ROLE = {}

class ToFile(SpanExporter):
    def export(self, spans):
        with open(Path(__file__).parent / f"spans-{ROLE['name']}.jsonl", "a") as out:
            for s in spans:
                key = [s.attributes.get("rollouts.task_index"), s.attributes.get("rollouts.rollout_index")]
                span = {"name": s.name, "id": s.context.span_id, "parent": s.parent and s.parent.span_id, "key": key}
                out.write(json.dumps(span) + "\\n")
        return SpanExportResult.SUCCESS

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ToFile()))
trace.set_tracer_provider(provider)

def pytest_configure(config):
    ROLE["name"] = config.workerinput["workerid"] if hasattr(config, "workerinput") else "controller"
"""


def test_under_xdist_each_worker_traces_its_own_rollouts(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(10))
    pytester.makeconftest(WORKERS_PROVIDER)
    result = pytester.runpytest_subprocess(
        *QUIET,
        "-n",
        "2",
        "data.jsonl",
        f"--rollouts-agent={agent.url}",
        "--rollouts-out=out/r.jsonl",
        "--rollouts-repeats=2",
    )
    result.assert_outcomes(passed=10)
    assert not (pytester.path / "spans-controller.jsonl").exists()  # it dispatches nothing
    keys = []
    for path in pytester.path.glob("spans-gw*.jsonl"):
        worker = [json.loads(line) for line in path.read_text().splitlines()]
        [job] = [span for span in worker if span["name"] == JOB]
        rollouts = [span for span in worker if span["name"] == ROLLOUT]
        assert len(worker) == 1 + len(rollouts)
        assert all(span["parent"] == job["id"] for span in rollouts)
        keys += [tuple(span["key"]) for span in rollouts]
    assert sorted(keys) == [(t, r) for t in range(10) for r in (0, 1)]


def test_no_secret_reaches_a_span(pytester: pytest.Pytester, spans: InMemorySpanExporter) -> None:
    """A password in the agent's URL and a header value on the command line, which the agent
    echoes as its failure class: no span's name, attribute or status carries them."""
    password, header = "pw-CANARY-0a1b2c3d4e", "hdr-CANARY-5f6a7b8c9d"

    def echoing(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] == FAILING_TASK:
            return Reply(json={"_ng_failure_class": f"refused_{header}", "failure_reason": header})
        return verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(4))
    with ScriptedAgent(echoing) as agent:
        url = agent.url.replace("http://", f"http://evals:{password}@")
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={url}", f"--rollouts-agent-header=X-Key={header}"
        )
        assert {h.get("X-Key") for h in agent.headers} == {header}, "the secret was sent"
    assert result.ret == 0
    finished = list(spans.get_finished_spans())
    [failed] = [span for span in finished if span.status.status_code == trace.StatusCode.ERROR]
    assert failed.attributes["rollouts.failure_class"] == "refused_[redacted]"
    told = repr([(s.name, dict(s.attributes), s.status.description, s.events, s.resource.attributes) for s in finished])
    assert password[:8] not in told and header[:8] not in told
