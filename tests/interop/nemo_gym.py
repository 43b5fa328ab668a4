"""NeMo Gym 0.7.0's own artifacts (``golden/``, re-recorded by ``record_golden.sh``), a loopback agent
that answers as the recorded stack did, and NeMo Gym's resume reader restated from its source.

Line numbers below are NeMo Gym 0.7.0's ``nemo_gym/rollout_collection.py``.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml

from ..agents import Behaviour, Reply
from ..helpers import read_rows

GOLDEN = Path(__file__).parent / "golden"
AGENT = "string_match_simple_agent"
ENVIRONMENT_SERVER = "string_match_environment_server"
STEM = "rollouts"
# NeMo Gym's default ``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS``.
MAX_ATTEMPTS = 3

Key = tuple[int, int]


def key(row: Mapping[str, Any]) -> Key:
    return row["_ng_task_index"], row["_ng_rollout_index"]


def artifacts(run: str | Path) -> dict[str, list[dict[str, Any]]]:
    """A run's three row files by their suffix ("" for the rollouts): a golden run's name, or a folder."""
    folder = GOLDEN / run if isinstance(run, str) else run
    return {
        suffix: read_rows(folder / f"{STEM}{suffix}.jsonl") if (folder / f"{STEM}{suffix}.jsonl").exists() else []
        for suffix in ("", "_failures", "_materialized_inputs")
    }


def copy_run(run: str, to: Path) -> None:
    """A golden run's files into ``to`` (the output folder of a run that resumes it)."""
    to.mkdir(parents=True, exist_ok=True)
    for path in (GOLDEN / run).iterdir():
        shutil.copy(path, to / path.name)


def rewards(rows: list[dict[str, Any]]) -> dict[Key, Any]:
    return {key(row): row.get("reward") for row in rows}


def stack_config(port: int) -> str:
    """The recorded stack's config with its agent and environment server at ``port`` (one loopback
    agent answers for both) and its other servers at a port nothing listens on."""
    config = yaml.safe_load((GOLDEN / "head_config.yaml").read_text())
    for name, entry in config.items():
        if name == "head_server":
            continue
        for servers in entry.values():
            for server in servers.values():
                server["port"] = port if name in (AGENT, ENVIRONMENT_SERVER) else 9
    return yaml.safe_dump(config, sort_keys=False)


def replaying(run: str = "agent") -> Behaviour:
    """A ``ScriptedAgent`` behaviour answering as the stack did in the golden ``run``: each rollout's
    ``/run`` reply (the stored result without the collector's keys), or its failure's status and body."""
    complete = artifacts(run)
    recorded = {key(row): row for row in [*complete["_failures"], *complete[""]]}

    def replayed(row: dict[str, Any], seen: int) -> Reply:
        found = recorded.get(key(row))
        if found is None:
            return Reply(status=404, json={"detail": f"no recorded rollout {key(row)}"})
        if "_ng_failure_class" in found:
            return Reply(status=found["_ng_failure_http_status"], raw=found["_ng_failure_response_body"].encode())
        return Reply(json={k: v for k, v in found.items() if not k.startswith("_ng_") and k != "agent_ref"})

    return replayed


def resume_sends(out: Path, *, config: Mapping[str, Any], mode: str) -> list[Key]:
    """The keys NeMo Gym 0.7.0's collector sends when it resumes the run at ``out``, or ``AssertionError``
    naming what would stop it. Restated from its source, field by field:

    - ``_load_from_cache`` (~2239-2340): every materialized row (``orjson.loads`` per line) by
      ``(_ng_task_index, _ng_rollout_index)``; a key with a row in the output is done; sidecar rows
      lacking either index are skipped; a key whose sidecar rows number ``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS``
      (3) or whose latest row is terminal (``is_terminal_failure``: ``_ng_failure_terminal``, and
      ``skipped`` always) is gated. The rest run again.
    - ``_run_examples_with_metadata`` (~3342-3390): a row stamped ``_ng_environment_server`` is
      dispatched to that name, and ``_agent_name_for_row`` (~3210) looks it up in the config: under
      agent routing that is the collector's local config, which holds no environment server (only
      legacy and taskset modes fetch the head server's, ~2370), so a stamp raises ``ConfigKeyError``.
      An unstamped row goes to the one environment server in front of its ``agent_ref.name``
      (``_environment_server_for_agent``), which must be an agent of the config.
    """
    materialized = read_rows(out.with_name(f"{out.stem}_materialized_inputs.jsonl"))
    done = {key(row) for row in read_rows(out)} if out.exists() else set()
    sidecar = out.with_name(f"{out.stem}_failures.jsonl")
    attempts: dict[Key, int] = {}
    terminal: set[Key] = set()
    for row in read_rows(sidecar) if sidecar.exists() else []:
        if "_ng_task_index" not in row or "_ng_rollout_index" not in row:
            continue
        attempts[key(row)] = attempts.get(key(row), 0) + 1
        if row.get("_ng_failure_terminal") is True or row.get("_ng_failure_class") == "skipped":
            terminal.add(key(row))
    environment_servers = {name for name, entry in config.items() if "environment_servers" in entry}
    agents = {name for name, entry in config.items() if "responses_api_agents" in entry}
    local = agents if mode == "agent" else agents | environment_servers
    sends = []
    for row in materialized:
        stamp = row.get("_ng_environment_server")
        assert stamp is None or stamp in local, f"ConfigKeyError: Missing key {stamp} (row {key(row)})"
        if stamp is None:
            assert row["agent_ref"]["name"] in agents, row
        gated = key(row) in done or key(row) in terminal or attempts.get(key(row), 0) >= MAX_ATTEMPTS
        if not gated:
            sends.append(key(row))
    return sends


def metrics_keys(path: Path) -> dict[str, set[str]]:
    """A metrics file's key sets: an entry's, and those of its sections and of their first element."""
    [entry] = orjson.loads(path.read_bytes())
    found = {"entry": set(entry)}
    for section in ("agent_metrics", "key_metrics"):
        found[section] = set(entry[section])
    for section in ("group_level_metrics", "repeat_level_metrics"):
        found[section] = set(entry[section][0])
    return found
