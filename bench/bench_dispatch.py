"""How much slower is the plugin than a hand-written aiohttp loop, on the same agent?

Both variants run in one invocation, alternating, each in its own subprocess, against
one agent process (``zero_latency_agent.py``), so the ratio compares runs made on the
same noisy machine at the same time. Wall time and peak RSS come from ``os.wait4`` on
each child (``ru_maxrss`` is KiB on Linux), not ``RUSAGE_CHILDREN``, which would mix
the children together. Every run must write exactly one output line per row.

    python bench/bench_dispatch.py --rows 2000,10000 --repeat 3 --latency 0.05
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Measurement:
    """``startup_s``: launch to the agent's first ``/run``; ``span_s``: that to its last reply."""

    wall_s: float
    peak_rss_mb: float
    startup_s: float
    span_s: float


def write_dataset(path: Path, rows: int) -> None:
    with open(path, "wb") as out:
        for i in range(rows):
            row = {
                "responses_create_params": {"input": [{"role": "user", "content": f"question {i}"}]},
                "expected_answer": str(i % 7),
            }
            out.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))


def start_agent(latency: float) -> tuple[subprocess.Popen[bytes], str]:
    """Start the agent and read its ``PORT <n>`` line; the caller must stop it."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "zero_latency_agent.py"), "--latency", str(latency)], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().split()
    if len(line) != 2 or line[0] != "PORT":
        stop(proc)
        raise SystemExit(f"agent did not report its port (got {line!r})")
    return proc, f"http://{HOST}:{line[1]}"


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def timeline(url: str) -> dict[str, float]:
    """The agent's first-request and last-reply times since the previous call (and a reset)."""
    with urllib.request.urlopen(f"{url}/timeline", timeout=10) as reply:
        return orjson.loads(reply.read())


def measure(argv: list[str], cwd: Path, log: Path, env: dict[str, str] | None, url: str) -> Measurement:
    """Run ``argv`` to completion; fail loudly, with its log, unless it exits 0."""
    timeline(url)
    with open(log, "wb") as sink:
        launched, started = time.time(), time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"{argv[1:3]} exited {code}; log {log}:\n{tail}")
    seen = timeline(url)
    return Measurement(wall, usage.ru_maxrss / 1024, seen["first"] - launched, seen["last"] - seen["first"])


def count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def bench_rows(work: Path, url: str, rows: int, parallel: int, repeat: int) -> dict[str, list[Measurement]]:
    """Every measurement of each variant, over ``repeat`` alternating runs (plain, then plugin)."""
    base = work / str(rows)
    base.mkdir()
    data = base / "data.jsonl"
    write_dataset(data, rows)
    outs = {"plain": base / "plain" / "r.jsonl", "plugin": base / "plugin" / "r.jsonl"}
    commands = {
        "plain": [sys.executable, str(HERE / "plain_client.py"), str(data), url, str(outs["plain"]), str(parallel)],
        "plugin": [
            sys.executable,
            "-m",
            "pytest",
            str(data),
            f"--rollouts-agent={url}",
            f"--rollouts-out={outs['plugin']}",
            f"--rollouts-parallel={parallel}",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "pytest_rollouts.plugin",
        ],
    }
    # Only pytest and this plugin: third-party plugins that happen to be installed on the
    # bench machine (hypothesis, pytest-benchmark, ...) are not part of what is measured.
    # Bytecode caching is on for both, as on an ordinary machine (this sandbox sets
    # PYTHONDONTWRITEBYTECODE, which would charge recompiling pytest to every run).
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    envs = {"plain": base_env, "plugin": {**base_env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}
    runs: dict[str, list[Measurement]] = {variant: [] for variant in commands}
    for _ in range(repeat):
        for variant, argv in commands.items():
            result = measure(argv, base, base / f"{variant}.log", envs[variant], url)
            written = count_lines(outs[variant])
            if written != rows:
                raise SystemExit(f"{variant} wrote {written} lines for {rows} rows")
            runs[variant].append(result)
    return runs


def report(rows: int, runs: dict[str, list[Measurement]], parallel: int, latency: float) -> None:
    """Best of each variant, and (with --repeat > 1) the median of the ratios of back-to-back pairs.

    On a shared machine one lucky run of either variant swings the best-of ratio; a pair
    shares its minute of load, so the median pair is the steadier figure.
    """
    best = {variant: min(ms, key=lambda m: m.wall_s) for variant, ms in runs.items()}
    print(f"{'rows':>7}  {'variant':<7}  {'wall_s':>8}  {'peak_rss_MB':>11}  all walls")
    for variant, m in best.items():
        walls = " ".join(f"{r.wall_s:.2f}" for r in runs[variant])
        print(f"{rows:>7}  {variant:<7}  {m.wall_s:>8.3f}  {m.peak_rss_mb:>11.1f}  {walls}")
    ratio = best["plugin"].wall_s / best["plain"].wall_s
    shape = f"rows={rows}, parallel={parallel}, latency={latency:g}"
    print(f"ratio plugin/plain wall = {ratio:.2f}  (best of each; {shape})")
    if len(runs["plain"]) > 1:
        pairs = [b.wall_s / a.wall_s for a, b in zip(runs["plain"], runs["plugin"], strict=True)]
        print(f"ratio plugin/plain wall = {statistics.median(pairs):.2f}  (median of {len(pairs)} back-to-back pairs)")
    for variant, m in best.items():
        print(
            f"{variant}: first /run {m.startup_s:.2f} s after launch, last reply {m.span_s:.2f} s after that, "
            f"exit {m.wall_s - m.startup_s - m.span_s:.2f} s after that (its best run)"
        )
    if latency > 0:
        ideal = rows * latency / parallel
        span = best["plugin"].span_s
        print(f"ideal rows*latency/parallel = {ideal:.3f} s; plugin dispatch span = {span / ideal:.2f} x ideal")
    print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="10000", help="comma-separated row counts")
    parser.add_argument("--parallel", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.0, help="agent seconds per /run")
    parser.add_argument("--repeat", type=int, default=1, help="alternating runs per variant; best wall wins")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (datasets, outputs, logs)")
    args = parser.parse_args()
    row_counts = [int(n) for n in args.rows.split(",")]

    work = Path(tempfile.mkdtemp(prefix="rollouts-bench-"))
    agent, url = start_agent(args.latency)
    try:
        for rows in row_counts:
            report(rows, bench_rows(work, url, rows, args.parallel, args.repeat), args.parallel, args.latency)
    finally:
        stop(agent)
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
