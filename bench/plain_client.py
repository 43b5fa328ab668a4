"""The honest minimal baseline: the loop anyone would write by hand with aiohttp.

One ``ClientSession`` and ``parallel`` workers, each taking the next rollout (``--repeats`` of
each row) from one generator over the dataset's lines, so what is held is what is in flight: the
rows are read as they are sent, not first into a list, and no task waits per rollout (a task per
rollout under a semaphore holds every row and task of the run, 290 MB at 100k rows). orjson both
ways, the plugin's ``_ng_task_index``/``_ng_rollout_index`` stamps, one flushed write per reply.
No validation, retries, sidecars or pytest: whatever the plugin costs above this is its overhead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import aiohttp
import orjson
from client_args import arguments


def rollouts(dataset: Path, repeats: int) -> Iterator[tuple[dict[str, Any], int, int]]:
    """Each rollout to send, ``(row, task index, rollout index)``, read from the file as it is taken."""
    with open(dataset, "rb") as lines:
        for task_index, line in enumerate(line for line in lines if line.strip()):
            row = orjson.loads(line)
            for rollout_index in range(repeats):
                yield row, task_index, rollout_index


async def worker(
    session: aiohttp.ClientSession, url: str, todo: Iterator[tuple[dict[str, Any], int, int]], out: IO[bytes]
) -> None:
    """Sends rollouts one after another until none is left (the workers share ``todo``)."""
    for row, task_index, rollout_index in todo:
        body = orjson.dumps({**row, "_ng_task_index": task_index, "_ng_rollout_index": rollout_index})
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
            resp.raise_for_status()
            reply: dict[str, Any] = orjson.loads(await resp.read())
        reply["_ng_task_index"] = task_index
        reply["_ng_rollout_index"] = rollout_index
        out.write(orjson.dumps(reply, option=orjson.OPT_APPEND_NEWLINE))
        out.flush()


async def run(dataset: Path, url: str, out_path: Path, parallel: int, repeats: int) -> None:
    connector = aiohttp.TCPConnector(limit=parallel)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    todo = rollouts(dataset, repeats)
    with open(out_path, "wb") as out:
        async with aiohttp.ClientSession(connector=connector) as session:
            await asyncio.gather(*(worker(session, url + "/run", todo, out) for _ in range(parallel)))


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    asyncio.run(run(args.dataset, args.url, args.out, args.parallel, args.repeats))


if __name__ == "__main__":
    main()
