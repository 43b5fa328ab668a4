"""Against a real NeMo Gym 0.7.0 stack: both collectors on the same 200 rows x 2, each resuming the other.

    python -m pytest tests/interop -m nemo_gym -p no:randomly -v     # about 3 minutes

Runs only when asked for (``-m nemo_gym``) and when the stack of ../shared/nemo_gym is installed (its
README: ``install.sh`` once); otherwise skipped, saying which. The stack is started here and stopped at
the end (it listens on 127.0.0.1 ports 18780-18790, so one such session at a time). The fake model's
answers are seeded by the rollout index, so both collectors see the same reward for each rollout.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from .nemo_gym import AGENT, ENVIRONMENT_SERVER, artifacts, key, rewards

pytestmark = pytest.mark.nemo_gym

ROWS, REPEATS = 200, 2
SCRIPTS = Path(os.environ.get("NG_SCRIPTS", Path(__file__).parents[3] / "shared" / "nemo_gym"))
NG_HOME = Path(os.environ.get("NG_HOME", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ngreal"))
MODES = {
    "agent": ((), ()),
    "legacy": (
        ("--rollouts-environment-routing-mode=legacy", f"--rollouts-environment-server={ENVIRONMENT_SERVER}"),
        ("+environment_routing_mode=legacy", f"+environment_server_name={ENVIRONMENT_SERVER}"),
    ),
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The running stack's KEY=VALUE lines and the data file, once for the module."""
    if not (SCRIPTS / "start_stack.sh").exists():
        pytest.skip(f"no NeMo Gym stack scripts at {SCRIPTS} (set NG_SCRIPTS)")
    if not (NG_HOME / "venv" / "bin" / "gym").exists():
        pytest.skip(f"NeMo Gym 0.7.0 is not installed in {NG_HOME}/venv: run {SCRIPTS}/install.sh")
    started = subprocess.run([str(SCRIPTS / "start_stack.sh")], capture_output=True, text=True, timeout=300, env=_env())
    assert started.returncode == 0, started.stderr[-2000:]
    found = dict(line.split("=", 1) for line in started.stdout.splitlines() if "=" in line)
    data = tmp_path_factory.mktemp("data") / "arith.jsonl"
    subprocess.run([sys.executable, str(SCRIPTS / "make_arith.py"), str(ROWS), str(data)], check=True, timeout=60)
    try:
        yield {**found, "DATA": str(data)}
    finally:
        subprocess.run([str(SCRIPTS / "stop_stack.sh")], capture_output=True, timeout=120, env=_env())


def _env() -> dict[str, str]:
    return {**os.environ, "NG_HOME": str(NG_HOME)}


def _gym(stack: dict[str, str], out: Path, *extra: str) -> subprocess.Popen[str]:
    """NeMo Gym's own collector (``gym eval run`` through ``collect_with_gym.sh``) writing ``out``."""
    command = [str(SCRIPTS / "collect_with_gym.sh"), stack["DATA"], str(out), str(REPEATS)]
    command += ["+route_failures_to_sidecar=true", *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def _ours(stack: dict[str, str], out: Path, *extra: str) -> subprocess.Popen[str]:
    """Our collector, the pytest path, on the same data, head server and repeats as ``_gym``."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", stack["DATA"]]
    command += [f"--rollouts-head-server={stack['HEAD_URL']}", f"--rollouts-agent-map=_default={AGENT}"]
    command += [f"--rollouts-out={out}", f"--rollouts-repeats={REPEATS}", "--rollouts-repeats-add-seed", *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=out.parent)


def _finished(process: subprocess.Popen[str]) -> str:
    """A collector's output once it ended, which must be in success."""
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, (stdout[-3000:], stderr[-3000:])
    return stdout


def _stopped_part_way(process: subprocess.Popen[str], out: Path, rows: int) -> None:
    """Stop a collector as a job scheduler would (SIGTERM) once ``rows`` rollouts are written."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= rows:
            break
        time.sleep(0.02)
    assert process.poll() is None, "the collector finished before it could be stopped part way"
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=120)
    written = out.read_bytes().count(b"\n")
    assert rows <= written < ROWS * REPEATS, written


@pytest.fixture(scope="module")
def complete(stack: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """NeMo Gym's own complete run in each mode: the reference every other run ends equal to."""
    runs = {}
    for mode, (_, gym_args) in MODES.items():
        out = tmp_path_factory.mktemp(f"gym-{mode}") / "rollouts.jsonl"
        _finished(_gym(stack, out, *gym_args))
        runs[mode] = out
    return runs


def _written(out: Path) -> set[tuple[int, int]]:
    """The keys of the whole lines of a collector's output (one stopped part way may end in a cut one)."""
    lines = out.read_bytes().split(b"\n")[:-1]
    return {key(orjson.loads(line)) for line in lines if line.strip()}


def _ran(process_output: str) -> int:
    """How many rollouts our run sent, from its summary."""
    found = re.search(r"^(\d+) rollouts? ran in", process_output, re.MULTILINE)
    assert found is not None, process_output[-2000:]
    return int(found.group(1))


def _same_run(ours: Path, theirs: Path) -> None:
    mine, reference = artifacts(ours.parent), artifacts(theirs.parent)
    assert len(mine[""]) == len(reference[""]) == ROWS * REPEATS
    assert rewards(mine[""]) == rewards(reference[""])
    assert sorted(map(key, mine[""])) == sorted(map(key, reference[""]))


@pytest.mark.parametrize("mode", MODES)
def test_our_run_equals_nemo_gyms(stack, complete, tmp_path: Path, mode: str) -> None:
    out = tmp_path / "rollouts.jsonl"
    _finished(_ours(stack, out, *MODES[mode][0]))
    _same_run(out, complete[mode])
    assert artifacts(tmp_path)["_materialized_inputs"] == artifacts(complete[mode].parent)["_materialized_inputs"]
    # NeMo Gym's own metrics, asked of its server (its "perf_summary": null was once refused as odd).
    [entry] = orjson.loads((tmp_path / "rollouts_aggregate_metrics.json").read_bytes())
    assert entry["metrics_source"] == "server", entry.get("metrics_note")


@pytest.mark.parametrize("mode", MODES)
def test_nemo_gym_resumes_our_partial_run(stack, complete, tmp_path: Path, mode: str) -> None:
    ours_args, gym_args = MODES[mode]
    out = tmp_path / "rollouts.jsonl"
    _stopped_part_way(_ours(stack, out, "--rollouts-parallel=1", *ours_args), out, 100)
    written = _written(out)
    resumed = _finished(_gym(stack, out, *gym_args, "+resume_from_cache=true"))
    log = Path(re.findall(r"^LOG=(.*)$", resumed, re.MULTILINE)[-1])
    sent = re.search(r"(\d+) rows that still need to be run", log.read_text())
    assert sent is not None and int(sent.group(1)) == ROWS * REPEATS - len(written)
    _same_run(out, complete[mode])


@pytest.mark.parametrize("mode", MODES)
def test_we_resume_nemo_gyms_partial_run(stack, complete, tmp_path: Path, mode: str) -> None:
    ours_args, gym_args = MODES[mode]
    out = tmp_path / "rollouts.jsonl"
    _stopped_part_way(_gym(stack, out, *gym_args, "--concurrency", "1"), out, 100)
    written = _written(out)
    resumed = _finished(_ours(stack, out, "--rollouts-resume", *ours_args))
    assert _ran(resumed) == ROWS * REPEATS - len(written)
    _same_run(out, complete[mode])


def test_nemo_gyms_aggregate_reads_ours(stack, tmp_path: Path) -> None:
    out = tmp_path / "ours" / "rollouts.jsonl"
    out.parent.mkdir()
    _finished(_ours(stack, out))
    merged = tmp_path / "merged" / "rollouts.jsonl"
    merged.parent.mkdir()
    head = ["+head_server.host=127.0.0.1", f"+head_server.port={stack['HEAD_PORT']}"]
    done = subprocess.run(
        [str(NG_HOME / "venv" / "bin" / "gym"), "eval", "aggregate", "-i", str(out), "-o", str(merged), *head],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=NG_HOME / "run",
        env=_env(),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(artifacts(merged.parent)[""]) == ROWS * REPEATS
    assert (merged.parent / "rollouts_aggregate_metrics.json").exists()
