"""No secret reaches an export: W&B's run (its metadata, config, summary and files), MLflow's run
(params, tags, metrics and artifacts) or OpenTelemetry's spans.

Secrets given the ways a user gives them: a password in an agent's URL and a header value on the
command line (which W&B recorded whole as the run's metadata), and a model agent's API key in the
variable its suite names; and agents that echo each of them wherever a reply can carry it (a
field, a failure class, a metric's name and value). Everything the exporters wrote is read back as
bytes: W&B's offline run folder and MLflow's local file store, as ``wandb sync`` and an MLflow
server would take them.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from ..agents import Reply, ScriptedAgent
from ..helpers import QUIET, tasks, write_rows
from ..models import Call, FakeModel, reply_of, write_suite

PASSWORD = "pw-CANARY-3c4d5e6f7a"  # in the agent's URL
HEADER = "hdr-CANARY-8b9c0d1e2f"  # --rollouts-agent-header, on the command line
KEY = "sk-CANARY-4a5b6c7d8e9f"  # the model agent's key, in the variable its suite names
BASIC = base64.b64encode(f"evals:{PASSWORD}".encode()).decode()
# Not even cut short: BASIC[:8] encodes only "evals:".
FORBIDDEN = (PASSWORD[:8], HEADER[:8], KEY[:8], BASIC[8:])


def echoing(row: dict[str, Any], seen: int) -> Reply:
    """Echoes the header in a field, and in the failure class it gives task 1."""
    if row["_ng_task_index"] == 1:
        return Reply(json={"_ng_failure_class": f"refused_{HEADER}", "reward": 0.0})
    return Reply(json={"reward": 1.0, "seen": f"X-Key {HEADER}"})


def echoed_metrics(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "agent_metrics": {"mean/reward": 1.0, f"{HEADER}/reward": 1.0, "echo": f"sent {HEADER}"},
        "key_metrics": {"mean/reward": 1.0, f"echo {HEADER}": 0.5},
        "group_level_metrics": [],
        "repeat_level_metrics": [],
    }


def model_echoing_its_key(call: Call) -> Reply:
    return reply_of(call, f"you sent {call.headers.get('Authorization', '')}")


def leaks(root: Path) -> list[str]:
    """Every file under ``root`` that holds a secret, or its first characters."""
    return [
        f"{secret!r} in {path.relative_to(root)}"
        for path in sorted(root.rglob("*"))
        if path.is_file()
        for secret in FORBIDDEN
        if secret.encode() in path.read_bytes()
    ]


def test_no_secret_given_as_an_option_reaches_wandb_or_mlflow(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    for variable, folder in (("WANDB_DIR", "wandb"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_CONFIG_DIR", "config")):
        (tmp_path / folder).mkdir()
        monkeypatch.setenv(variable, str(tmp_path / folder))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'mlruns'}")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("EVAL_MODEL_CRED", KEY)  # a name no pattern takes for a secret's
    write_rows(pytester.path / "data.jsonl", [{**row, "agent_ref": {"name": "policy"}} for row in tasks(4)])
    with (
        ScriptedAgent(echoing, aggregate=echoed_metrics) as agent,
        FakeModel(model_echoing_its_key) as model,
    ):
        write_suite(pytester.path, model.base_url, extra='api_key_env = "EVAL_MODEL_CRED"\n')
        result = pytester.runpytest_subprocess(
            *QUIET,
            "data.jsonl",
            "suite",
            f"--rollouts-agent=policy={agent.url.replace('http://', f'http://evals:{PASSWORD}@')}",
            f"--rollouts-agent-header=X-Key={HEADER}",
            "--rollouts-out=out/r.jsonl",
            "--rollouts-html=out/report.html",
            "--rollouts-wandb=evals-project",
            "--rollouts-mlflow=evals",
        )
        assert {h.get("X-Key") for h in agent.headers} == {HEADER}, "the secrets were sent"
        assert {c.headers["Authorization"] for c in model.calls} == {f"Bearer {KEY}"}
    assert result.ret == 0, result.stdout.str()
    told = [line for line in result.stdout.lines if line.startswith(("rollouts: wandb", "rollouts: mlflow"))]
    assert [line.split(":")[1] for line in told] == [" wandb", " mlflow"], told
    # Not vacuous: each exporter wrote its run, the report and the metrics file among its files.
    [wandb_run] = (tmp_path / "wandb" / "wandb").glob("offline-run-*")
    assert {"r_aggregate_metrics.json", "report.html"} <= {p.name for p in (wandb_run / "files").iterdir()}
    assert sorted(p.name for p in (tmp_path / "mlruns").glob("*/*/artifacts/*")) == [
        "r_aggregate_metrics.json",
        "report.html",
    ]
    assert [p.name for p in (tmp_path / "mlruns").glob("*/*/metrics/policy")] == ["policy"]
    assert leaks(tmp_path / "wandb") == []
    assert leaks(tmp_path / "mlruns") == []
