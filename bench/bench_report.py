"""Size and build time of a large run's HTML report (issue 21: usable at 100k rollouts).

Writes a synthetic run of N tasks x R repeats shaped like the shipped tool_use suite's (a prompt,
a tool call and its output, a final message, verifier fields; every 10th reply carries a long
reasoning text the report cuts, every 50th rollout fails) and scores it once, so its metrics file
is there as after a run. Then, in this process, it times two things on the same files:

- the baseline: parsing every line of the three JSONL files and the metrics file with orjson,
  the least any reader of the run must do;
- ``build_report``: gathering, aggregating and rendering the page.

    python bench/bench_report.py --tasks 100000 --repeats 1

It prints the page's size (and per rollout), both times and their ratio. ``--keep DIR`` leaves the
run and its report there, to open in a browser.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import orjson

from pytest_rollouts.report import build_report
from pytest_rollouts.scoring.accounting import ScoringPolicy
from pytest_rollouts.scoring.aggregate import score_run
from pytest_rollouts.store.artifacts import ArtifactPaths

REASONING = "Let me think about this step by step. " * 120  # ~4.6k characters, over the report's cap


def write_run(out: Path, tasks: int, repeats: int) -> None:
    paths = ArtifactPaths(out)
    with open(paths.materialized, "wb") as mat, open(out, "wb") as rows, open(paths.failures, "wb") as failures:
        for task in range(tasks):
            prompt = f"Town {task} has {task % 900 + 100} houses; each has {task % 7 + 2} rooms. How many rooms? " * 3
            for rollout in range(repeats):
                stamps = {
                    "agent_ref": {"name": f"suite{task % 3}"},
                    "_ng_task_index": task,
                    "_ng_rollout_index": rollout,
                }
                request = {"input": [{"role": "user", "content": [{"type": "input_text", "text": prompt}]}]}
                mat.write(
                    orjson.dumps({"responses_create_params": request, "expected_answer": str(task), **stamps}) + b"\n"
                )
                if (task + rollout) % 50 == 0:
                    failure = {
                        **stamps,
                        "_ng_attempt_index": 0,
                        "_ng_failure_class": "agent_run_error",
                        "_ng_failure_message": "agent answered HTTP 500",
                        "_ng_failure_http_status": 500,
                        "_ng_failure_response_body": "Internal Server Error",
                        "elapsed_seconds": 0.2,
                        "_ng_earlier_tries": [],
                    }
                    failures.write(orjson.dumps(failure) + b"\n")
                    continue
                answer = str(task if (task + rollout) % 3 else task + 1)
                output = [
                    {
                        "type": "function_call",
                        "call_id": "c1",
                        "name": "calculator",
                        "arguments": f'{{"expression": "{task} * 3"}}',
                    },
                    {"type": "function_call_output", "call_id": "c1", "output": str(task * 3)},
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": f"The answer is \\boxed{{{answer}}}"}],
                    },
                ]
                if task % 10 == 0:
                    output.insert(0, {"type": "reasoning", "summary": [{"type": "summary_text", "text": REASONING}]})
                usage = {"input_tokens": 90, "output_tokens": 30, "total_tokens": 120}
                reply = {
                    "response": {"id": f"resp_{task}_{rollout}", "output": output, "usage": usage},
                    "reward": float(answer == str(task)),
                    "extracted_answer": answer,
                    "tool_calls": 1,
                    **stamps,
                    "elapsed_seconds": 0.05 + (task * 7919 % 1000) / 4000,
                }
                rows.write(orjson.dumps(reply) + b"\n")


def parse_all(out: Path) -> int:
    """The baseline: every line of the run's files, and its metrics file, parsed once."""
    paths = ArtifactPaths(out)
    count = 0
    for path in (paths.materialized, paths.out, paths.failures):
        with open(path, "rb") as handle:
            for line in handle:
                orjson.loads(line)
                count += 1
    orjson.loads(paths.metrics.read_bytes())
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--keep", type=Path, default=None, help="write the run and report here and keep them")
    args = parser.parse_args()
    where = args.keep or Path(tempfile.mkdtemp(prefix="bench_report_"))
    where.mkdir(parents=True, exist_ok=True)
    out = where / "r.jsonl"
    try:
        write_run(out, args.tasks, args.repeats)
        score_run(ArtifactPaths(out), ScoringPolicy(), agent_url=lambda name: None, write_metrics=True, timeout=60)
        inputs = sum(p.stat().st_size for p in ArtifactPaths(out).all() if p.exists())
        started = time.perf_counter()
        parse_all(out)
        parse_seconds = time.perf_counter() - started
        started = time.perf_counter()
        page = build_report(out)
        build_seconds = time.perf_counter() - started
        (where / "report.html").write_bytes(page)
        rollouts = args.tasks * args.repeats
        print(f"rollouts: {rollouts:,}; the run's files: {inputs / 1e6:,.1f} MB")
        print(f"report: {len(page) / 1e6:,.1f} MB ({len(page) / rollouts:,.0f} bytes per rollout)")
        print(f"parse the run's files (baseline): {parse_seconds:.2f}s")
        print(f"build the report: {build_seconds:.2f}s ({build_seconds / parse_seconds:.1f}x the baseline)")
    finally:
        if args.keep is None:
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
