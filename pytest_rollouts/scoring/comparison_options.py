"""The options every command that compares with a baseline takes alike (``compare``, ``report``):
``--correction`` and ``--sequential``, named and explained by the options table as the run's
``--rollouts-correction`` and ``--rollouts-sequential`` are."""

from __future__ import annotations

import argparse

from pytest_rollouts.options import OPTION
from pytest_rollouts.scoring.multiplicity import CORRECTIONS, NONE


def comparison_arguments(parser: argparse.ArgumentParser) -> None:
    """``--correction none|holm|bh`` (how the groups' p-values are adjusted for their number) and
    ``--sequential`` (each group's confidence sequence): what a comparison's commands take alike."""
    parser.add_argument(
        "--sequential",
        action="store_true",
        help=OPTION["sequential"].argparse_help.replace("--rollouts-", "--"),
    )
    parser.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default=NONE,
        help=OPTION["correction"].argparse_help.replace("--rollouts-", "--"),
    )
