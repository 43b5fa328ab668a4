"""The two stamps every row of a run's files is keyed by: its task and its rollout.

Spelled here, apart from the artifacts (``artifacts.py``, which checks each row it reads for them)
and the other ``_ng_*`` fields (``rows/schema.py``, which names them with the rest): the dispatcher
process stamps rows but never handles a run's files, and importing their lifecycle (hashlib,
shutil, glob, bz2, lzma) cost every run's start-up.
"""

from __future__ import annotations

TASK_INDEX = "_ng_task_index"
ROLLOUT_INDEX = "_ng_rollout_index"
