"""How much slower is ``run_examples`` than a hand-written aiohttp loop, and how much memory does it hold?

The method is ``bench_dispatch.py``'s, with its helpers: both variants run alternating in one
invocation, each in its own subprocess, against one ``zero_latency_agent.py``, so the ratio
compares runs made on the same noisy machine at the same time; wall time and peak RSS come from
``os.wait4`` on each child. The API variant is ``api_client.py`` (rows streamed from the dataset
through ``run_examples``, in the process's own asyncio loop), the baseline ``plain_client.py``.
Every run must write exactly one output line per row.

    python bench/bench_api.py
    python bench/bench_api.py --rows 2000 --repeat 3 --rss-rows 0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import (
    HERE,
    Measurement,
    Target,
    agent,
    alternate,
    bench_env,
    median_pair_ratio,
    plain_command,
    scratch,
    write_dataset,
)

RATIO_LIMIT = 1.0  # issue 31: run_examples no slower than the plain loop
RSS_LIMIT_MB = 150.0


def api_command(data: Path, url: str, out: Path, parallel: int, max_resident: int) -> list[str]:
    return [sys.executable, str(HERE / "api_client.py"), str(data), url, str(out), str(parallel), str(max_resident)]


def bench(
    work: Path, url: str, rows: int, parallel: int, max_resident: int, repeat: int, plain: bool = True
) -> dict[str, list[Measurement]]:
    """Every measurement of each variant (the API alone unless ``plain``), over ``repeat`` rounds."""
    base = work / f"{rows}-{'pairs' if plain else 'api'}"
    base.mkdir()
    data = base / "data.jsonl"
    write_dataset(data, rows)
    outs = {"plain": base / "plain" / "r.jsonl", "api": base / "api" / "r.jsonl"}
    commands = {"api": api_command(data, url, outs["api"], parallel, max_resident)}
    if plain:
        commands = {"plain": plain_command(data, url, outs["plain"], parallel), **commands}
    return alternate(base, url, rows, commands, outs, dict.fromkeys(commands, bench_env()), repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="rows of each timed run (default 10000)")
    parser.add_argument("--repeat", type=int, default=5, help="alternating pairs (default 5)")
    parser.add_argument("--parallel", type=int, default=64, help="requests in flight (default 64)")
    parser.add_argument("--max-resident", type=int, default=1024, help="run_examples' max_resident (default 1024)")
    parser.add_argument("--rss-rows", type=int, default=100_000, help="rows of the peak-RSS run (0: none)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (datasets, outputs, logs)")
    args = parser.parse_args()

    with scratch(args.keep) as work:
        with agent(0.0) as url:
            runs = bench(work, url, args.rows, args.parallel, args.max_resident, args.repeat)
            rss = None
            if args.rss_rows:
                [rss] = bench(work, url, args.rss_rows, args.parallel, args.max_resident, 1, plain=False)["api"]
        print(f"{'variant':<7}  {'best_s':>7}  {'peak_rss_MB':>11}  all walls")
        for variant, measured in runs.items():
            best = min(m.wall_s for m in measured)
            walls = " ".join(f"{m.wall_s:.2f}" for m in measured)
            print(f"{variant:<7}  {best:>7.3f}  {max(m.peak_rss_mb for m in measured):>11.1f}  {walls}")
        shape = f"{args.rows} rows, parallel {args.parallel}, max_resident {args.max_resident}"
        targets = [
            Target(
                f"{shape}: wall, api / plain (median of {args.repeat} pairs)",
                median_pair_ratio(runs, "api"),
                RATIO_LIMIT,
                "x",
            )
        ]
        if rss is not None:
            what = f"{args.rss_rows} rows, max_resident {args.max_resident}: api peak RSS ({rss.wall_s:.1f} s)"
            targets.append(Target(what, rss.peak_rss_mb, RSS_LIMIT_MB, "MB"))
        print("targets (figures from this run):")
        for target in targets:
            print("  " + target.line())


if __name__ == "__main__":
    main()
