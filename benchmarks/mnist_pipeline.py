"""One training epoch of lab 5's DynamicNet through two input pipelines, side by side.

* seed: the source notebook's pipeline, a DataLoader over torchvision's MNIST with per-sample
  transforms (PIL image -> ToTensor -> Normalize), batch 128, shuffled;
* tensors: the lab's pipeline, the whole of MNIST read by the lab's reader and normalised
  once into one float tensor, shuffled batches taken by indexing.

Both start from the same weights (seed 666), use the same hyper-parameters (SGD lr 0.01,
momentum 0.5, batch 128) and draw their depths from the same random sequence; each is
evaluated on the 10,000 test digits afterwards, so equal accuracy shows the shortcut changes
nothing but speed.

    python benchmarks/mnist_pipeline.py [--root ROOT] [--threads 1] [--full-runs SEED ...]

With --full-runs, it also trains the lab's full schedule (8 epochs, in-memory tensors) once
per seed given and prints each run's test accuracy and their mean: how much of a single
run's figure is the luck of its seed.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import struct
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from data import mnist  # noqa: E402
from graders.build import includes  # noqa: E402

SEED, BATCH, LR, MOMENTUM = 666, 128, 0.01, 0.5  # the lab's DynamicNet: hidden 100
MEAN, STD = 0.1307, 0.3081


def lab_code() -> dict:
    """DynamicNet and the MNIST reader as the labs have them, from their one source in
    solutions/common/ (graders/build/includes.py), so that the benchmark runs the labs' own
    code, never a copy that may drift."""
    names = tuple(name.removesuffix(".gz") for name in mnist.RESOURCES)
    namespace = {"torch": torch, "nn": nn, "F": F, "random": random, "NAMES": names}
    namespace.update(os=os, gzip=gzip, struct=struct)
    for fragment in ("dynamicnet.py", "mnist_reader.py"):
        includes.load(fragment, namespace)
    return namespace


LAB = lab_code()
DynamicNet = LAB["DynamicNet"]  # 0 to max_depth passes through one shared middle layer


def fresh(seed=SEED):
    torch.manual_seed(seed)
    model = DynamicNet()
    return model, torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)


def step(model, optimizer, data, target, rng):
    model.rng = rng  # the depths come from the run's generator, the same in both pipelines
    optimizer.zero_grad()
    F.nll_loss(model(data), target).backward()
    optimizer.step()


def seed_epoch(root, rng):
    from torchvision import datasets, transforms

    model, optimizer = fresh()
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((MEAN,), (STD,))])
    train = datasets.MNIST(root, train=True, download=True, transform=transform)
    loader = torch.utils.data.DataLoader(
        train, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(SEED)
    )
    start = time.perf_counter()
    for data, target in loader:
        step(model, optimizer, data, target, rng)
    return model, time.perf_counter() - start


def load_tensors(root, train):
    """The lab's reader (read_mnist) on the prepared files, normalised once, as lab 5 does."""
    parts = LAB["read_mnist"](str(mnist.raw_folder(root)))
    images, labels = parts[0:2] if train else parts[2:4]
    return ((images.float() / 255 - MEAN) / STD).reshape(-1, 784), labels.long()


def tensor_epoch(images, labels, rng, seed=SEED, epochs=1):
    model, optimizer = fresh(seed)
    start = time.perf_counter()
    order = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(len(images), generator=order)
        for i in range(0, len(images), BATCH):
            batch = perm[i : i + BATCH]
            step(model, optimizer, images[batch], labels[batch], rng)
    return model, time.perf_counter() - start


@torch.no_grad()
def accuracy(model, images, labels):
    """Test accuracy averaged over the four depths (the depth is random at test time too)."""
    correct = 0
    for depth in range(4):
        fixed = random.Random()
        fixed.randint = lambda a, b, d=depth: d
        correct += (model(images, fixed).argmax(1) == labels).sum().item()
    return correct / (4 * len(labels))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=mnist.default_root())
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (the lab uses 1: tiny matrices)"
    )
    parser.add_argument(
        "--full-runs", type=int, nargs="*", default=[], metavar="SEED",
        help="also train 8 epochs per seed (as lab 5 does with seed 666) and print accuracies",
    )  # fmt: skip
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    prepared = mnist.prepare(args.root, log=lambda line: None)
    print(prepared.message)
    root = str(args.root)
    from torchvision import datasets  # noqa: F401  (imported before the clock starts)

    start = time.perf_counter()
    images, labels = load_tensors(root, train=True)
    test_images, test_labels = load_tensors(root, train=False)
    prep = time.perf_counter() - start

    seed_model, seed_s = seed_epoch(root, random.Random(SEED))
    tensor_model, tensor_s = tensor_epoch(images, labels, random.Random(SEED))
    seed_acc = accuracy(seed_model, test_images, test_labels)
    tensor_acc = accuracy(tensor_model, test_images, test_labels)

    n, per_epoch, with_load = len(images), seed_s / tensor_s, seed_s / (tensor_s + prep)
    print(f"one epoch of {n:,} digits, batch {BATCH}, {args.threads} torch thread(s)")
    for name, seconds, acc in [
        ("seed DataLoader, per-sample transforms", seed_s, seed_acc),
        ("in-memory tensors, as in lab 5", tensor_s, tensor_acc),
    ]:
        print(f"  {name:<38} {seconds:7.2f} s  test accuracy {acc:.2%}")
    print(f"  {'one-time load + normalise (tensors)':<38} {prep:7.2f} s")
    print(f"  speed-up: {per_epoch:.1f}x per epoch ({with_load:.1f}x counting the one-time load)")
    if args.full_runs:
        print("8 epochs, in-memory tensors, test accuracy (mean over the 4 depths):")
        accs = []
        for seed in args.full_runs:
            model, seconds = tensor_epoch(images, labels, random.Random(seed), seed, epochs=8)
            accs.append(accuracy(model, test_images, test_labels))
            print(f"  seed {seed:>4}: {accs[-1]:.2%}  ({seconds:.0f} s)")
        print(f"  mean over {len(accs)} seeds: {sum(accs) / len(accs):.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
