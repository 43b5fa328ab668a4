"""How long to wait before trying a request again: one rule for ``/run`` retries and model calls.

Both back off the same way (jittered, doubling, capped, never sooner than a ``Retry-After``
asks), so a rate-limited model and a rate-limited agent are treated alike.
"""

from __future__ import annotations

import datetime
import random

MAX_BACKOFF_S = 60.0
# An event loop's timer may fire a fraction of a millisecond early (uvloop keeps time in whole
# milliseconds), and a ``Retry-After`` date is a wall-clock second: a retry waits this much past
# what the server asked, so it never arrives before the date.
TIMER_SLACK_S = 0.002


def backoff_delay(base: float, number: int, retry_after: float | None) -> float:
    """Before try ``number + 1``: ``base`` doubled per try, jittered down to half, at least
    ``retry_after`` (and the timers' slack), at most ``MAX_BACKOFF_S``."""
    ceiling = base * (2**number)
    delay = random.uniform(ceiling / 2, ceiling)
    if retry_after is not None:
        delay = max(delay, retry_after + TIMER_SLACK_S)
    return min(delay, MAX_BACKOFF_S)


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds, given as seconds or as an HTTP date; None for none or a
    form not understood."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    # Imported here: a date is the rare form, and ``email`` is a dozen modules for every process that starts.
    import email.utils

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; a date without a zone is taken so
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())
