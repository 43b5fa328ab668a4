"""The honest minimal baseline: the loop anyone would write by hand with aiohttp.

One ``ClientSession``, a semaphore of ``parallel``, one task per rollout (``--repeats`` of
each row), orjson both ways, the plugin's ``_ng_task_index``/``_ng_rollout_index`` stamps, and
one flushed write per reply. No validation, retries, sidecars or pytest: whatever the plugin
costs above this is its overhead.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import IO, Any

import aiohttp
import orjson
from client_args import arguments


async def post_one(
    session: aiohttp.ClientSession,
    gate: asyncio.Semaphore,
    url: str,
    row: dict[str, Any],
    task_index: int,
    rollout_index: int,
    out: IO[bytes],
) -> None:
    async with gate:
        body = orjson.dumps({**row, "_ng_task_index": task_index, "_ng_rollout_index": rollout_index})
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
            resp.raise_for_status()
            reply: dict[str, Any] = orjson.loads(await resp.read())
    reply["_ng_task_index"] = task_index
    reply["_ng_rollout_index"] = rollout_index
    out.write(orjson.dumps(reply, option=orjson.OPT_APPEND_NEWLINE))
    out.flush()


async def run(dataset: Path, url: str, out_path: Path, parallel: int, repeats: int) -> None:
    rows = [orjson.loads(line) for line in dataset.read_bytes().splitlines() if line.strip()]
    gate = asyncio.Semaphore(parallel)
    connector = aiohttp.TCPConnector(limit=parallel)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "wb") as out:
        async with aiohttp.ClientSession(connector=connector) as session:
            await asyncio.gather(
                *(
                    post_one(session, gate, url + "/run", row, i, r, out)
                    for i, row in enumerate(rows)
                    for r in range(repeats)
                )
            )


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    asyncio.run(run(args.dataset, args.url, args.out, args.parallel, args.repeats))


if __name__ == "__main__":
    main()
