"""``python -m pytest_rollouts aggregate ...``: the same as the ``pytest-rollouts`` console script."""

import sys

from pytest_rollouts.cli import main

sys.exit(main())
