"""What every grading kernel started alone pays before a hand-in's own code runs, and what a
kernel forked from a process that has already paid it pays instead (a root grader forks its
kernels so: graders/sandbox/zygote.py).

A kernel started alone in a fresh sandbox (graders/sandbox/sandbox.py) starts Python and ipykernel,
imports torch, and (in most labs) imports torch._dynamo the first time an optimizer is used
(torch.optim's methods are wrapped by torch._disable_dynamo, which imports it on their first
call). This prints those steps, each timed in a fresh
interpreter of the grader's Python with the kernels' thread count, the median of `--runs`,
and then the time to fork a process that has done all of them and have the child answer.

    python benchmarks/kernel_start.py            # 5 runs
    python benchmarks/kernel_start.py --runs 9

Run it on a quiet machine; it prints the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from graders.sandbox.sandbox_argv import KERNEL_THREADS

STEPS = r"""
import json, sys, time
marks = [("start", time.perf_counter())]
import ipykernel.kernelapp  # what the kernel launcher imports before it answers
marks.append(("ipykernel", time.perf_counter()))
import torch
marks.append(("torch", time.perf_counter()))
p = torch.nn.Parameter(torch.ones(2))
opt = torch.optim.SGD([p], lr=0.1)
(p * 3).sum().backward()
opt.step()
opt.zero_grad()
marks.append(("optimizer", time.perf_counter()))
print(json.dumps({"marks": marks, "dynamo": "torch._dynamo" in sys.modules}), flush=True)
import os
os._exit(0)  # a graded kernel is killed, not shut down: no interpreter teardown to time
"""

FORK = r"""
import os, sys, time
import ipykernel.kernelapp, torch, torch._dynamo
times = []
for _ in range(int(sys.argv[1])):
    read, write = os.pipe()
    started = time.perf_counter()
    child = os.fork()
    if child == 0:
        os.write(write, b"x")
        os._exit(0)
    os.read(read, 1)
    times.append(time.perf_counter() - started)
    os.waitpid(child, 0)
    os.close(read)
    os.close(write)
print(sorted(times)[len(times) // 2])
"""


def fresh(script: str, *args: str) -> tuple[float, str]:
    """(wall seconds of a fresh interpreter running `script`, what it printed)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(KERNEL_THREADS)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, check=True
    )
    return time.perf_counter() - started, done.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} cores")
    steps: dict[str, list[float]] = {}
    walls, dynamo = [], set()
    for _ in range(args.runs):
        wall, printed = fresh(STEPS)
        result = json.loads(printed)
        walls.append(wall)
        dynamo.add(result["dynamo"])
        marks = result["marks"]
        for (_, before), (name, after) in zip(marks, marks[1:], strict=False):
            steps.setdefault(name, []).append(after - before)
    median = {name: statistics.median(times) for name, times in steps.items()}
    startup = statistics.median(walls) - sum(median.values())
    print(f"median of {args.runs} fresh interpreters, {KERNEL_THREADS} torch thread(s):")
    said = "imports torch._dynamo" if dynamo == {True} else f"torch._dynamo imported: {dynamo}"
    rows = [
        ("interpreter start", startup),
        ("import ipykernel.kernelapp", median["ipykernel"]),
        ("import torch", median["torch"]),
        (f"first optimizer step ({said})", median["optimizer"]),
        ("in all", statistics.median(walls)),
    ]
    for label, seconds in rows:
        print(f"  {label:<48} {seconds:5.2f} s")
    _, forked = fresh(FORK, str(args.runs))
    print(f"fork of a process that has done all of it (median of {args.runs}): "
          f"{float(forked) * 1000:.1f} ms")  # fmt: skip
    print(f"load average after: {os.getloadavg()[0]:.1f} (1 min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
