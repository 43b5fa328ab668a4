"""Generate the structured suite's dataset, ``data.jsonl``, next to this script.

Each task is a short text about a fictional person and a JSON Schema; the model has to reply with
one JSON object that conforms to the schema and holds the facts in the text. The verifier
(``verify.py``) gives credit per field, so a reply with one field wrong scores, say, 5/6.

Difficulty sets how much there is to extract:

1. name, age, city, member (4 fields);
2. also email and interests (6 fields), sentences after the first shuffled;
3. also joined (a date the text writes as "March 5, 2021" and the schema wants as 2021-03-05)
   and rating (8 fields), plus a distracting sentence about another person's age.

It is deterministic: the same ``--n`` and ``--seed`` give a byte-identical file. The schema is in
each row (``schema``) and in the prompt; the true values are in ``expected``.

Usage: ``python generate.py [--n 120] [--seed 20240603] [--out data.jsonl]`` (stdlib only).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DEFAULT_SEED = 20240603
DIFFICULTIES = (1, 2, 3)
FIRST = (
    "Ada",
    "Bruno",
    "Chiara",
    "Dmitri",
    "Elin",
    "Farid",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Keiko",
    "Lars",
    "Mira",
    "Nils",
    "Odile",
    "Pavel",
    "Rosa",
    "Sven",
    "Tamar",
    "Ugo",
    "Vera",
    "Wim",
    "Yara",
    "Zeno",
)
LAST = (
    "Lorne",
    "Okafor",
    "Brandt",
    "Silva",
    "Novak",
    "Haddad",
    "Lindqvist",
    "Moreau",
    "Tanaka",
    "Rossi",
    "Kowalski",
    "Ferreira",
    "Dubois",
    "Nakamura",
    "Petrov",
    "Varga",
)
CITIES = ("Veltria", "Osmark", "Karnholt", "Brisa", "Dunmere", "Lowick", "Sarnport", "Tessaly")
INTERESTS = ("chess", "sailing", "pottery", "climbing", "jazz", "astronomy", "cycling", "baking", "origami", "rowing")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
RELATIVES = ("cousin", "colleague", "flatmate")
FIELDS = {
    1: ("name", "age", "city", "member"),
    2: ("name", "age", "city", "member", "email", "interests"),
    3: ("name", "age", "city", "member", "email", "interests", "joined", "rating"),
}
PROPERTIES = {
    "name": {"type": "string", "minLength": 1, "description": "full name"},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "city": {"type": "string", "enum": list(CITIES)},
    "member": {"type": "boolean", "description": "whether the person is a club member"},
    "email": {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+\\.[a-z]+$"},
    "interests": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
    "joined": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$", "description": "date joined, YYYY-MM-DD"},
    "rating": {"type": "number", "minimum": 0, "maximum": 100},
}
PROMPT = (
    "Extract the person described below as a single JSON object that conforms to this JSON Schema."
    " Reply with the JSON object only.\n\nSchema:\n{schema}\n\nText:\n{text}"
)


def schema_for(difficulty: int) -> dict:
    fields = FIELDS[difficulty]
    return {
        "type": "object",
        "properties": {f: PROPERTIES[f] for f in fields},
        "required": list(fields),
        "additionalProperties": False,
    }


def make_task(rng: random.Random, difficulty: int) -> tuple[str, dict]:
    """``(text, expected)`` for one person."""
    first, last = rng.choice(FIRST), rng.choice(LAST)
    person = {
        "name": f"{first} {last}",
        "age": rng.randint(18, 90),
        "city": rng.choice(CITIES),
        "member": rng.random() < 0.5,
        "email": f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@example.org",
        "interests": rng.sample(INTERESTS, rng.randint(2, 3)),
        "joined": f"{rng.randint(2005, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "rating": round(rng.uniform(10, 99), 1),
    }
    year, month, day = (int(x) for x in person["joined"].split("-"))
    interests = person["interests"]
    liked = ", ".join(interests[:-1]) + " and " + interests[-1]
    sentences = {
        "member": f"{first} is {'a' if person['member'] else 'not a'} member of the rowing club.",
        "email": f"You can reach {first} at {person['email']}.",
        "interests": f"{first} enjoys {liked}.",
        "joined": f"{first} joined on {MONTHS[month - 1]} {day}, {year}.",
        "rating": f"{first}'s latest rating is {person['rating']}.",
    }
    rest = [sentences[f] for f in FIELDS[difficulty] if f in sentences]
    if difficulty >= 2:
        rng.shuffle(rest)
    if difficulty == 3:
        other = f"{rng.choice([f for f in FIRST if f != first])} {rng.choice(LAST)}"
        rest.insert(rng.randint(0, len(rest)), f"{first}'s {rng.choice(RELATIVES)}, {other}, is {rng.randint(5, 95)}.")
    opening = f"{person['name']} is {person['age']} years old and lives in {person['city']}."
    expected = {f: person[f] for f in FIELDS[difficulty]}
    return " ".join([opening, *rest]), expected


def make_row(difficulty: int, text: str, expected: dict) -> dict:
    """One dataset row in the shape NeMo Gym's collector sends to an agent's ``/run``."""
    schema = schema_for(difficulty)
    prompt = PROMPT.format(schema=json.dumps(schema, separators=(",", ":")), text=text)
    return {
        "responses_create_params": {
            "input": [{"role": "user", "type": "message", "content": [{"type": "input_text", "text": prompt}]}]
        },
        "schema": schema,
        "expected": expected,
        "difficulty": difficulty,
    }


def generate(n: int, seed: int) -> list[dict]:
    """``n`` distinct tasks, cycling through the difficulties, shuffled."""
    rng = random.Random(seed)
    rows, seen = [], set()
    for i in range(n):
        difficulty = DIFFICULTIES[i % len(DIFFICULTIES)]
        text, expected = make_task(rng, difficulty)
        while text in seen:
            text, expected = make_task(rng, difficulty)
        seen.add(text)
        rows.append(make_row(difficulty, text, expected))
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
