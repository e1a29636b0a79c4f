"""Where notebooks run under grading conditions. A hand-in's kernel runs in a bubblewrap
sandbox, an allow-list with caps: nbgrader's Execute step with per-lab time budgets
(`sandbox`: ``SandboxedExecute``), the kernels' manager and the settings a class run gives it
(`sandbox_kernel`: ``SandboxKernelManager``, ``Settings``), the sandbox's arguments and the
kernel side's folder (`sandbox_argv`: ``kernel_argv``, ``KERNEL_SIDE``), the host's side of it:
cgroups, tmpfs, dead kernels (`sandbox_host`), kernels forked from a warm process
(`zygote`: ``for_folders``) and a cap on what a graded notebook may print (`limits`:
``CapOutputSize``). The instructor's solution runs here too, under the same conditions, for
the reference records and cell times the judge and the budgets read (`build_reference`:
``cached_reference``, ``prepare_references``). Imports the formats and the course's settings
only; the code that runs inside the kernel is graders/kernel/."""

__all__ = [
    "build_reference",
    "limits",
    "sandbox",
    "sandbox_argv",
    "sandbox_host",
    "sandbox_kernel",
    "zygote",
]
