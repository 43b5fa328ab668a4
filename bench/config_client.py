"""The plain client's run as one call of ``run``: the whole run the plugin does (plan, materialized
inputs, dispatch, every row written, scoring) in the caller's process, with no pytest."""

from __future__ import annotations

from client_args import arguments

import pytest_rollouts

AGENT = "policy"


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    config = {
        "input": args.dataset,
        "out": args.out,
        "agents": {AGENT: args.url},
        "parallel": args.parallel,
        "repeats": args.repeats,
    }
    raise SystemExit(pytest_rollouts.run(config).exit_status)


if __name__ == "__main__":
    main()
