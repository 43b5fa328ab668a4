"""The command line every benchmark client takes, in a module of its own: a client must import
nothing the other one does not (the plain client's aiohttp would weigh on the API client)."""

from __future__ import annotations

import argparse
from pathlib import Path


def arguments(description: str) -> argparse.ArgumentParser:
    """Dataset, agent URL, output file, requests in flight, and rollouts per row."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("dataset", type=Path)
    parser.add_argument("url", help="agent base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("out", type=Path)
    parser.add_argument("parallel", type=int)
    parser.add_argument("--repeats", type=int, default=1, help="rollouts per row (default 1)")
    return parser
