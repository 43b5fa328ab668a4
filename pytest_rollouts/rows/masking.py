"""What a run loses to its environment rather than its policy: NeMo Gym's ``_masking_step_metrics``.

NeMo Gym counts, as rollouts finish, the *scored* ones (results written to the output: the
unmasked ones with a reward, their ``count`` and ``reward`` sum, and the ``masked`` ones) and the
*dropped* ones, which never reach the output: ``failed`` (a failure row in the sidecar) and
``omitted`` (written nowhere: ``_ng_no_persist``, which a rollout the dispatch budget drained
carries too). Ours map one to one (docs/scoring.md#what-a-run-loses):

- ``masked``: a result whose reply set ``mask_sample`` (``RolloutOutcome.masked``);
- ``count``/``reward``: the other results with a numeric reward (a result without one is neither
  scored nor dropped, as in NeMo Gym, and the item says ``no_reward``);
- ``failed``: a failure of any class written to the failures sidecar;
- ``omitted``: a failure written nowhere, an agent's ``_ng_no_persist`` or a ``cancelled`` rollout
  the dispatch budget never started (``RolloutOutcome.persisted`` false).

``reward_unmasked`` averages the unmasked results alone, so its gap to the mean reward is the score
lost to infrastructure; the dropped ones are counts, never folded into an average. Nothing at all
while nothing is masked or dropped: a healthy run shows what it showed before.
"""

from __future__ import annotations

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.records import RolloutOutcome


@datatype(slots=True)
class MaskingCounts:
    """NeMo Gym's ``scored`` (``count``, ``reward``, ``masked``) and ``dropped`` (``failed``, ``omitted``)."""

    count: int = 0
    reward: float = 0.0
    masked: int = 0
    failed: int = 0
    omitted: int = 0

    def add(self, outcome: RolloutOutcome) -> None:
        if outcome.failure_class is not None:
            if outcome.persisted:
                self.failed += 1
            else:
                self.omitted += 1
        elif outcome.masked:
            self.masked += 1
        elif outcome.reward is not None:
            self.count += 1
            self.reward += outcome.reward

    @property
    def healthy(self) -> bool:
        """Nothing masked or dropped: the masking view says nothing."""
        return not (self.masked or self.failed or self.omitted)

    def step_metrics(self, name: str) -> dict[str, float]:
        """``_masking_step_metrics(name, scored, dropped)``: NeMo Gym's keys and rounding (percentages
        to two decimals), each only when it has something to say, and nothing while healthy."""
        if self.healthy:
            return {}
        metrics: dict[str, float] = {}
        persisted = self.masked + self.count
        if self.masked and persisted:
            metrics[f"progress/{name}/masked_pct"] = round(100 * self.masked / persisted, 2)
        if self.count:
            metrics[f"progress/{name}/reward_unmasked"] = round(100 * self.reward / self.count, 2)
        if self.failed:
            metrics[f"progress/{name}/failed"] = self.failed
        if self.omitted:
            metrics[f"progress/{name}/omitted"] = self.omitted
        return metrics

    def line(self) -> str:
        """The progress line's part: the same numbers as ``step_metrics``, in words; "" while healthy."""
        if self.healthy:
            return ""
        said = [f"reward_unmasked {100 * self.reward / self.count:.2f}%"] if self.count else []
        if self.masked:
            said.append(f"{self.masked} masked ({100 * self.masked / (self.masked + self.count):.2f}%)")
        dropped = [f"{n} {what}" for n, what in ((self.failed, "failed"), (self.omitted, "omitted")) if n]
        if dropped:
            said.append(f"dropped {self.failed + self.omitted} ({', '.join(dropped)})")
        return ", ".join(said)

    def most(self, other: MaskingCounts) -> MaskingCounts:
        """Each count the larger of two views of one run (pytest's reports, which include a resumed
        run's settled rollouts, and the dispatcher's, which run ahead of them); the reward sum goes
        with the count it was taken over."""
        reward = self.reward if self.count >= other.count else other.reward
        return MaskingCounts(
            max(self.count, other.count),
            reward,
            max(self.masked, other.masked),
            max(self.failed, other.failed),
            max(self.omitted, other.omitted),
        )
