"""Is the built-in model agent the bottleneck? The same rows against a zero-latency model through
a suite's model agent, and against a zero-latency ``/run`` agent, in one invocation.

Both variants are pytest with this plugin, alternating, each in its own subprocess, against one
server process (``zero_latency_agent.py``, which answers ``/run`` and ``/v1/chat/completions``
alike), so the ratio compares runs made on the same noisy machine at the same time. The model
variant does the model agent's whole work per rollout: the request built from the row, the
chat reply converted to a Responses object, the suite's verifier, the token totals.

    python bench/bench_model_agent.py                 # 2000 rows, 64 in flight, 5 pairs
    python bench/bench_model_agent.py --rows 10000 --repeat 3
"""

from __future__ import annotations

import argparse

from harness import (
    Target,
    agent,
    alternate,
    bench_env,
    median_pair_ratio,
    plugin_command,
    scratch,
    write_dataset,
)

RATIO_LIMIT = 1.5

SUITE = """datasets = ["data.jsonl"]
agent = "model"
[agents.model]
model = "{url}/v1"
model_name = "bench"
verifier = "verify.py:score"
"""

VERIFY = """from pytest_rollouts import output_text

def score(row, response):
    return 1.0 if output_text(response) == row["expected_answer"] else 0.0
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000, help="rows of each timed run (default 2000)")
    parser.add_argument("--repeat", type=int, default=5, help="alternating pairs (default 5)")
    parser.add_argument("--parallel", type=int, default=64, help="rollouts in flight (default 64)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (datasets, outputs, logs)")
    args = parser.parse_args()

    with scratch(args.keep) as work, agent(0.0) as url:
        suite = work / "suite"
        suite.mkdir()
        (suite / "rollouts.toml").write_text(SUITE.format(url=url))
        (suite / "verify.py").write_text(VERIFY)
        data = suite / "data.jsonl"
        write_dataset(data, args.rows)
        outs = {"run_agent": work / "run_agent" / "r.jsonl", "model_agent": work / "model_agent" / "r.jsonl"}
        commands = {
            # --rollouts-agent URL replaces the suite's default agent: the same rows go to /run.
            "run_agent": plugin_command(data, outs["run_agent"], args.parallel, f"--rollouts-agent={url}"),
            "model_agent": plugin_command(data, outs["model_agent"], args.parallel),
        }
        env = {**bench_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        runs = alternate(work, url, args.rows, commands, outs, dict.fromkeys(commands, env), args.repeat)
    print(f"{'variant':<12}  {'best_s':>7}  {'peak_rss_MB':>11}  all walls")
    for variant, measured in runs.items():
        walls = " ".join(f"{m.wall_s:.2f}" for m in measured)
        best = min(m.wall_s for m in measured)
        print(f"{variant:<12}  {best:>7.3f}  {max(m.peak_rss_mb for m in measured):>11.1f}  {walls}")
    ratio = median_pair_ratio({"plain": runs["run_agent"], "model": runs["model_agent"]}, "model")
    shape = f"{args.rows} rows, {args.parallel} in flight"
    print("targets (figures from this run):")
    print(
        "  "
        + Target(
            f"{shape}: wall, model agent / /run agent (median of {args.repeat} pairs)", ratio, RATIO_LIMIT, "x"
        ).line()
    )


if __name__ == "__main__":
    main()
