"""``clustersim calibrate profile TRACE.json [--scenario RUN.yaml] -o my_gpu.yaml``: a GPU
file fitted to the matrix-product kernel times of a PyTorch profiler trace
(:mod:`clustersim.calibrate.trace`, :mod:`clustersim.calibrate.kernel_fit`) and, given the
run the trace is a step of, to its memory-bound kernels' time
(:mod:`clustersim.calibrate.memory_fit`) and its fused attention kernels' time
(:mod:`clustersim.calibrate.attention_fit`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import Problem, ScenarioError
from . import calibrate as shared

if TYPE_CHECKING:
    from ..calibrate.attention_fit import AttentionFit
    from ..calibrate.kernel_fit import KernelFit
    from ..calibrate.memory_fit import MemoryFit
    from ..calibrate.trace import Profile


class ProfileSource(shared.CalibrationSource):
    name = "profile"
    help = "a GPU file from a PyTorch profiler trace of a training step (Kineto JSON)"
    description = (
        "Read a PyTorch profiler trace of a training step on one GPU (the Chrome-trace JSON "
        "torch.profiler exports, or .json.gz; recorded with record_shapes=True), take its "
        "matrix products (aten::mm, addmm, bmm, baddbmm, linear, matmul, _scaled_mm) with "
        "their shapes, precisions and GPU kernel times, fit the GPU's matrix-product curve "
        "eff(F) = e_max F / (F + F_half) per precision at the --base GPU's peak, and write a "
        "GPU file in the catalog's format: the base's numbers with the fitted curves, each "
        "citing the trace and the shapes it was fitted to. Prints every shape's measured "
        "kernel time against the calibrated one (the roofline's, as a simulated step prices "
        "it: the slower of the curve and the shape's bytes over the memory bandwidth; shapes "
        "memory-bound at the base curve are left out of the fit and reported apart), the "
        "error on the shapes held out of the fit "
        "and the trace's other GPU work (attention, element-wise, communication, optimizer), "
        "and writes a plot of measured and fitted efficiency over FLOPs. With --scenario "
        "RUN.yaml, the run the trace is a step of, it also fits compute.memory_efficiency: "
        "the run's memory-bound operations (norms, softmax, activations, cross-entropy) of "
        "its micro-batches per GPU, times the steps the trace marks (ProfilerStep#N; else "
        "one), priced at the full memory bandwidth, over the measured time of the trace's "
        "element-wise, norm and reduction kernels (capped at 1) -- a trace without backward "
        "work (no autograd ops) whose products are within 1.25 x the FLOPs of the run's "
        "forward passes is fitted to their operations alone (printed); and, when the run's "
        "attention is fused (flash_attention), compute.attention: the peak and kernel time "
        "the base prices its attention core at (fp8 runs: the 16-bit ones) and the e_max at "
        "which the run's forward fused attention kernels take the measured time of the "
        "trace's forward attention kernels (flash, fmha, attention in the name; bwd, bprop, "
        "backward, cutlassB mark the backward ones, which are reported, not fitted). No fused "
        "attention in the run or in the trace: a printed line says so, attention is not "
        "fitted. Exit 2 for "
        "a file that is not a Kineto trace, a trace without GPU kernels or without shapes, "
        "one of a single product shape, an unknown --base, a --scenario the trace cannot be "
        "a step of (no transformer, other GPUs than --base, matrix-product FLOPs more than 2 x "
        "off those steps'), a --stage the run does not have. With pipeline parallelism the "
        "trace is one stage's GPU: --stage N names it, else the stage whose matrix products "
        "are nearest the trace's is taken (printed)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        shared.file_arguments(
            parser,
            "GPU",
            "GPU",
            "catalog GPU (clustersim list gpus) or GPU file whose peaks the curves are "
            "fitted at and whose other numbers the file keeps (default: the catalog GPU the "
            "trace's deviceProperties name)",
            "shapes left out of the fit to judge it, per precision by FLOPs: default "
            "(every other shape and the largest), none, a fraction from 0 to 1, or a FLOP "
            "range MIN:MAX such as 1GFLOP:1TFLOP",
        )
        parser.add_argument(
            "--scenario",
            metavar="RUN.yaml",
            help="the run the trace is a step of (a transformer trained by the pipeline "
            "strategy, on the --base GPU): fits compute.memory_efficiency to the "
            "trace's element-wise, norm and reduction kernels, and compute.attention to its "
            "forward fused attention kernels when the run's attention is fused (default: "
            "neither fitted, the base's kept)",
        )
        parser.add_argument(
            "--stage",
            metavar="N",
            type=int,
            help="with --scenario of a pipeline-parallel run: the pipeline stage (0-based) "
            "whose GPU the trace is of (default: the stage whose matrix-product FLOPs are "
            "nearest the trace's, printed)",
        )
        shared.plot_arguments(parser, "measured and fitted efficiency", "GPU")
        parser.add_argument("trace", metavar="TRACE", help="the trace (.json or .json.gz)")

    def run(self, args: argparse.Namespace) -> int:
        from ..calibrate.attention_fit import attention_core, fit_attention
        from ..calibrate.gpu_file import gpu_file_text
        from ..calibrate.kernel_fit import fit_profile
        from ..calibrate.kernel_report import (
            attention_lines,
            memory_lines,
            plot_figure,
            summary_lines,
            table_lines,
        )
        from ..calibrate.memory_fit import fit_memory, memory_step
        from ..calibrate.run_step import chosen_step, run_steps, traced_passes
        from ..calibrate.trace import read_profile

        output, plot = shared.checked_outputs(args)
        if args.stage is not None and args.scenario is None:
            raise ScenarioError(
                Problem("--stage", "a stage without a run", "--stage N with --scenario RUN.yaml")
            )
        profile = read_profile(args.trace)
        base = shared.base_preset(args.base or _inferred_base(profile), "gpu")
        fit = fit_profile(profile, base, args.hold_out)
        memory = attention = None
        if args.scenario is not None:
            steps = run_steps(args.scenario, base)
            run = traced_passes(chosen_step(steps, profile, args.stage, args.scenario), profile)
            memory = fit_memory(profile, memory_step(run, base))
            core = attention_core(run, base)
            attention = fit_attention(profile, core, memory.memory_efficiency)
        name = args.name or output.stem
        header = _header(fit, args, output, memory, attention)
        text = gpu_file_text(fit, name, header, memory, attention)
        title = f"{name}: measured and fitted matrix-product efficiency ({base.name} peaks)"
        lines = table_lines(fit) + summary_lines(fit) + memory_lines(memory)
        lines += attention_lines(attention)
        return shared.write_outputs(
            output, text, lines, plot_figure(fit, title), plot, "cluster.node.gpu"
        )


def _inferred_base(profile: Profile) -> str:
    from ..calibrate.base import gpu_of_device

    device = profile.device
    found = gpu_of_device(device, profile.memory_bytes) if device else None
    if found is None:
        said = f"names a GPU the catalog does not know ({device})" if device else "names no GPU"
        raise ScenarioError(
            Problem(
                "--base",
                f"the trace {said}",
                "--base GPU (clustersim list gpus) or --base ./my_gpu.yaml",
            ),
            profile.file,
        )
    return found


def _header(
    fit: KernelFit,
    args: argparse.Namespace,
    output: Path,
    memory: MemoryFit | None,
    attention: AttentionFit | None,
) -> list[str]:
    from ..calibrate.node_file import error_summary
    from ..version import __version__

    return [
        f"{output.name}: calibrated by `clustersim calibrate profile` (clustersim "
        f"{__version__}) on the base GPU {fit.base.name},",
        f"its matrix-product curves fitted to the kernel times of {fit.profile.file}.",
        f"Calibration shapes: {error_summary(fit.errors(False))}.",
        f"Held-out shapes ({args.hold_out}): {error_summary(fit.errors(True))}.",
        *(
            [
                "Memory-bound shapes (priced by their bytes, not fitted): "
                f"{error_summary(fit.memory_errors())}."
            ]
            if any(fit.memory_bound)
            else []
        ),
        "The curves time each kernel alone; efficiency, the share a whole step keeps, is the "
        "base's.",
        (
            f"Memory efficiency {memory.memory_efficiency:.6g}: {args.scenario}'s memory-bound "
            f"work at the full bandwidth over the trace's element-wise kernels' time."
            if memory is not None
            else "Memory efficiency: the base's (fitted only with --scenario RUN.yaml)."
        ),
        (
            f"Attention e_max {attention.e_max:.6g}: the e_max at which {args.scenario}'s "
            "fused attention kernels take the trace's forward attention kernels' time."
            if attention is not None and attention.fitted
            else "Attention: the base's (fitted only with --scenario RUN.yaml of fused "
            "attention and a trace of its kernels)."
        ),
        f"Use it: cluster.node.gpu: {{preset: ./{output.name}}}",
        "",
    ]
