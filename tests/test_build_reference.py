"""Reference-making (graders/build_reference.py): the solution's records are kept, and made
again when what records them changes."""


def test_the_reference_is_made_again_when_the_recorder_changes(tmp_path, monkeypatch):
    """The cached reference is stale when graders/kernel/ changes (how values are recorded)."""
    from graders import build_reference

    kernel = tmp_path / "kernel"
    kernel.mkdir()
    (kernel / "grader_observe.py").write_text("# version 1\n")
    monkeypatch.setattr(build_reference, "KERNEL_SIDE", kernel)
    runs = []
    monkeypatch.setattr(
        build_reference,
        "reference_observations",
        lambda solution, threads: runs.append(1) or {"t": []},
    )
    solution, cache = tmp_path / "lab.ipynb", tmp_path / "reference" / "lab.json"
    solution.write_text("{}")
    for _ in range(2):
        assert build_reference.cached_reference(solution, cache) == {"t": []}
    assert len(runs) == 1
    (kernel / "grader_observe.py").write_text("# version 2\n")
    build_reference.cached_reference(solution, cache)
    assert len(runs) == 2
