"""Peak memory and time of scoring a large run from its artifacts (issue: bounded-memory aggregation).

Writes a synthetic run of N tasks x R repeats (materialized inputs, outputs with NeMo Gym-sized
``response`` objects, a failures sidecar) and scores it with ``score_run`` in a child process,
next to a baseline child that only reads the output file once (the least any scorer must do).

    python bench/bench_aggregate.py --tasks 100000 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

SCORE = """
import sys
from pathlib import Path
from pytest_rollouts.scoring.accounting import ScoringPolicy
from pytest_rollouts.scoring.aggregate import score_run
from pytest_rollouts.store.artifacts import ArtifactPaths
score = score_run(ArtifactPaths(Path(sys.argv[1])), ScoringPolicy(), agent_url=lambda name: None,
                  write_metrics=True, timeout=60)
print(score.coverage.as_dict(), score.mean_reward)
"""

READ_ONLY = """
import sys, orjson
total = 0
with open(sys.argv[1], "rb") as handle:
    for line in handle:
        total += orjson.loads(line)["reward"]
print(total)
"""


def write_run(out: Path, tasks: int, repeats: int) -> None:
    stem = out.with_suffix("")
    filler = "x" * 1500  # a response body of realistic size
    with (
        open(f"{stem}_materialized_inputs.jsonl", "wb") as mat,
        open(out, "wb") as rows,
        open(f"{stem}_failures.jsonl", "wb") as failures,
    ):
        for task in range(tasks):
            for rollout in range(repeats):
                stamps = {"agent_ref": {"name": "bench"}, "_ng_task_index": task, "_ng_rollout_index": rollout}
                mat.write(orjson.dumps({"responses_create_params": {"input": f"q{task}"}, **stamps}) + b"\n")
                if (task + rollout) % 50 == 0:
                    failures.write(orjson.dumps({**stamps, "_ng_failure_class": "agent_run_error"}) + b"\n")
                    continue
                usage = {"input_tokens": 20, "output_tokens": task % 97, "total_tokens": 20 + task % 97}
                reply = {"response": {"output": filler, "usage": usage}, "reward": float(task % 3 == 0)}
                rows.write(orjson.dumps({**reply, **stamps, "elapsed_seconds": 0.1}) + b"\n")


def measure(code: str, arg: Path) -> tuple[float, float]:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, str(arg)], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"child failed: {code[:40]!r}")
    return time.perf_counter() - started, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rollouts-aggregate-"))
    try:
        out = work / "r.jsonl"
        write_run(out, args.tasks, args.repeats)
        size = out.stat().st_size / 2**20
        for name, code in (("read once", READ_ONLY), ("score_run", SCORE)):
            wall, rss = measure(code, out)
            print(f"{name:<10} wall {wall:6.2f} s  peak RSS {rss:7.1f} MB  (output {size:.0f} MB)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
