"""The sandbox's events file (``events.jsonl`` in a task's runtime folder, named by the
sandbox's settings, `events`): one line for each kernel the sandbox killed because its
notebook ran past its whole budget, written by the kernel manager
(graders.sandbox.sandbox_kernel) and read back by the task (graders.grade.task) to say why a
hand-in stopped.

* `Kill`: one such line, typed: the kernel's private folder, the watchdog's budget (the
  notebook's budget plus the kill's grace) and the notebook's own budget, in seconds.
* `append` writes one; `read` gives them back, skipping what is not one (the grader wrote the
  file, but a line cut short by a crash must not stop the class); `reason` is the sentence a
  hand-in's result gives.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Kill:
    """A kernel the sandbox killed over its notebook's budget."""

    kernel: str  # its private folder on the host
    budget_s: float  # the watchdog's deadline: the notebook's budget and the grace
    notebook_s: float  # the notebook's own budget, as its feedback states it

    @classmethod
    def from_json(cls, line: str) -> Kill | None:
        """The record on one line of the file, or None where the line is not one."""
        try:
            row = json.loads(line)
            return cls(str(row["kernel"]), float(row["budget_s"]), float(row["notebook_s"]))
        except (ValueError, KeyError, TypeError):
            return None


def append(file: Path | str, kill: Kill) -> None:
    """Add `kill` to the events file."""
    with open(file, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(asdict(kill)) + "\n")


def read(file: Path) -> list[Kill]:
    """Every kill the file records, in order (none when it is missing)."""
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [kill for kill in map(Kill.from_json, lines) if kill is not None]


def reason(file: Path) -> str:
    """What the events file says of the kernel killed over the notebook's budget."""
    kills = read(file)
    if not kills:
        return "the whole-notebook budget"
    return f"the whole-notebook budget of {kills[0].notebook_s:g} s"
