"""Tree-LSTM on ListOps-style trees: recursive versus level-batched training throughput.

Self-contained (it duplicates the model code of solutions/lab07_tree_lstm, it does not import
the notebook). Runs on CPU.

    python benchmarks/tree_lstm.py              # throughput, batch sizes 1, 32, 128, and ratios
    python benchmarks/tree_lstm.py --train      # train both models, print test accuracy

The throughput is training throughput: forward, backward and an Adam step, in trees per second,
measured over a fixed wall-clock window after one warm-up step.
"""

from __future__ import annotations

import argparse
import os
import random
import time

import torch
from torch import nn
from torch.nn import functional as F

OPS = ("MIN", "MAX", "MED", "SUM")
VOCAB = [str(d) for d in range(10)] + list(OPS)
TOKEN = {t: i for i, t in enumerate(VOCAB)}


# ---------------------------------------------------------------- data
def make_tree(rng, max_depth=4, max_args=3, p_subtree=0.3, depth=1):
    op = rng.choice(OPS)
    args = []
    for _ in range(rng.randint(2, max_args)):
        if depth < max_depth and rng.random() < p_subtree:
            args.append(make_tree(rng, max_depth, max_args, p_subtree, depth + 1))
        else:
            args.append(rng.randint(0, 9))
    return (op, *args)


def evaluate(tree):
    if isinstance(tree, int):
        return tree
    op, *args = tree
    values = sorted(evaluate(a) for a in args)
    if op == "MIN":
        return values[0]
    if op == "MAX":
        return values[-1]
    if op == "MED":
        return values[(len(values) - 1) // 2]
    return sum(values) % 10


def to_string(tree):
    if isinstance(tree, int):
        return str(tree)
    op, *args = tree
    return "[" + op + " " + " ".join(to_string(a) for a in args) + " ]"


def make_dataset(n, seed, **shape):
    rng = random.Random(seed)
    trees = [make_tree(rng, **shape) for _ in range(n)]
    return trees, torch.tensor([evaluate(t) for t in trees])


def flatten(trees):
    """Post-order node table of a batch: tokens, children (global ids) and root ids."""
    tokens, children, roots = [], [], []

    def visit(tree):
        if isinstance(tree, int):
            tokens.append(tree)
            children.append([])
        else:
            op, *args = tree
            kids = [visit(a) for a in args]
            tokens.append(TOKEN[op])
            children.append(kids)
        return len(tokens) - 1

    for tree in trees:
        roots.append(visit(tree))
    return tokens, children, roots


# ---------------------------------------------------------------- model
class ChildSumTreeLSTMCell(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.W = nn.Linear(input_size, 4 * hidden_size)
        self.U_iou = nn.Linear(hidden_size, 3 * hidden_size, bias=False)
        self.U_f = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x, child_h, child_c, parent):
        H = self.hidden_size
        n = x.shape[0]
        wx = self.W(x)
        h_sum = x.new_zeros(n, H).index_add(0, parent, child_h)
        i, o, u = (wx[:, : 3 * H] + self.U_iou(h_sum)).chunk(3, dim=1)
        f = torch.sigmoid(wx[parent, 3 * H :] + self.U_f(child_h))
        c = torch.sigmoid(i) * torch.tanh(u) + x.new_zeros(n, H).index_add(0, parent, f * child_c)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c


class TreeLSTM(nn.Module):
    def __init__(self, hidden_size=128, embed_size=32):
        super().__init__()
        self.embed = nn.Embedding(len(VOCAB), embed_size)
        self.cell = ChildSumTreeLSTMCell(embed_size, hidden_size)
        self.out = nn.Linear(hidden_size, 10)
        self.hidden_size = hidden_size


def encode_recursive(model, tree):
    """One cell call per node, children first."""
    if isinstance(tree, int):
        x = model.embed(torch.tensor([tree]))
        empty = x.new_zeros(0, model.hidden_size)
        return model.cell(x, empty, empty, torch.zeros(0, dtype=torch.long))
    op, *args = tree
    states = [encode_recursive(model, a) for a in args]
    child_h = torch.cat([h for h, _ in states])
    child_c = torch.cat([c for _, c in states])
    x = model.embed(torch.tensor([TOKEN[op]]))
    return model.cell(x, child_h, child_c, torch.zeros(len(args), dtype=torch.long))


def encode_batched(model, trees):
    """One cell call per height: every node of height k in the batch in one call."""
    tokens, children, roots = flatten(trees)
    height = []
    for kids in children:  # post-order: children are always listed before their parent
        height.append(1 + max((height[k] for k in kids), default=0))
    levels = [[] for _ in range(max(height))]
    for node, k in enumerate(height):
        levels[k - 1].append(node)
    order = [node for level in levels for node in level]
    position = [0] * len(order)
    for pos, node in enumerate(order):
        position[node] = pos
    x_all = model.embed(torch.tensor([tokens[n] for n in order]))
    hs, cs = [], []
    start = 0
    for level in levels:
        kids = [position[k] for n in level for k in children[n]]
        parent = [j for j, n in enumerate(level) for _ in children[n]]
        kids = torch.tensor(kids, dtype=torch.long)
        if hs:
            h_done, c_done = torch.cat(hs), torch.cat(cs)
            child_h, child_c = h_done[kids], c_done[kids]
        else:
            child_h = child_c = x_all.new_zeros(0, model.hidden_size)
        h, c = model.cell(
            x_all[start : start + len(level)],
            child_h,
            child_c,
            torch.tensor(parent, dtype=torch.long),
        )
        hs.append(h)
        cs.append(c)
        start += len(level)
    return torch.cat(hs)[[position[r] for r in roots]]


def encode_recursive_batch(model, trees):
    return torch.cat([encode_recursive(model, t)[0] for t in trees])


# ---------------------------------------------------------------- LSTM baseline
class SeqLSTM(nn.Module):
    def __init__(self, hidden_size=128, embed_size=32):
        super().__init__()
        self.vocab = VOCAB + ["[", "]"]
        self.index = {t: i + 1 for i, t in enumerate(self.vocab)}  # 0 is padding
        self.embed = nn.Embedding(len(self.vocab) + 1, embed_size, padding_idx=0)
        self.lstm = nn.LSTM(embed_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, 10)

    def forward(self, trees):
        seqs = [[self.index[t] for t in self.split(tree)] for tree in trees]
        lengths = torch.tensor([len(s) for s in seqs])
        padded = torch.zeros(len(seqs), int(lengths.max()), dtype=torch.long)
        for i, s in enumerate(seqs):
            padded[i, : len(s)] = torch.tensor(s)
        packed = nn.utils.rnn.pack_padded_sequence(
            self.embed(padded), lengths, batch_first=True, enforce_sorted=False
        )
        _, (h, _) = self.lstm(packed)
        return self.out(h[-1])

    @staticmethod
    def split(tree):
        tokens = []
        for t in to_string(tree).split():
            if t.startswith("["):
                tokens += ["[", t[1:]]
            else:
                tokens.append(t)
        return tokens


# ---------------------------------------------------------------- training
def accuracy(logits_fn, trees, labels, batch=256):
    with torch.no_grad():
        hits = 0
        for s in range(0, len(trees), batch):
            hits += (
                (logits_fn(trees[s : s + batch]).argmax(1) == labels[s : s + batch]).sum().item()
            )
    return hits / len(trees)


def fresh_batches(seed, held_out, batch):
    """Endless fresh training batches; trees whose text is in `held_out` are skipped."""
    rng = random.Random(seed)
    while True:
        trees = []
        while len(trees) < batch:
            tree = make_tree(rng)
            if to_string(tree) not in held_out:
                trees.append(tree)
        yield trees, torch.tensor([evaluate(t) for t in trees])


def train(model, logits_fn, batches, seconds, lr=3e-3, log=None):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    start, steps, seen = time.perf_counter(), 0, 0
    while (elapsed := time.perf_counter() - start) < seconds:
        for group in opt.param_groups:  # linear decay to lr / 20 over the time budget
            group["lr"] = lr * (1 - 0.95 * elapsed / seconds)
        trees, labels = next(batches)
        loss = F.cross_entropy(logits_fn(trees), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        seen += len(trees)
        if log and steps % log == 0:
            print(f"  step {steps:5d}  {time.perf_counter() - start:6.1f}s  loss {loss.item():.3f}")
    return steps, seen, time.perf_counter() - start


def throughput(mode, batch, trees, labels, seconds):
    torch.manual_seed(0)
    model = TreeLSTM()
    encode = encode_batched if mode == "batched" else encode_recursive_batch
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(i):
        chunk = [trees[(i + j) % len(trees)] for j in range(batch)]
        y = torch.tensor([labels[(i + j) % len(trees)] for j in range(batch)])
        loss = F.cross_entropy(model.out(encode(model, chunk)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    step(0)  # warm-up
    start, done, i = time.perf_counter(), 0, batch
    while time.perf_counter() - start < seconds:
        step(i)
        i += batch
        done += batch
    return done / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", action="store_true", help="train both models, report accuracy")
    parser.add_argument("--seconds", type=float, default=4.0, help="window per throughput run")
    parser.add_argument("--tree-seconds", type=float, default=180.0)
    parser.add_argument("--lstm-seconds", type=float, default=120.0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (the ops are tiny: 1 is best)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")

    if not args.train:
        trees, labels = make_dataset(2048, seed=1)
        labels = labels.tolist()
        nodes = sum(len(flatten([t])[0]) for t in trees) / len(trees)
        print(f"ListOps trees: depth <= 4, 2-3 arguments, {nodes:.1f} nodes per tree on average")
        print(f"{'batch':>5} {'recursive trees/s':>18} {'level-batched trees/s':>22} {'ratio':>6}")
        for batch in (1, 32, 128):
            rec = throughput("recursive", batch, trees, labels, args.seconds)
            bat = throughput("batched", batch, trees, labels, args.seconds)
            print(f"{batch:5d} {rec:18.1f} {bat:22.1f} {bat / rec:6.1f}x")
        return

    torch.manual_seed(0)
    test_trees, test_labels = make_dataset(2000, seed=2)
    held_out = {to_string(t) for t in test_trees}
    batches = fresh_batches(1, held_out, 128)
    model = TreeLSTM()
    steps, seen, took = train(
        model, lambda ts: model.out(encode_batched(model, ts)), batches, args.tree_seconds, log=250
    )
    acc = accuracy(lambda ts: model.out(encode_batched(model, ts)), test_trees, test_labels)
    print(f"Tree-LSTM: {steps} steps, {seen} trees in {took:.0f}s, test accuracy {acc:.1%}")
    lstm = SeqLSTM()
    steps, seen, took = train(lstm, lstm, batches, args.lstm_seconds, log=250)
    acc = accuracy(lstm, test_trees, test_labels)
    print(f"LSTM baseline: {steps} steps, {seen} trees in {took:.0f}s, test accuracy {acc:.1%}")


if __name__ == "__main__":
    main()
