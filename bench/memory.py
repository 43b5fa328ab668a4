"""Memory per row on the pytest path, two ways: from the peak RSS of the timed runs (``ru_maxrss``,
the larger of pytest's and its dispatcher's), and from ``tracemalloc``'s peak in the pytest process
(one more run of each size, untimed: tracing slows it). Each is the difference between a run of
``rows`` rows and a run of one row, divided by the rows between them, so what every run holds
(the interpreter, pytest, the imports) cancels out."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from against import Tree
from harness import HERE, Measurement, bench_env, measure, plugin_command, write_dataset


@dataclass(frozen=True)
class Memory:
    """Bytes per row of one tree (``head`` or the ``--against`` commit)."""

    tree: str
    rows: int
    rss_per_row: float
    traced_per_row: float

    def line(self) -> str:
        return (
            f"memory per row, {self.tree}, pytest path at {self.rows} rows: {self.rss_per_row:,.0f} B from peak RSS, "
            f"{self.traced_per_row:,.0f} B from tracemalloc (pytest's process)"
        )


def measure_memory(
    work: Path,
    url: str,
    single: dict[str, list[Measurement]],
    many: dict[str, list[Measurement]],
    rows: int,
    ref: Tree | None,
) -> list[Memory]:
    """Per-row memory of each tree the ``single`` (one row) and ``many`` (``rows`` rows) cases ran."""
    trees = {"head": None, "ref": ref} if ref is not None and "ref" in many else {"head": None}
    found = []
    for variant, tree in trees.items():
        rss = statistics.median(m.peak_rss_mb for m in many[variant]) - statistics.median(
            m.peak_rss_mb for m in single[variant]
        )
        traced = _traced(work, url, rows, variant, tree) - _traced(work, url, 1, variant, tree)
        found.append(Memory(tree.name if tree else "head", rows, rss * 2**20 / (rows - 1), traced / (rows - 1)))
    return found


def _traced(work: Path, url: str, rows: int, variant: str, tree: Tree | None) -> int:
    """tracemalloc's peak in the pytest process of one run of ``rows`` rows."""
    base = work / f"traced-{variant}-{rows}"
    base.mkdir()
    data, out, peak = base / "data.jsonl", base / "out" / "r.jsonl", base / "peak"
    write_dataset(data, rows)
    env = {**bench_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "BENCH_TRACEMALLOC_OUT": str(peak)}
    env = tree.env(env) if tree is not None else env
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (env.get("PYTHONPATH"), str(HERE))))
    argv = plugin_command(data, out, 64, f"--rollouts-agent={url}", "-p", "memory_probe")
    argv[1:1] = ["-X", "tracemalloc"]
    measure(argv, base, base / "log", env, url)
    return int(peak.read_text())
