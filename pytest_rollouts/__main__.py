"""``python -m pytest_rollouts aggregate ...``: the same as the ``pytest-rollouts`` console script."""

import sys

from .cli import main

sys.exit(main())
