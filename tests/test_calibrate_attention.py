"""The fit of the attention core's ``compute.attention`` by ``clustersim calibrate profile
--scenario``.

Traces are generated from a run's own operations (``clustersim.model.operators``): its
products and memory-bound kernels as tests/test_calibrate_memory.py times them, each fused
attention kernel as a ``flash_fwd_kernel`` (its backward a ``flash_bwd_*`` kernel) of a
known time.  A forward kernel of W hardware FLOPs on the H100's bf16 curve takes
W / (989 TFLOP/s x 794.5 / 989) + 6.45 us; timed at that over f (f = 0.5, 0.7, 0.9) the fit
gives f back as the base rate over the measured, and the fitted curve the measured time;
timed on a ceiling e with the same fixed cost it gives e back.  The GPU file written, used
in a scenario, prices the run's fused attention kernels at the trace's time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.api import prepare
from clustersim.calibrate.attention_fit import BACKWARD_KERNEL, attention_core, fit_attention
from clustersim.calibrate.run_step import run_step
from clustersim.calibrate.trace import read_profile
from clustersim.cli import main
from clustersim.compute import Operation
from clustersim.hardware import find
from clustersim.model.operators import FLASH
from clustersim.strategies.kernel_times import DeviceModels

from .test_calibrate_memory import micro_batch_ops, run_doc, step_trace, write_run
from .test_calibrate_profile import GPU, event, write

H100 = find("h100-sxm", "gpu")
BF16_PEAK, FP8_PEAK = 989e12, 1979e12
"""The H100 SXM's dense bf16 and fp8 peaks, FLOP/s (its catalog file)."""
BF16_E_MAX = 794.5 / 989
"""Its bf16 curve's ceiling: mamf 794.5 over the 989 TFLOP/s peak."""
KERNEL_TIME = 6.45e-6
"""Its bf16 curve's fixed cost, s."""
EFFICIENCY = 0.68
"""Its efficiency (the share a whole step keeps)."""
FACTORS = (0.5, 0.7, 0.9)
"""Base rate over measured the traces are generated at."""
FORWARD, BACKWARD = "flash_fwd_kernel", "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel"
"""FlashAttention-2's kernel names."""


def flash_doc(**training: Any) -> dict[str, Any]:
    """test_calibrate_memory's run (2 blocks, hidden 1024, 8 heads, tp 2 on H100s, 2
    micro-batches of 2 per GPU) with fused attention over 2048 tokens."""
    doc = run_doc(**training)
    doc["model"]["transformer"] |= {"seq": 2048, "flash_attention": True}
    return doc


def base_seconds(op: Operation, peak: float = BF16_PEAK, e_max: float = BF16_E_MAX) -> float:
    """A fused kernel alone on a curve of ceiling ``e_max`` and the H100's fixed cost, s."""
    return op.flops * op.work / (peak * e_max) + KERNEL_TIME


def attention_trace(
    ops: list[Operation],
    micro_batches: int,
    forward_s: Any,
    steps: int = 1,
    names: tuple[str, str] = (FORWARD, BACKWARD),
) -> dict:
    """test_calibrate_memory's trace of ``ops`` (its products, and its element-wise kernels
    at 0.6 of the bandwidth) without the helper's attention kernel, and one kernel per fused
    attention operation and micro-batch: a forward named ``names[0]`` of ``forward_s(op)``
    seconds, a backward named ``names[1]`` of 3 x the forward's base time."""
    others = [op for op in ops if not op.name.startswith(FLASH)]
    doc = step_trace(others, micro_batches, 0.6, steps)
    events = [e for e in doc["traceEvents"] if e["name"] != FORWARD]
    ts = max(e["ts"] + e["dur"] for e in events) + 1
    for _ in range(steps * micro_batches):
        for op in ops:
            if op.name == FLASH:
                name, dur = names[0], forward_s(op) * 1e6
            elif op.name == FLASH + ".backward":
                name, dur = names[1], 3 * base_seconds(op) * 1e6
            else:
                continue
            events.append(event("kernel", name, GPU, ts, dur, device=0, correlation=1))
            ts += dur + 1
    return doc | {"traceEvents": events}


def flash_ops(ops: list[Operation]) -> list[Operation]:
    return [op for op in ops if op.name == FLASH]


def fitted(tmp_path: Path, doc: dict[str, Any], forward_s: Any, steps: int = 1, base=H100):
    """The attention fit of a trace of ``doc``'s run (its kernels as the fit lists them,
    recomputation included) whose forward kernels take ``forward_s(op)``."""
    run = run_step(str(write_run(tmp_path, doc)), base)
    trace = attention_trace(list(run.operations), 2, forward_s, steps)
    profile = read_profile(write(tmp_path / "step.json", trace))
    return fit_attention(profile, attention_core(run, base), 1.0)


# -- the fit ------------------------------------------------------------------------------


@pytest.mark.parametrize("factor", FACTORS)
def test_kernels_slower_than_the_curve_give_the_factor_and_the_time_back(
    factor: float, tmp_path: Path
) -> None:
    """Forward kernels timed at the base curve's time over f: the base rate over the
    measured is f (1e-5), the fitted curve prices them at the measured time (1e-5), and
    e_max is sum W / (peak (measured - n x 6.45 us)), every kernel compute-bound."""
    fit = fitted(tmp_path, flash_doc(), lambda op: base_seconds(op) / factor)
    ops = flash_ops(micro_batch_ops(tmp_path / "run.yaml"))
    assert fit.fitted and fit.forward_kernels == 2 * len(ops) == 4
    predicted = 2 * sum(base_seconds(op) for op in ops)
    assert fit.predicted_s == pytest.approx(predicted, rel=1e-12)
    assert fit.measured_s == pytest.approx(predicted / factor, rel=1e-12)
    assert fit.factor == pytest.approx(factor, rel=1e-5)
    assert fit.fitted_s == pytest.approx(fit.measured_s, rel=1e-5)
    work = 2 * sum(op.flops * op.work for op in ops)
    closed = work / (BF16_PEAK * (fit.measured_s - 4 * KERNEL_TIME))
    assert fit.e_max == pytest.approx(closed, rel=1e-5)
    assert fit.core.kernel_time_s == pytest.approx(KERNEL_TIME, rel=1e-12)
    assert fit.core.origin == "bf16" and fit.core.peak_flops == BF16_PEAK


@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize("steps", [1, 2])
def test_kernels_timed_on_a_known_ceiling_give_it_back(
    recompute: str, steps: int, tmp_path: Path
) -> None:
    """Forward kernels timed at W / (peak x 0.55) + 6.45 us, one step or two marked, with
    full recomputation (the forward kernel runs again in the backward) or none: e_max 0.55
    back (1e-5), the run's forward kernels counted per micro-batch and step."""
    doc = flash_doc(recompute=recompute)
    fit = fitted(tmp_path, doc, lambda op: base_seconds(op, e_max=0.55), steps)
    core = fit.core
    assert len(core.forward) == (4 if recompute == "full" else 2)
    assert fit.forward_kernels == 2 * steps * len(core.forward)  # 2 micro-batches per step
    assert fit.e_max == pytest.approx(0.55, rel=1e-5)
    assert fit.steps == steps


def test_the_backward_kernels_are_measured_not_fitted(tmp_path: Path) -> None:
    """The backward kernels (3 x their base time) are kept out of the measured time and
    predicted on the base's products' curve: 1/3 of the measured."""
    fit = fitted(tmp_path, flash_doc(), lambda op: base_seconds(op) / 0.7)
    assert fit.backward_kernels == 4
    assert fit.backward_predicted_s == pytest.approx(fit.backward_measured_s / 3, rel=1e-9)


def test_kernels_faster_than_the_peak_allows_are_capped_at_1(tmp_path: Path) -> None:
    fit = fitted(tmp_path, flash_doc(), lambda op: KERNEL_TIME * 1.01)
    assert fit.e_max == 1.0 and any("capped at 1" in note for note in fit.notes)


def test_fp8_runs_fit_the_16_bit_rate(tmp_path: Path) -> None:
    """fp8 training prices the fused kernel at the bf16 peak and curve (the products at the
    fp8 ones): the prediction is the bf16 curve's, e_max 0.6 comes back on it, and the
    backward (a product to the model) is priced at the fp8 peak."""
    fit = fitted(tmp_path, flash_doc(precision="fp8"), lambda op: base_seconds(op, e_max=0.6))
    ops = flash_ops(micro_batch_ops(tmp_path / "run.yaml"))
    assert fit.core.origin == "bf16" and fit.core.peak_flops == BF16_PEAK
    assert fit.predicted_s == pytest.approx(2 * sum(base_seconds(op) for op in ops), rel=1e-12)
    assert fit.e_max == pytest.approx(0.6, rel=1e-5)
    assert fit.core.model.peak_flops == FP8_PEAK


def test_backward_kernel_names() -> None:
    """FlashAttention, cuDNN and PyTorch's memory-efficient kernels: backward ones marked."""
    backward = [
        "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
        "flash_bwd_dot_do_o_kernel",
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x64x128",
        "fmha_cutlassB_bf16_aligned_64x64_k64_sm80",
        "void flash::FlashAttnBwdSm90<...>",
    ]
    forward = [
        "flash_fwd_kernel",
        "flash_fwd_splitkv_kernel",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128",
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80",
    ]
    assert all(BACKWARD_KERNEL.search(name) for name in backward)
    assert not any(BACKWARD_KERNEL.search(name) for name in forward)


# -- the command and the round trip ---------------------------------------------------------


def calibrate(tmp_path: Path, run: Path, trace: dict, capsys, *argv: str) -> tuple[Path, str]:
    step = write(tmp_path / "step.json", trace)
    out = tmp_path / "my_gpu.yaml"
    capsys.readouterr()
    command = ["calibrate", "profile", str(step), "--scenario", str(run), "-o", str(out)]
    assert main([*command, *argv]) == 0
    return out, capsys.readouterr().out


def device_model(tmp_path: Path, doc: dict[str, Any]):
    """The compute model of the first worker of ``doc`` with the written GPU file."""
    doc["cluster"]["node"]["gpu"] = {"preset": "./my_gpu.yaml"}
    prepared = prepare(write_run(tmp_path, doc, "again.yaml"))
    device = prepared.topology.devices[prepared.strategy.placement.workers[0]]
    return DeviceModels(tmp_path).of(device)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_round_trip_the_gpu_file_prices_the_fused_kernels_at_the_traces_time(
    precision: str, tmp_path: Path, capsys
) -> None:
    """calibrate profile --scenario writes compute.attention: the bf16 peak (989TFLOPS,
    citing the catalog's source), the fitted e_max (profile-fit, a note naming the trace and
    its 4 forward kernels) and the bf16 kernel time (6.45us, kept); the file in the run
    (gpu: {preset: ./my_gpu.yaml}) prices its fused kernels, each alone (x efficiency
    0.68), at the trace's measured time (1e-5), at bf16 and at fp8."""
    run = write_run(tmp_path, flash_doc(precision=precision))
    ops = micro_batch_ops(run)
    trace = attention_trace(ops, 2, lambda op: base_seconds(op) / 0.7)
    out, printed = calibrate(tmp_path, run, trace, capsys)
    assert "# fused attention: 4 forward kernels" in printed
    assert "predicted at the base's e_max 0.803337" in printed
    assert "base curve's rate over the measured: 0.7" in printed
    attention = yaml.safe_load(out.read_text())["spec"]["compute"]["attention"]
    assert attention["peak"]["value"] == "989TFLOPS"
    assert attention["peak"]["source"] == "bekman-tflops"
    e_max = attention["curve"]["e_max"]
    assert e_max["source"] == "profile-fit" and "step.json: 4 forward" in e_max["note"]
    kept = attention["curve"]["kernel_time"]
    assert kept["value"] == "6.45us" and kept["source"] == "xla-matmul"
    model = device_model(tmp_path, flash_doc(precision=precision))
    assert model.attention is not None and model.attention.peak_flops == BF16_PEAK
    measured = sum(s for name, s in read_profile(tmp_path / "step.json").attention if "fwd" in name)
    priced = 2 * model.seconds(flash_ops(ops)) * EFFICIENCY
    assert priced == pytest.approx(measured, rel=1e-5)


def test_a_fitted_file_as_base_predicts_a_second_run(tmp_path: Path, capsys) -> None:
    """The file fitted on micro-batches of 2 (kernels on a ceiling of 0.55), as --base of a
    trace of micro-batches of 1 timed on the same ceiling, prices that trace's forward
    kernels within 0.1% (printed +0.0%): its compute.attention is the base's rate."""
    first = write_run(tmp_path, flash_doc())
    trace = attention_trace(micro_batch_ops(first), 2, lambda op: base_seconds(op, e_max=0.55))
    out, _ = calibrate(tmp_path, first, trace, capsys)
    doc = flash_doc(global_batch=2, micro_batch=1)
    doc["cluster"]["node"]["gpu"] = {"preset": "./my_gpu.yaml"}
    second = write_run(tmp_path, doc, "second.yaml")
    other = attention_trace(micro_batch_ops(second), 2, lambda op: base_seconds(op, e_max=0.55))
    step = write(tmp_path / "other.json", other)
    argv = ["--base", str(out), "--scenario", str(second), "-o", str(tmp_path / "again.yaml")]
    assert main(["calibrate", "profile", str(step), *argv]) == 0
    printed = capsys.readouterr().out
    assert "at the compute.attention peak 989 TFLOP/s" in printed
    row = next(line for line in printed.splitlines() if "the base's e_max 0.55" in line)
    assert row.endswith("+0.0%")


def _attention_line(printed: str) -> str:
    return next(line for line in printed.splitlines() if line.startswith("attention:"))


def test_without_scenario_one_line_says_what_attention_needs(tmp_path: Path, capsys) -> None:
    """No --scenario: the file is the products' fit alone (no compute.attention), one
    printed line says why."""
    run = write_run(tmp_path, flash_doc())
    trace = attention_trace(micro_batch_ops(run), 2, lambda op: base_seconds(op) / 0.7)
    step = write(tmp_path / "step.json", trace)
    out = tmp_path / "my_gpu.yaml"
    assert main(["calibrate", "profile", str(step), "-o", str(out)]) == 0
    assert _attention_line(capsys.readouterr().out) == (
        "attention: not fitted (needs --scenario RUN.yaml, the run the trace is a step of); "
        "the base GPU's is kept"
    )
    assert "attention" not in yaml.safe_load(out.read_text())["spec"]["compute"]


def test_an_unfused_run_leaves_attention_unfitted(tmp_path: Path, capsys) -> None:
    """The run's attention is not fused, the trace has the helper's fused kernel: a line
    says so, no compute.attention, the memory efficiency still fitted."""
    run = write_run(tmp_path, run_doc())
    out, printed = calibrate(tmp_path, run, step_trace(micro_batch_ops(run), 2, 0.6, 1), capsys)
    line = _attention_line(printed)
    assert "the trace has 1 fused attention kernels but the run's attention is not fused" in line
    compute = yaml.safe_load(out.read_text())["spec"]["compute"]
    assert "attention" not in compute and "memory_efficiency" in compute


def test_a_trace_without_fused_kernels_leaves_attention_unfitted(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path, flash_doc())
    trace = attention_trace(micro_batch_ops(run), 2, lambda op: 1e-5)
    trace["traceEvents"] = [e for e in trace["traceEvents"] if "flash" not in e["name"]]
    out, printed = calibrate(tmp_path, run, trace, capsys)
    assert "has no fused attention kernels (flash, fmha or attention in the name)" in (
        _attention_line(printed)
    )
    assert "attention" not in yaml.safe_load(out.read_text())["spec"]["compute"]


def test_names_that_do_not_tell_the_backward_leave_attention_unfitted(
    tmp_path: Path, capsys
) -> None:
    run = write_run(tmp_path, flash_doc())
    names = ("flash_attn_kernel", "flash_attn_kernel")
    trace = attention_trace(micro_batch_ops(run), 2, base_seconds, names=names)
    out, printed = calibrate(tmp_path, run, trace, capsys)
    assert "none of the trace's 8 attention kernels is named as a backward one" in (
        _attention_line(printed)
    )
    assert "attention" not in yaml.safe_load(out.read_text())["spec"]["compute"]
