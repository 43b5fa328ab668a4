"""How much slower is the plugin than a hand-written aiohttp loop, on the same agent?

Both variants run in one invocation, alternating, each in its own subprocess, against
one agent process (``zero_latency_agent.py``), so the ratio compares runs made on the
same noisy machine at the same time. Wall time and peak RSS come from ``os.wait4`` on
each child (``ru_maxrss`` is KiB on Linux), not ``RUSAGE_CHILDREN``, which would mix
the children together. Every run must write exactly one output line per row.

Without ``--rows`` it measures every speed target of the issue in one run (about five
minutes) and ends with a table of figure, limit and verdict:

    python bench/bench_dispatch.py
    python bench/bench_dispatch.py --rows 2000,10000 --repeat 3 --latency 0.05
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def agent(latency: float) -> Iterator[str]:
    """The agent in its own process, while the block runs; yields its base URL."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "zero_latency_agent.py"), "--latency", str(latency)], stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "PORT":
            raise SystemExit(f"agent did not report its port (got {line!r})")
        yield f"http://{HOST}:{line[1]}"
    finally:
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


@contextmanager
def scratch(keep: bool) -> Iterator[Path]:
    """A temp dir for datasets, outputs and logs, removed after unless ``keep``."""
    work = Path(tempfile.mkdtemp(prefix="rollouts-bench-"))
    try:
        yield work
    finally:
        if keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def bench_env() -> dict[str, str]:
    """This environment for a measured run, bytecode caching on, as on an ordinary machine (this
    sandbox sets PYTHONDONTWRITEBYTECODE, which would charge recompiling pytest to every run)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def plain_command(data: Path, url: str, out: Path, parallel: int) -> list[str]:
    """The baseline: ``plain_client.py``, the aiohttp loop anyone would write by hand."""
    return [sys.executable, str(HERE / "plain_client.py"), str(data), url, str(out), str(parallel)]


def plugin_command(data: Path, out: Path, parallel: int, *extra: str) -> list[str]:
    """pytest with this plugin loaded by name: the environment disables every other plugin's autoload."""
    return [
        sys.executable,
        "-m",
        "pytest",
        str(data),
        f"--rollouts-out={out}",
        f"--rollouts-parallel={parallel}",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "pytest_rollouts.plugin",
        *extra,
    ]


def bench_rows(work: Path, url: str, rows: int, parallel: int, repeat: int) -> dict[str, list[Measurement]]:
    """Every measurement of each variant, over ``repeat`` alternating runs (plain, then plugin)."""
    base = work / str(rows)
    base.mkdir()
    data = base / "data.jsonl"
    write_dataset(data, rows)
    outs = {"plain": base / "plain" / "r.jsonl", "plugin": base / "plugin" / "r.jsonl"}
    commands = {
        "plain": plain_command(data, url, outs["plain"], parallel),
        "plugin": plugin_command(data, outs["plugin"], parallel, f"--rollouts-agent={url}"),
    }
    # Only pytest and this plugin: third-party plugins that happen to be installed on the
    # bench machine (hypothesis, pytest-benchmark, ...) are not part of what is measured.
    base_env = bench_env()
    envs = {"plain": base_env, "plugin": {**base_env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}
    return alternate(base, url, rows, commands, outs, envs, repeat)


def alternate(
    base: Path,
    url: str,
    rows: int,
    commands: dict[str, list[str]],
    outs: dict[str, Path],
    envs: dict[str, dict[str, str]],
    repeat: int,
) -> dict[str, list[Measurement]]:
    """``repeat`` rounds of each command in turn, in ``base``; each must write ``rows`` lines to its ``outs``."""
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
        pairs = len(runs["plain"])
        print(f"ratio plugin/plain wall = {median_pair_ratio(runs):.2f}  (median of {pairs} back-to-back pairs)")
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


@dataclass(frozen=True)
class Target:
    what: str
    figure: float
    limit: float
    unit: str = ""

    def line(self) -> str:
        verdict = "met" if self.figure <= self.limit else "NOT MET"
        return f"{self.what:<58} {self.figure:>8.2f}{self.unit:<3} <= {self.limit:g}{self.unit:<3} {verdict}"


def median_pair_ratio(runs: dict[str, list[Measurement]], variant: str = "plugin") -> float:
    """The median over back-to-back pairs of ``variant``'s wall time over the plain loop's."""
    return statistics.median(b.wall_s / a.wall_s for a, b in zip(runs["plain"], runs[variant], strict=True))


def plugin_import_ms(work: Path) -> float:
    """What importing the plugin costs a pytest session that collects no dataset (``-X importtime``):
    the cumulative time of each import of one of its modules not made by another of them."""
    empty = work / "empty"
    empty.mkdir()
    env = bench_env()
    argv = [sys.executable, "-X", "importtime", "-m", "pytest", "-q", "-p", "pytest_rollouts.plugin", str(empty)]
    result = subprocess.run(argv, cwd=empty, env={**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, capture_output=True)
    total_us, seen, ancestors = 0, False, []  # the import chain of the line at hand, outermost first
    # Children are printed before their parent, so read the lines bottom up.
    for line in reversed(result.stderr.decode().splitlines()):
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        if match is None:
            continue
        cumulative, depth, name = int(match[1]), len(match[2]) // 2, match[3]
        del ancestors[depth:]
        if name.startswith("pytest_rollouts") and not any(a.startswith("pytest_rollouts") for a in ancestors):
            total_us, seen = total_us + cumulative, True
        ancestors.append(name)
    if not seen:
        raise SystemExit(f"the plugin was not imported by {argv}:\n{result.stderr.decode()[-2000:]}")
    return total_us / 1000


def measure_targets(work: Path) -> list[Target]:
    """Each target as the issue words it, measured here and now against its baseline."""
    with agent(0.0) as url:
        single = bench_rows(work, url, 1, 64, 5)
        report(1, single, 64, 0.0)
        ten_k = bench_rows(work, url, 10_000, 64, 5)
        report(10_000, ten_k, 64, 0.0)
        hundred_k = bench_rows(work, url, 100_000, 64, 2)
        report(100_000, hundred_k, 64, 0.0)
    with agent(0.05) as url:
        slow = bench_rows(work, url, 2000, 64, 3)
        report(2000, slow, 64, 0.05)
    ideal = 2000 * 0.05 / 64
    fastest = min(slow["plugin"], key=lambda m: m.wall_s)
    overhead = statistics.median(
        b.startup_s - a.startup_s for a, b in zip(single["plain"], single["plugin"], strict=True)
    )
    return [
        Target("10k rows: wall, plugin / plain (median of 5 pairs)", median_pair_ratio(ten_k), 1.5, "x"),
        Target("100k rows: wall, plugin / plain (mean of 2 pairs)", median_pair_ratio(hundred_k), 1.6, "x"),
        Target("100k rows: plugin peak RSS (largest)", max(m.peak_rss_mb for m in hundred_k["plugin"]), 500, "MB"),
        Target(
            "2000 rows at 50 ms: wall after the first /run / ideal",
            (fastest.wall_s - fastest.startup_s) / ideal,
            1.3,
            "x",
        ),
        Target("1 row: launch to first /run, plugin minus plain (median)", overhead, 0.5, "s"),
        Target("importing the plugin in a session without datasets", plugin_import_ms(work), 20, "ms"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", help="comma-separated row counts (default: every target of the issue)")
    parser.add_argument("--parallel", type=int, help="requests in flight (default 64; with --rows)")
    parser.add_argument("--latency", type=float, help="agent seconds per /run (default 0; with --rows)")
    parser.add_argument("--repeat", type=int, help="alternating runs per variant (default 1; with --rows)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (datasets, outputs, logs)")
    args = parser.parse_args()
    if args.rows is None and (args.parallel, args.latency, args.repeat) != (None, None, None):
        parser.error("--parallel, --latency and --repeat shape a --rows run; the targets run fixes its own")

    with scratch(args.keep) as work:
        if args.rows is None:
            targets = measure_targets(work)
            print("targets (2-core machine; figures from this run):")
            for target in targets:
                print("  " + target.line())
        else:
            parallel, latency, repeat = args.parallel or 64, args.latency or 0.0, args.repeat or 1
            with agent(latency) as url:
                for rows in (int(n) for n in args.rows.split(",")):
                    report(rows, bench_rows(work, url, rows, parallel, repeat), parallel, latency)


if __name__ == "__main__":
    main()
