"""What a hand-in earns, decided in the grader's process and never in the kernel. nbgrader's
steps of autograde and feedback that the course adds: test cells restored from the gradebook
(`overwrite`: ``OverwriteCells``), each test cell's records compared with the solution's and
its outputs replaced by one sentence (`judge`: ``JudgeRecords``, ``verdict``; `comparison`:
``first_difference``), the values that sentence may show (`shown_values`, `check_source`,
`template_match`, and PyTorch's known error messages: `torch_errors` with its JSON), the
feedback page (`feedback`: ``TemplateFeedback``, ``CachedHTMLExporter``) and output to stderr
that never costs points (`stderr`: ``teach_validate``). Imports the formats and, where a
plain ``nbgrader autograde`` finds no reference yet, the sandbox's reference run."""

__all__ = [
    "check_source",
    "comparison",
    "feedback",
    "judge",
    "overwrite",
    "shown_values",
    "stderr",
    "template_match",
    "torch_errors",
]
