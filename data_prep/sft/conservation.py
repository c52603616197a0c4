"""The build's conservation counts: every input unit ends in exactly one outcome, and the sums are checked.

Units: a run yields one candidate per run task; a policy case yields one writer-memory candidate and
one reader-policy candidate per probe request. A line that cannot be loaded counts as one rejected
unit for each task it would have fed.
"""

from __future__ import annotations

from collections import Counter

OUTCOMES = ("kept", "filtered", "rejected", "deduplicated", "decontaminated")


class ConservationError(AssertionError):
    pass


class StageCounts:
    def __init__(self, tasks: tuple[str, ...]):
        self.tasks = tasks
        self.input: Counter[str] = Counter()
        self.by: dict[str, dict[str, Counter[str]]] = {t: {o: Counter() for o in OUTCOMES} for t in tasks}
        self.splits: dict[str, Counter[str]] = {t: Counter() for t in tasks}

    def add_input(self, task: str, n: int = 1) -> None:
        self.input[task] += n

    def record(self, task: str, outcome: str, reason: str) -> None:
        self.by[task][outcome][reason] += 1

    def kept(self, task: str, split: str) -> None:
        self.by[task]["kept"][split] += 1
        self.splits[task][split] += 1

    def check(self) -> None:
        """Raise ConservationError unless input = kept + filtered + rejected + deduplicated +
        decontaminated (train copies of held-out examples) per task."""
        for task in self.tasks:
            total = sum(sum(c.values()) for c in self.by[task].values())
            if total != self.input[task]:
                raise ConservationError(f"{task}: {self.input[task]} in, {total} accounted for")

    def to_dict(self) -> dict:
        out = {}
        for task in self.tasks:
            out[task] = {
                "input": self.input[task],
                **{
                    o: {"total": sum(c.values()), "by_reason": dict(sorted(c.items()))}
                    for o, c in self.by[task].items()
                },
            }
        return out

    def table(self) -> str:
        lines = [
            f"{'task':<16}{'input':>8}{'kept':>8}{'filtered':>10}{'rejected':>10}{'dedup':>8}  train/val/heldout"
        ]
        for task in self.tasks:
            b = self.by[task]
            s = self.splits[task]
            lines.append(
                f"{task:<16}{self.input[task]:>8}{sum(b['kept'].values()):>8}{sum(b['filtered'].values()):>10}"
                f"{sum(b['rejected'].values()):>10}{sum(b['deduplicated'].values()):>8}  "
                f"{s['train']}/{s['validation']}/{s['heldout']}"
            )
        return "\n".join(lines)
