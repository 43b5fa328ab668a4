"""Generate the arithmetic suite's dataset, ``data.jsonl``, next to this script.

The file is committed, so the suite needs no generation step to run; this script exists so the
data can be reviewed and regenerated. It is deterministic: the same ``--n`` and ``--seed`` give a
byte-identical file, so a diff of ``data.jsonl`` only ever shows an intended change.

Every (operation, difficulty) pair gets an equal share of the rows, the order is shuffled with the
seed, and no question repeats. Higher difficulty means bigger operands. Division always has an
exact integer result. Rows carry no ``agent_ref``: the suite's ``rollouts.toml`` routes them.

Usage: ``python generate.py [--n 120] [--seed 20240601] [--out data.jsonl]`` (stdlib only).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DEFAULT_SEED = 20240601
OPERATIONS = ("add", "sub", "mul", "div")
DIFFICULTIES = (1, 2, 3)
SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def operands(rng: random.Random, operation: str, difficulty: int) -> tuple[int, int, int]:
    """Draw ``(a, b, answer)`` for one question; operand size grows with difficulty."""
    if operation in ("add", "sub"):
        low, high = {1: (1, 20), 2: (10, 99), 3: (100, 999)}[difficulty]
        a, b = rng.randint(low, high), rng.randint(low, high)
        if operation == "add":
            return a, b, a + b
        a, b = max(a, b), min(a, b)  # keep results non-negative
        return a, b, a - b
    # mul and div share ranges: a division question is a product read backwards, so it is exact.
    (low_a, high_a), (low_b, high_b) = {
        1: ((2, 9), (2, 9)),
        2: ((10, 99), (2, 9)),
        3: ((10, 99), (10, 99)),
    }[difficulty]
    x, y = rng.randint(low_a, high_a), rng.randint(low_b, high_b)
    if operation == "mul":
        return x, y, x * y
    return x * y, y, x


def make_row(operation: str, difficulty: int, a: int, b: int, answer: int) -> dict:
    """One dataset row in the shape NeMo Gym's collector sends to an agent's ``/run``."""
    text = f"What is {a} {SYMBOLS[operation]} {b}? Put the final answer in \\boxed{{}}."
    return {
        "responses_create_params": {
            "input": [
                {
                    "role": "user",
                    "type": "message",
                    "content": [{"type": "input_text", "text": text}],
                }
            ]
        },
        "expected_answer": str(answer),
        "operation": operation,
        "difficulty": difficulty,
    }


def generate(n: int, seed: int) -> list[dict]:
    """``n`` distinct questions, cycling through every (operation, difficulty) pair, shuffled."""
    rng = random.Random(seed)
    pairs = [(op, d) for d in DIFFICULTIES for op in OPERATIONS]
    rows, seen = [], set()
    for i in range(n):
        operation, difficulty = pairs[i % len(pairs)]
        a, b, answer = operands(rng, operation, difficulty)
        while (operation, a, b) in seen:
            a, b, answer = operands(rng, operation, difficulty)
        seen.add((operation, a, b))
        rows.append(make_row(operation, difficulty, a, b, answer))
    rng.shuffle(rows)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=120, help="number of rows (default 120)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "data.jsonl",
        help="output file (default: data.jsonl next to this script)",
    )
    args = parser.parse_args()
    lines = [json.dumps(row, separators=(",", ":")) + "\n" for row in generate(args.n, args.seed)]
    # newline="\n" so the file is byte-identical on every platform.
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(lines)
    print(f"wrote {len(lines)} rows to {args.out}")


if __name__ == "__main__":
    main()
