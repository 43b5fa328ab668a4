"""``--rollouts-mlflow`` and ``--rollouts-wandb`` (``export/``): the scored run logged where asked,
read back without a network: MLflow's local file store, W&B's offline mode.

Sessions that export run in a child process: both libraries leave state in the process that
imports them (W&B's service process, MLflow's tracing setup). What reads their records back is
imported with this module, before any ``pytester`` test: pytester takes back the modules a test
imported, and numpy, which both import, cannot be imported twice in one process.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from mlflow import MlflowClient
from wandb.proto import wandb_internal_pb2

from pytest_rollouts import CollectionConfig, CollectionWarning, run
from pytest_rollouts.export.exports import export_run
from pytest_rollouts.export.to_mlflow import mlflow_name
from pytest_rollouts.net.auth import Redactor

from ..agents import Reply, ScriptedAgent
from ..helpers import QUIET, read_rows, tasks, write_rows

EXPERIMENT = "evals"
NONE = Redactor({})  # a run that holds no secret


@pytest.fixture
def mlruns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A local MLflow file store under ``tmp_path``, where every MLflow client of the test looks."""
    uri = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    # MLflow 3 keeps the file store only on request; a database store needs the full mlflow package.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


def session(pytester: pytest.Pytester, agent: ScriptedAgent, *args: str) -> pytest.RunResult:
    write_rows(pytester.path / "data.jsonl", tasks(6))
    return pytester.runpytest_subprocess(
        *QUIET,
        "data.jsonl",
        f"--rollouts-agent={agent.url}",
        "--rollouts-out=out/r.jsonl",
        "--rollouts-repeats=2",
        *args,
    )


def mlflow_runs(uri: str, experiment: str = EXPERIMENT) -> list[Any]:
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    return [] if found is None else client.search_runs([found.experiment_id])


def test_mlflow_gets_the_metrics_the_coverage_and_the_metrics_file(
    pytester: pytest.Pytester, agent: ScriptedAgent, mlruns: str
) -> None:
    result = session(pytester, agent, f"--rollouts-mlflow={EXPERIMENT}")
    assert result.ret == 0
    [logged] = mlflow_runs(mlruns)
    assert (logged.info.run_name, logged.info.status) == ("r", "FINISHED")
    metrics_file = pytester.path / "out" / "r_aggregate_metrics.json"
    [entry] = orjson.loads(metrics_file.read_bytes())
    group, metrics = entry["agent_ref"]["name"], logged.data.metrics
    assert entry["key_metrics"], "a metrics file with numbers to log"
    for name, value in entry["key_metrics"].items():
        assert metrics[mlflow_name(f"{group}/{name}")] == pytest.approx(value)
    assert metrics[f"{group}/pass_at_2/reward"] == pytest.approx(entry["agent_metrics"]["pass@2/reward"])
    for name in ("expected", "scored", "failed", "missing"):
        assert metrics[f"{group}/coverage/{name}"] == entry["coverage"][name]
        assert metrics[f"run/coverage/{name}"] == entry["coverage"][name]
    assert metrics["run/mean_reward"] == pytest.approx(8 / 12)
    coverage = logged.data.tags["rollouts.coverage"]
    assert coverage.startswith("12 of 12 rollouts scored") and coverage in result.stdout.str()
    assert logged.data.params == {"out": str(pytester.path / "out" / "r.jsonl")}
    client = MlflowClient(tracking_uri=mlruns)
    assert [a.path for a in client.list_artifacts(logged.info.run_id)] == ["r_aggregate_metrics.json"]
    assert f"rollouts: mlflow: logged run {logged.info.run_id} in experiment '{EXPERIMENT}'" in result.stdout.lines
    copy = Path(client.download_artifacts(logged.info.run_id, "r_aggregate_metrics.json", str(pytester.path)))
    assert copy.read_bytes() == metrics_file.read_bytes()


def test_the_python_api_exports_too_and_the_report_is_logged_when_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlruns: str, agent: ScriptedAgent
) -> None:
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(3))
    config = CollectionConfig(input="data.jsonl", out="out/r.jsonl", agents={"policy": agent.url}, mlflow=EXPERIMENT)
    with pytest.warns(CollectionWarning) as told:
        result = run(config)
    assert result.exit_status == 0
    [logged] = mlflow_runs(mlruns)
    assert f"mlflow: logged run {logged.info.run_id} in experiment '{EXPERIMENT}'" in [str(w.message) for w in told]
    assert logged.data.metrics["policy/mean/reward"] == pytest.approx(result.mean_reward)
    # The HTML report, once its option writes one, is a file at the end of the run: logged beside the metrics.
    report = tmp_path / "out" / "report.html"
    report.write_text("<html></html>")
    [told] = export_run({"mlflow": "with-report", "wandb": None}, result.score, result.paths.out, report, secrets=NONE)
    assert told.startswith("mlflow: logged run ")
    [with_report] = mlflow_runs(mlruns, "with-report")
    client = MlflowClient(tracking_uri=mlruns)
    assert sorted(a.path for a in client.list_artifacts(with_report.info.run_id)) == [
        "r_aggregate_metrics.json",
        "report.html",
    ]
    export_run({"mlflow": "missing-report"}, result.score, result.paths.out, tmp_path / "none.html", secrets=NONE)
    [without] = mlflow_runs(mlruns, "missing-report")
    assert [a.path for a in client.list_artifacts(without.info.run_id)] == ["r_aggregate_metrics.json"]


def test_the_report_a_run_writes_is_the_one_logged(
    pytester: pytest.Pytester, agent: ScriptedAgent, mlruns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--rollouts-html and --rollouts-mlflow together: the report is written first, then logged with
    its bytes (the session's and the Python API's ends alike)."""
    result = session(pytester, agent, f"--rollouts-mlflow={EXPERIMENT}", "--rollouts-html=out/report.html")
    assert result.ret == 0
    [logged] = mlflow_runs(mlruns)
    client = MlflowClient(tracking_uri=mlruns)
    assert sorted(a.path for a in client.list_artifacts(logged.info.run_id)) == [
        "r_aggregate_metrics.json",
        "report.html",
    ]
    copy = Path(client.download_artifacts(logged.info.run_id, "report.html", str(tmp_path)))
    assert copy.read_bytes() == (pytester.path / "out" / "report.html").read_bytes()

    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(3))
    config = CollectionConfig(
        input="data.jsonl", out="api/r.jsonl", agents={"policy": agent.url}, mlflow="api", html="api/report.html"
    )
    with pytest.warns(CollectionWarning):
        assert run(config).exit_status == 0
    [from_api] = mlflow_runs(mlruns, "api")
    assert "report.html" in [a.path for a in client.list_artifacts(from_api.info.run_id)]


def test_under_xdist_only_the_controller_exports(pytester: pytest.Pytester, agent: ScriptedAgent, mlruns: str) -> None:
    result = session(pytester, agent, "-n", "2", f"--rollouts-mlflow={EXPERIMENT}")
    assert result.ret == 0
    [logged] = mlflow_runs(mlruns)
    assert logged.data.metrics["run/coverage/scored"] == 12


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


PASSWORD = "tr4cking-s3cret-pw"
TOKEN = "wandb-key-0123456789abcdef"


@pytest.mark.parametrize(("gate", "status"), [((), 0), (("--rollouts-fail-under=0.99",), 7)])
def test_a_failed_export_is_a_line_and_leaves_results_and_exit_status(
    pytester: pytest.Pytester, agent: ScriptedAgent, monkeypatch: pytest.MonkeyPatch, gate: tuple[str, ...], status: int
) -> None:
    """A tracking server that is down: the error, which quotes its URL, is told without the URL's
    password, and the run's rows, metrics and exit status are as they would have been."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://ci:{PASSWORD}@127.0.0.1:{closed_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    monkeypatch.setenv("WANDB_API_KEY", TOKEN)
    result = session(pytester, agent, f"--rollouts-mlflow={EXPERIMENT}", *gate)
    assert result.ret == status
    shown = result.stdout.str() + result.stderr.str()
    [line] = [line for line in result.stdout.lines if line.startswith("rollouts: mlflow export")]
    assert line.startswith(f"rollouts: mlflow export to '{EXPERIMENT}' failed, the results are on disk: ")
    assert "Connection refused" in line and "[redacted]@127.0.0.1" in line
    assert PASSWORD not in shown and TOKEN not in shown
    assert len(read_rows(pytester.path / "out" / "r.jsonl")) == 12
    assert (pytester.path / "out" / "r_aggregate_metrics.json").is_file()


@pytest.mark.parametrize("option", ["wandb", "mlflow"])
def test_a_missing_package_is_a_usage_error_before_anything_is_sent(
    pytester: pytest.Pytester, agent: ScriptedAgent, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    monkeypatch.setitem(sys.modules, option, None)  # as if not installed: no import finds it
    write_rows(pytester.path / "data.jsonl", tasks(3))
    result = pytester.runpytest(
        *QUIET, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-out=out/r.jsonl", f"--rollouts-{option}=x"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"needs the {option} package: pip install 'pytest-rollouts[{option}]'" in result.stderr.str()
    assert agent.requests == [] and not (pytester.path / "out").exists()
    with pytest.raises(ValueError, match=rf"{option}: .*pip install 'pytest-rollouts\[{option}\]'"):
        CollectionConfig(input="data.jsonl", out="out/r.jsonl", **{option: "x"})


def wandb_records(run_dir: Path) -> list[Any]:
    """The records of an offline W&B run, read from its ``.wandb`` file: a LevelDB-style log (a 7-byte
    header, then 32 KiB blocks of chunks, each with a 7-byte header) of protobuf ``Record``s."""
    [path] = run_dir.glob("run-*.wandb")
    data, block, position, pending, records = path.read_bytes(), 32768, 7, b"", []
    while position + 7 <= len(data):
        left = block - position % block
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if left < 7 or (length, kind) == (0, 0):  # the rest of a block is padding
            position += left
            continue
        chunk, position = data[position + 7 : position + 7 + length], position + 7 + length
        pending += chunk
        if kind in (1, 4):  # a whole record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
        elif kind == 2:  # the first chunk of a record
            pending = chunk
    return records


def test_wandb_offline_gets_the_metrics_the_coverage_and_the_metrics_file(
    pytester: pytest.Pytester, agent: ScriptedAgent, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    for variable, folder in (
        ("WANDB_DIR", "wandb"),
        ("WANDB_CACHE_DIR", "cache"),
        ("WANDB_CONFIG_DIR", "config"),
        ("WANDB_DATA_DIR", "data"),
    ):
        (tmp_path / folder).mkdir()
        monkeypatch.setenv(variable, str(tmp_path / folder))
    result = session(pytester, agent, "--rollouts-wandb=evals-project")
    assert result.ret == 0
    [run_dir] = (tmp_path / "wandb" / "wandb").glob("offline-run-*")
    records = wandb_records(run_dir)
    [started] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (started.project, started.display_name, started.job_type) == ("evals-project", "r", "eval")
    summary: dict[str, Any] = {}
    for record in records:
        if record.WhichOneof("record_type") == "summary":
            summary.update(
                {"/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in record.summary.update}
            )
    metrics_file = pytester.path / "out" / "r_aggregate_metrics.json"
    [entry] = orjson.loads(metrics_file.read_bytes())
    group = entry["agent_ref"]["name"]
    for name, value in entry["key_metrics"].items():
        assert summary[f"{group}/{name}"] == pytest.approx(value)
    assert summary[f"{group}/coverage/scored"] == summary["run/coverage/expected"] == 12
    assert summary["coverage"].startswith("12 of 12 rollouts scored")
    saved = [f.path for r in records if r.WhichOneof("record_type") == "files" for f in r.files.files]
    assert "r_aggregate_metrics.json" in saved
    assert (run_dir / "files" / "r_aggregate_metrics.json").read_bytes() == metrics_file.read_bytes()
    assert f"rollouts: wandb: logged run in {run_dir} (offline; wandb sync uploads it)" in result.stdout.lines
    [exit_record] = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
    assert exit_record.exit_code == 0


ODD_NAMES = {"a//b": 1.0, "/lead": 2.0, "x" * 300: 3.0, "a/b": 4.0, "ok": 5.0, "half\ud83d": 6.0}


def test_metric_names_mlflow_refuses_are_renamed_or_left_out_and_the_rest_is_logged(
    pytester: pytest.Pytester, mlruns: str
) -> None:
    """One name MLflow refuses (``a//b``, ``/lead``, over 250 characters, an agent named ``..``)
    failed the whole export. A lone surrogate (half an emoji) failed it too."""
    write_rows(pytester.path / "data.jsonl", [{**row, "agent_ref": {"name": ".."}} for row in tasks(3)])
    body = orjson.dumps({"key_metrics": {k: v for k, v in ODD_NAMES.items() if "\ud83d" not in k}})
    body = body[:-2] + b',"half\\ud83d":6.0}}'  # as Python's json writes it: orjson refuses to
    with ScriptedAgent(aggregate=lambda _: Reply(raw=body)) as agent:
        result = pytester.runpytest_subprocess(
            *QUIET,
            "data.jsonl",
            f"--rollouts-agent=..={agent.url}",
            "--rollouts-out=out/r.jsonl",
            f"--rollouts-mlflow={EXPERIMENT}",
        )
    assert result.ret == 0, result.stdout.str()
    [logged] = mlflow_runs(mlruns)
    metrics = logged.data.metrics
    assert {name: metrics[name] for name in ("__/a/b", "__/lead", "__/ok", "__/half_")} == {
        "__/a/b": 1.0,
        "__/lead": 2.0,
        "__/ok": 5.0,
        "__/half_": 6.0,
    }
    assert metrics["run/coverage/scored"] == 3
    [line] = [line for line in result.stdout.lines if line.startswith("rollouts: mlflow")]
    assert line.startswith(f"rollouts: mlflow: logged run {logged.info.run_id} in experiment '{EXPERIMENT}'; ")
    assert "'../a//b' as '__/a/b'" in line and "'..//lead' as '__/lead'" in line, line
    assert "'../a/b' (the same MLflow name as '../a//b')" in line and "(over 250 characters)" in line, line
