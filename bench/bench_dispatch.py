"""How much slower is the plugin than a hand-written aiohttp loop, and than an earlier commit?

Every case runs its variants in one invocation, alternating (plain loop, this checkout, and with
``--against REF`` the same case through REF's tree), each in its own subprocess against one
agent process, so each ratio compares runs made on the same noisy machine at the same time
(``harness.py``). A case's ratios are medians over back-to-back pairs. The cases are the
pytest path, ``run_examples`` and ``run_from_config``; a REF older than the Python API runs the
pytest cases only.

Without ``--rows`` it measures every limit (docs/performance.md) and ends with a table of figure,
limit and verdict; ``--only`` picks some of the cases by name:

    python bench/bench_dispatch.py --against 4bfe5e7
    python bench/bench_dispatch.py --against 4bfe5e7 --only 10k,100k --pairs 3
    python bench/bench_dispatch.py --rows 2000,10000 --pairs 3 --latency 0.05
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from against import Tree, export_tree
from harness import (
    HERE,
    Measurement,
    Target,
    agent,
    alternate,
    bench_env,
    median_pair_ratio,
    plain_command,
    plugin_command,
    scratch,
    write_dataset,
)
from memory import Memory, measure_memory

PARALLEL = 64
# What the Python API cases need of a tree (a REF older than the API has neither); the pytest path runs in every tree.
API_NEEDS = {"examples": "run_examples", "config": "run_from_config"}


@dataclass(frozen=True)
class Case:
    """One shape of run: ``rows`` rows of ``repeats`` rollouts each, through one front door."""

    name: str
    rows: int
    repeats: int = 1
    front: str = "pytest"
    latency: float = 0.0
    pairs: int = 5
    # More options of this checkout's run (an older tree may not know them: compared with plain only).
    options: tuple[str, ...] = ()

    @property
    def lines(self) -> int:
        return self.rows * self.repeats


CASES = (
    Case("1", 1),
    Case("10k", 10_000),
    Case("10k-auto", 10_000, options=("--rollouts-parallel=auto:64",)),
    Case("100k", 100_000),
    Case("6250x16", 6_250, repeats=16),
    Case("2000@50ms", 2_000, latency=0.05, pairs=3),
    Case("api-10k", 10_000, front="examples"),
    Case("config-62500x16", 62_500, repeats=16, front="config"),
)


def front_command(case: Case, data: Path, url: str, out: Path) -> list[str]:
    """The command that runs ``case`` through its front door, in whichever tree ``PYTHONPATH`` puts first."""
    if case.front == "pytest":
        repeats = [f"--rollouts-repeats={case.repeats}"] if case.repeats > 1 else []
        return plugin_command(data, out, PARALLEL, f"--rollouts-agent={url}", *repeats, *case.options)
    client = {"examples": ["api_client.py"], "config": ["config_client.py", "--repeats", str(case.repeats)]}
    script, *extra = client[case.front]
    tail = ["1024"] if case.front == "examples" else []  # api_client's max_resident
    return [sys.executable, str(HERE / script), str(data), url, str(out), str(PARALLEL), *tail, *extra]


def run_case(work: Path, url: str, case: Case, pairs: int, ref: Tree | None) -> dict[str, list[Measurement]]:
    """Every measurement of each variant of ``case``, over ``pairs`` alternating rounds."""
    base = work / case.name
    base.mkdir()
    data = base / "data.jsonl"
    write_dataset(data, case.rows)
    variants = ["plain", "head"] + (["ref"] if ref is not None else [])
    outs = {variant: base / variant / "r.jsonl" for variant in variants}
    commands = {"plain": plain_command(data, url, outs["plain"], PARALLEL, case.repeats)}
    # Only pytest and this plugin: third-party plugins installed on the bench machine are not measured.
    env = {**bench_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    envs = {"plain": bench_env(), "head": env}
    for variant in variants[1:]:
        commands[variant] = front_command(case, data, url, outs[variant])
    if ref is not None:
        envs["ref"] = ref.env(env)
    return alternate(base, url, case.lines, commands, outs, envs, pairs)


@dataclass(frozen=True)
class Result:
    case: Case
    runs: dict[str, list[Measurement]]

    def ratio(self, variant: str = "head", base: str = "plain") -> float:
        return median_pair_ratio(self.runs, variant, base)

    def peak_mb(self, variant: str = "head") -> float:
        return max(m.peak_rss_mb for m in self.runs[variant])


def show(result: Result, ref: Tree | None) -> None:
    """Each variant's median wall and largest peak RSS, and the ratios of the case's pairs."""
    case = result.case
    print(f"case {case.name}: {case.rows} rows x {case.repeats} through {case.front}, latency {case.latency:g}")
    for variant, measured in result.runs.items():
        name = f"ref {ref.name}" if variant == "ref" and ref is not None else variant
        walls = " ".join(f"{m.wall_s:.2f}" for m in measured)
        wall = statistics.median(m.wall_s for m in measured)
        print(f"  {name:<12} median {wall:8.2f} s  peak {result.peak_mb(variant):7.1f} MB  walls {walls}")
    line = f"  head / plain {result.ratio():.3f}"
    if "ref" in result.runs:
        line += f"   head / ref {result.ratio('head', 'ref'):.3f}   ref / plain {result.ratio('ref'):.3f}"
    print(line + f"   (medians of {len(result.runs['plain'])} pairs)", flush=True)


def plugin_import_ms(work: Path) -> float:
    """What importing the plugin costs a pytest session that collects no dataset (``-X importtime``):
    the cumulative time of each import of one of its modules not made by another of them."""
    empty = work / "empty"
    empty.mkdir()
    argv = [sys.executable, "-X", "importtime", "-m", "pytest", "-q", "-p", "pytest_rollouts.plugin", str(empty)]
    env = {**bench_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    result = subprocess.run(argv, cwd=empty, env=env, capture_output=True)
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


def targets(results: dict[str, Result], work: Path) -> list[Target]:
    """Each limit whose case ran, measured here and now against its baseline (docs/performance.md)."""
    found: list[Target] = []

    def ratio(case: str, what: str, limit: float) -> None:
        if case in results:
            pairs = len(results[case].runs["plain"])
            found.append(Target(f"{what}: head / plain (median of {pairs} pairs)", results[case].ratio(), limit, "x"))

    ratio("10k", "pytest, 10k rows", 1.2)
    ratio("10k-auto", "pytest, 10k rows, --rollouts-parallel=auto:64 (adaptive)", 1.2)
    ratio("100k", "pytest, 100k rows", 1.1)
    if "100k" in results:
        found.append(Target("pytest, 100k rows: peak RSS (largest run)", results["100k"].peak_mb(), 300, "MB"))
    ratio("6250x16", "pytest, 6,250 rows x 16", 0.9)
    ratio("api-10k", "run_examples, 10k rows", 1.0)
    ratio("config-62500x16", "run_from_config, 62,500 rows x 16", 1.0)
    if "config-62500x16" in results:
        found.append(Target("run_from_config, 1M rollouts: peak RSS", results["config-62500x16"].peak_mb(), 300, "MB"))
    if "1" in results:
        pairs = zip(results["1"].runs["plain"], results["1"].runs["head"], strict=True)
        overhead = statistics.median(b.startup_s - a.startup_s for a, b in pairs)
        found.append(Target("pytest, 1 row: launch to first /run, head minus plain", overhead, 0.5, "s"))
    if "2000@50ms" in results:
        fastest = min(results["2000@50ms"].runs["head"], key=lambda m: m.wall_s)
        ideal = 2000 * 0.05 / PARALLEL
        after_first = (fastest.wall_s - fastest.startup_s) / ideal
        found.append(Target("pytest, 2000 rows at 50 ms: wall after the first /run / ideal", after_first, 1.3, "x"))
    found.append(Target("importing the plugin in a session without datasets", plugin_import_ms(work), 20, "ms"))
    for name, result in results.items():
        if "ref" in result.runs:
            found.append(Target(f"{name}: head / ref (median of pairs)", result.ratio("head", "ref"), 1.05, "x"))
    return found


def chosen_cases(args: argparse.Namespace) -> list[Case]:
    """``--rows`` shapes ad-hoc pytest cases; otherwise every case, or those ``--only`` names."""
    if args.rows:
        return [
            Case(f"{n}x{args.repeats}" if args.repeats > 1 else str(n), int(n), args.repeats, latency=args.latency)
            for n in args.rows.split(",")
        ]
    names = args.only.split(",") if args.only else [case.name for case in CASES]
    unknown = set(names) - {case.name for case in CASES}
    if unknown:
        raise SystemExit(f"--only: no case {', '.join(sorted(unknown))} (cases: {', '.join(c.name for c in CASES)})")
    return [case for case in CASES if case.name in names]


def _ref_for(case: Case, ref: Tree | None) -> Tree | None:
    """``ref``, unless it lacks what ``case`` runs through (then the case is compared with plain only)."""
    needs = API_NEEDS.get(case.front)
    if ref is not None and case.options:
        print(f"case {case.name}: {ref.name} may not know {' '.join(case.options)}; compared with the plain loop only")
        return None
    if ref is None or needs is None or ref.offers(needs):
        return ref
    print(f"case {case.name}: {ref.name} has no {needs}; compared with the plain loop only")
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="REF", help="also run every case through this commit's tree")
    parser.add_argument("--pairs", type=int, help="alternating rounds per case (default: 5, 3 for the 50 ms case)")
    parser.add_argument("--only", help="comma-separated case names: " + ", ".join(c.name for c in CASES))
    parser.add_argument("--rows", help="comma-separated row counts of ad-hoc pytest cases (no limits checked)")
    parser.add_argument("--repeats", type=int, default=1, help="rollouts per row (with --rows)")
    parser.add_argument("--latency", type=float, default=0.0, help="agent seconds per /run (with --rows)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (datasets, outputs, logs)")
    args = parser.parse_args()
    cases = chosen_cases(args)
    with scratch(args.keep) as work:
        ref = export_tree(args.against, work) if args.against else None
        results: dict[str, Result] = {}
        for latency in sorted({case.latency for case in cases}):
            with agent(latency) as url:
                for case in (c for c in cases if c.latency == latency):
                    result = Result(case, run_case(work, url, case, args.pairs or case.pairs, _ref_for(case, ref)))
                    show(result, ref)
                    results[case.name] = result
        memory: list[Memory] = []
        if "1" in results and "100k" in results:
            with agent(0.0) as url:
                memory = measure_memory(work, url, results["1"].runs, results["100k"].runs, 100_000, ref)
        for line in memory:
            print(line.line())
        if not args.rows:
            print("limits (2-core machine; figures from this run):")
            for target in targets(results, work):
                print("  " + target.line())


if __name__ == "__main__":
    main()
