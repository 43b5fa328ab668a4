"""The plain client's loop written with ``run_examples``: what a trainer streaming rollouts writes.

Rows are read from the dataset only as rollouts start (a generator, so memory stays flat however
long the dataset is), stamped as ``preprocess_examples`` stamps them, and each result is written
with its stamps in one flushed write, as ``plain_client.py`` writes its replies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from client_args import arguments

from pytest_rollouts import run_examples

AGENT = "policy"


def stamped_rows(dataset: Path) -> Iterator[dict[str, Any]]:
    with open(dataset, "rb") as lines:
        for task_index, line in enumerate(lines):
            row = orjson.loads(line)
            row["agent_ref"] = {"name": AGENT}
            row["_ng_task_index"] = task_index
            row["_ng_rollout_index"] = 0
            yield row


async def run(dataset: Path, url: str, out_path: Path, parallel: int, max_resident: int) -> None:
    out_path.parent.mkdir(parents=True, exist_ok=True)
    rows = stamped_rows(dataset)
    with open(out_path, "wb") as out:
        async with run_examples(rows, {AGENT: url}, parallel=parallel, max_resident=max_resident) as results:
            async for row, result in results:
                result["_ng_task_index"] = row["_ng_task_index"]
                result["_ng_rollout_index"] = row["_ng_rollout_index"]
                out.write(orjson.dumps(result, option=orjson.OPT_APPEND_NEWLINE))
                out.flush()


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("max_resident", type=int)
    args = parser.parse_args()
    asyncio.run(run(args.dataset, args.url, args.out, args.parallel, args.max_resident))


if __name__ == "__main__":
    main()
