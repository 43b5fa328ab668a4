"""What every benchmark here shares: the datasets, the agent process, one measured run, the
alternation of variants, and the verdict lines.

Variants run in one invocation, alternating, each in its own subprocess, against one agent
process (``zero_latency_agent.py``), so a ratio compares runs made on the same noisy machine at
the same time. Wall time and peak RSS come from ``os.wait4`` on each child (``ru_maxrss`` is KiB
on Linux), not ``RUSAGE_CHILDREN``, which would mix the children together. Every run must write
exactly the lines it is expected to.
"""

from __future__ import annotations

import os
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


def plain_command(data: Path, url: str, out: Path, parallel: int, repeats: int = 1) -> list[str]:
    """The baseline: ``plain_client.py``, the aiohttp loop anyone would write by hand."""
    command = [sys.executable, str(HERE / "plain_client.py"), str(data), url, str(out), str(parallel)]
    return command + (["--repeats", str(repeats)] if repeats > 1 else [])


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


def alternate(
    base: Path,
    url: str,
    lines: int,
    commands: dict[str, list[str]],
    outs: dict[str, Path],
    envs: dict[str, dict[str, str]],
    repeat: int,
) -> dict[str, list[Measurement]]:
    """``repeat`` rounds of each command in turn, in ``base``; each must write ``lines`` lines to its ``outs``."""
    runs: dict[str, list[Measurement]] = {variant: [] for variant in commands}
    for _ in range(repeat):
        for variant, argv in commands.items():
            result = measure(argv, base, base / f"{variant}.log", envs[variant], url)
            written = count_lines(outs[variant])
            if written != lines:
                raise SystemExit(f"{variant} wrote {written} lines, not {lines}")
            runs[variant].append(result)
    return runs


@dataclass(frozen=True)
class Target:
    what: str
    figure: float
    limit: float
    unit: str = ""

    def line(self) -> str:
        verdict = "met" if self.figure <= self.limit else "NOT MET"
        return f"{self.what:<58} {self.figure:>8.2f}{self.unit:<3} <= {self.limit:g}{self.unit:<3} {verdict}"


def median_pair_ratio(runs: dict[str, list[Measurement]], variant: str, base: str = "plain") -> float:
    """The median over back-to-back pairs of ``variant``'s wall time over ``base``'s."""
    return statistics.median(b.wall_s / a.wall_s for a, b in zip(runs[base], runs[variant], strict=True))
