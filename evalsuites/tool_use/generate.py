"""Generate the tool_use suite: its fact table, ``facts.json``, and its dataset, ``data.jsonl``.

Both files are committed, so the suite needs no generation step to run; this script exists so they
can be reviewed and regenerated. It is deterministic: the same ``--n`` and ``--seed`` give
byte-identical files, so a diff only ever shows an intended change.

The fact table describes fictional cities (population, area in km², founding year). No model can
know these numbers, so a task is only answered right by calling the ``lookup`` tool (see
``tools.py``) and using what it returns; the arithmetic on top is what the ``calculator`` tool is
for. Each task needs one to three look-ups and a computation, so a rollout takes several turns.

Task kinds, in rising difficulty (each gets an equal share of the rows, order shuffled):

* ``since`` (1): years between a city's founding and a given year (one look-up);
* ``sum`` (2): combined population of two cities; ``gap`` (2): years between two foundings;
* ``density`` (3): a city's population per km², rounded down (two look-ups, ``//``);
  ``area3`` (3): total area of three cities (three look-ups).

Every row carries ``expected_answer`` and ``required_lookups`` (the keys a right answer needs),
which the verifier reads; ``kind`` and ``difficulty`` are there for slicing the results.

Usage: ``python generate.py [--n 120] [--seed 20240602] [--out data.jsonl] [--facts facts.json]``
(stdlib only).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SEED = 20240602
N_CITIES = 30
KINDS = {"since": 1, "sum": 2, "gap": 2, "density": 3, "area3": 3}
INSTRUCTIONS = (
    " Use the tools: lookup('<city>.<attribute>') returns a fact (attributes: population,"
    " area_km2, founded) and calculator(expression) does arithmetic."
    " Put the final answer, a whole number, in \\boxed{}."
)
SYLLABLES = ("var", "nol", "tes", "kar", "mir", "dun", "bel", "os", "tra", "quin", "zel", "ham", "ri", "lo", "sten")
ENDINGS = ("holt", "mark", "ford", "grad", "vik", "ora", "heim", "port", "wick", "ton")


def make_facts(rng: random.Random) -> dict[str, dict[str, int]]:
    """``N_CITIES`` distinct fictional cities with population, area and founding year."""
    facts: dict[str, dict[str, int]] = {}
    while len(facts) < N_CITIES:
        name = (rng.choice(SYLLABLES) + rng.choice(SYLLABLES) + rng.choice(ENDINGS)).capitalize()
        if name in facts:
            continue
        facts[name] = {
            "population": rng.randint(2_000, 2_500_000),
            "area_km2": rng.randint(8, 950),
            "founded": rng.randint(800, 1990),
        }
    return facts


def make_task(rng: random.Random, kind: str, facts: dict[str, dict[str, int]]) -> tuple[str, int, list[str]]:
    """``(question, answer, required_lookups)`` for one task of ``kind``."""
    cities = rng.sample(sorted(facts), 3)
    a, b, c = cities
    fa, fb, fc = facts[a], facts[b], facts[c]
    if kind == "since":
        year = rng.randint(fa["founded"] + 5, 2030)
        return f"How many years before {year} was {a} founded?", year - fa["founded"], [f"{a}.founded"]
    if kind == "sum":
        question = f"What is the combined population of {a} and {b}?"
        return question, fa["population"] + fb["population"], [f"{a}.population", f"{b}.population"]
    if kind == "gap":
        question = f"How many years apart were {a} and {b} founded?"
        return question, abs(fa["founded"] - fb["founded"]), [f"{a}.founded", f"{b}.founded"]
    if kind == "density":
        question = f"What is the population density of {a} in people per km², rounded down to a whole number?"
        return question, fa["population"] // fa["area_km2"], [f"{a}.population", f"{a}.area_km2"]
    question = f"What is the total area in km² of {a}, {b} and {c}?"
    total = fa["area_km2"] + fb["area_km2"] + fc["area_km2"]
    return question, total, [f"{a}.area_km2", f"{b}.area_km2", f"{c}.area_km2"]


def make_row(kind: str, question: str, answer: int, lookups: list[str]) -> dict:
    """One dataset row in the shape NeMo Gym's collector sends to an agent's ``/run``."""
    return {
        "responses_create_params": {
            "input": [
                {
                    "role": "user",
                    "type": "message",
                    "content": [{"type": "input_text", "text": question + INSTRUCTIONS}],
                }
            ]
        },
        "expected_answer": str(answer),
        "required_lookups": [key.lower() for key in lookups],
        "kind": kind,
        "difficulty": KINDS[kind],
    }


def generate(n: int, seed: int) -> tuple[dict[str, dict[str, int]], list[dict]]:
    """The fact table and ``n`` distinct tasks, cycling through the kinds, shuffled."""
    rng = random.Random(seed)
    facts = make_facts(rng)
    rows, seen = [], set()
    kinds = list(KINDS)
    for i in range(n):
        kind = kinds[i % len(kinds)]
        question, answer, lookups = make_task(rng, kind, facts)
        while question in seen:
            question, answer, lookups = make_task(rng, kind, facts)
        seen.add(question)
        rows.append(make_row(kind, question, answer, lookups))
    rng.shuffle(rows)
    return facts, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=120, help="number of rows (default 120)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed")
    parser.add_argument("--out", type=Path, default=HERE / "data.jsonl", help="dataset (default: next to this script)")
    parser.add_argument(
        "--facts", type=Path, default=HERE / "facts.json", help="fact table (default: next to this script)"
    )
    args = parser.parse_args()
    facts, rows = generate(args.n, args.seed)
    lines = [json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n" for row in rows]
    # newline="\n" so the files are byte-identical on every platform.
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(lines)
    with open(args.facts, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(lines)} rows to {args.out} and {len(facts)} cities to {args.facts}")


if __name__ == "__main__":
    main()
