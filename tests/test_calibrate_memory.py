"""``compute.memory_efficiency`` and its fit by ``clustersim calibrate profile --scenario``.

The roofline prices a memory-bound kernel at bytes / (bandwidth x memory_efficiency), the
default 1 giving the numbers of before; a GPU file or a scenario giving a value outside
(0, 1] is refused (exit 2, the file and the key named).  The fit: traces generated from a
run's own operations (``clustersim.model.operators``), their element-wise kernels timed at
bytes / (bandwidth x e) for a known e, give e back; the GPU file written, used in a
scenario, prices the run's memory-bound work at the trace's time.  The trace generator is
tests/test_calibrate_profile.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.api import prepare
from clustersim.calibrate.kernel_fit import fit_profile
from clustersim.calibrate.memory_fit import fit_memory, scenario_step
from clustersim.calibrate.trace import ELEMENTWISE, read_profile
from clustersim.cli import main
from clustersim.compute import DEFAULT_CURVE, Operation, compute_model
from clustersim.errors import ScenarioError
from clustersim.hardware import find
from clustersim.model.operators import backward_operations, forward_operations
from clustersim.model.presets import build_model
from clustersim.scenario.loader import load_scenario
from clustersim.strategies.kernel_times import DeviceModels

from .test_calibrate_profile import CPU, GPU, event, kernel_us, product, trace, write

H100_BANDWIDTH = 3.35e12
"""The H100 SXM's memory bandwidth, B/s (its catalog file)."""
EFFICIENCIES = (0.3, 0.6, 0.9)
"""The memory efficiencies the traces are generated at."""
HELPER_KERNEL = "vectorized_elementwise_kernel<add>"
"""The element-wise kernel test_calibrate_profile's trace adds (taken out here)."""


def run_doc(**training: Any) -> dict[str, Any]:
    """A run of a 2-block transformer on 2 H100s (dgx-h100's GPU), tp 2: 2 micro-batches of
    2 sequences per GPU by default."""
    train = {"global_batch": 4, "micro_batch": 2, "iterations": 1, "precision": "bf16"}
    return {
        "name": "profiled",
        "cluster": {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": 1,
            "node": {"preset": "dgx-h100", "gpus": 2, "nics": 2},
        },
        "model": {
            "transformer": {"layers": 2, "hidden": 1024, "heads": 8, "seq": 512, "vocab": 32000}
        },
        "training": train | {"recompute": "none"} | training,
        "parallelism": {"tp": 2, "pp": 1},
        "pipeline": {"schedule": "1f1b"},
    }


def write_run(folder: Path, doc: dict[str, Any], name: str = "run.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def micro_batch_ops(path: Path) -> list[Operation]:
    """The forward and backward operations of one micro-batch on one GPU of the run at
    ``path``, listed from clustersim.model.operators (recompute none)."""
    scenario = load_scenario(path)
    model = build_model(scenario.model)
    b, tp = scenario.training.micro_batch, scenario.parallelism.tp
    ops: list[Operation] = []
    for layer in model.layers:
        forward = forward_operations(layer, model.transformer, b, tp)
        ops += forward + backward_operations(forward)
    return ops


def step_trace(ops: list[Operation], micro_batches: int, efficiency: float, steps: int) -> dict:
    """A trace of ``steps`` steps of ``micro_batches`` micro-batches of ``ops``: each
    product an aten::mm (aten::bmm with a batch) timed on test_calibrate_profile's curve,
    each memory-bound operation one element-wise kernel of bytes / (H100 bandwidth x
    ``efficiency``); the steps marked ProfilerStep#N when there are several."""
    products = [
        product(
            "aten::bmm" if op.batch > 1 else "aten::mm",
            [[op.batch, op.m, op.k], [op.batch, op.k, op.n]]
            if op.batch > 1
            else [[op.m, op.k], [op.k, op.n]],
            "c10::BFloat16",
            [kernel_us(op.m, op.n, op.k, op.batch)],
        )
        for _ in range(steps * micro_batches)
        for op in ops
        if op.m
    ]
    doc = trace(products)
    events = [e for e in doc["traceEvents"] if e["name"] != HELPER_KERNEL]
    ts = max(e["ts"] + e["dur"] for e in events) + 1
    for _ in range(steps * micro_batches):
        for op in ops:
            if op.flops == 0:
                dur = op.bytes / (H100_BANDWIDTH * efficiency) * 1e6
                name = f"vectorized_elementwise_kernel<{op.name}>"
                events.append(event("kernel", name, GPU, ts, dur, device=0, correlation=1))
                ts += dur + 1
    if steps > 1:
        events += [event("user_annotation", f"ProfilerStep#{i}", CPU, i, 1) for i in range(steps)]
    return doc | {"traceEvents": events}


def memory_bytes(ops: list[Operation]) -> float:
    return sum(op.bytes for op in ops if op.flops == 0)


# -- the key: the roofline, its default and its refusals ----------------------------------


def test_memory_bound_kernel_takes_bytes_over_bandwidth_times_memory_efficiency() -> None:
    """Default 1: exactly bytes / bandwidth (3 GB at 2 TB/s: 1.5 ms), a product exactly
    F / (peak x efficiency x eff(F)); memory_efficiency m divides the memory time by m and
    leaves the product's alone."""
    softmax = Operation("softmax", 0, 0, 0, 0, 0.0, 3e9)
    mm = Operation("fc1", 4096, 4096, 4096, 1, 2.0 * 4096**3, 3 * 2.0 * 4096**2)
    default = compute_model("roofline", 312e12, 0.8, 2e12)
    assert default.memory_efficiency == 1.0
    assert default.operation_seconds(softmax) == 1.5e-3
    product_s = 2.0 * 4096**3 / (312e12 * 0.8 * DEFAULT_CURVE(2.0 * 4096**3))
    assert default.operation_seconds(mm) == product_s
    for m in EFFICIENCIES:
        model = compute_model("roofline", 312e12, 0.8, 2e12, memory_efficiency=m)
        assert model.operation_seconds(softmax) == pytest.approx(1.5e-3 / m, rel=1e-12)
        assert model.operation_seconds(mm) == product_s


def test_a_scenario_without_the_key_prices_at_the_full_bandwidth(tmp_path: Path) -> None:
    """The catalog's H100 has no memory_efficiency: its device's model takes 1, so the run's
    memory-bound operations cost their bytes over 3.35 TB/s, as before the key."""
    prepared = prepare(write_run(tmp_path, run_doc()))
    device = prepared.topology.devices[prepared.strategy.placement.workers[0]]
    model = DeviceModels(tmp_path).of(device)
    assert model.memory_efficiency == 1.0 and model.bandwidth_Bps == H100_BANDWIDTH
    softmax = Operation("softmax", 0, 0, 0, 0, 0.0, 3.35e9)
    assert model.operation_seconds(softmax) == 1e-3


@pytest.mark.parametrize("value", [0, -0.5, 1.5, "fast", True])
def test_bad_memory_efficiency_in_a_gpu_file_exits_2_naming_file_and_key(
    value: Any, tmp_path: Path, capsys
) -> None:
    gpu = {"kind": "gpu", "name": "mine", "spec": {"compute": {"memory_efficiency": value}}}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(gpu))
    doc = run_doc()
    doc["cluster"]["node"]["gpu"] = {"preset": "./mine.yaml"}
    assert main(["validate", str(write_run(tmp_path, doc))]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "cluster.node.gpu.preset" in err and "mine.yaml" in err
    assert "compute.memory_efficiency" in err and "a number > 0 and <= 1" in err


@pytest.mark.parametrize("value", [0, 1.5, "fast"])
def test_bad_memory_efficiency_in_a_scenario_exits_2_at_its_key_path(
    value: Any, tmp_path: Path, capsys
) -> None:
    doc = run_doc()
    doc["cluster"]["node"]["gpu"] = {"preset": "h100-sxm", "compute": {"memory_efficiency": value}}
    assert main(["validate", str(write_run(tmp_path, doc))]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "run.yaml" in err
    assert "cluster.node.gpu.compute.memory_efficiency" in err


# -- the fit ------------------------------------------------------------------------------


@pytest.mark.parametrize("efficiency", EFFICIENCIES)
@pytest.mark.parametrize("steps", [1, 2])
def test_fit_gives_back_the_efficiency_the_trace_was_timed_at(
    efficiency: float, steps: int, tmp_path: Path
) -> None:
    """2 micro-batches per GPU (4 sequences, micro-batch 2, dp 1), one step or two marked
    ProfilerStep#N: the run's bytes at 3.35 TB/s over the measured time is the efficiency
    (within 1e-5; the 2% of the issue), the products' FLOPs those of the steps (ratio 1)."""
    run = write_run(tmp_path, run_doc())
    ops = micro_batch_ops(run)
    doc = step_trace(ops, 2, efficiency, steps)
    profile = read_profile(write(tmp_path / "step.json", doc))
    assert profile.steps == (steps if steps > 1 else 0)
    memory = fit_memory(profile, scenario_step(str(run), find("h100-sxm", "gpu")))
    assert memory.memory_efficiency == pytest.approx(efficiency, rel=1e-5)
    assert memory.predicted_s == pytest.approx(
        steps * 2 * memory_bytes(ops) / H100_BANDWIDTH, rel=1e-12
    )
    assert memory.fitted_s == pytest.approx(memory.measured_s, rel=1e-5)
    assert memory.product_ratio == pytest.approx(1.0, rel=1e-9)
    assert memory.kernels == steps * 2 * sum(1 for op in ops if op.flops == 0)


def test_kernels_faster_than_the_bandwidth_are_capped_at_1(tmp_path: Path) -> None:
    run = write_run(tmp_path, run_doc())
    profile = read_profile(write(tmp_path / "s.json", step_trace(micro_batch_ops(run), 2, 1.25, 1)))
    memory = fit_memory(profile, scenario_step(str(run), find("h100-sxm", "gpu")))
    assert memory.memory_efficiency == 1.0
    assert any("capped at 1" in note for note in memory.notes)


def test_kernels_other_than_element_wise_are_not_measured(tmp_path: Path) -> None:
    """NCCL, attention (the helper's flash kernel) and optimizer kernels stay out of the
    measured time: it is the element-wise kernels' alone."""
    run = write_run(tmp_path, run_doc())
    ops = micro_batch_ops(run)
    doc = step_trace(ops, 2, 0.6, 1)
    for name in ("ncclKernel_AllReduce_RING_LL_Sum_bfloat16", "multi_tensor_apply_kernel"):
        doc["traceEvents"].append(event("kernel", name, GPU, 1e9, 500.0, device=0, correlation=1))
    profile = read_profile(write(tmp_path / "s.json", doc))
    assert profile.other[ELEMENTWISE][1] == pytest.approx(
        2 * memory_bytes(ops) / (H100_BANDWIDTH * 0.6), rel=1e-9
    )
    assert profile.other["optimizer kernels (multi_tensor_apply, Adam)"][0] == 1


# -- the command and the round trip ---------------------------------------------------------


@pytest.mark.parametrize("efficiency", EFFICIENCIES)
def test_round_trip_the_gpu_file_prices_the_runs_memory_work_at_the_traces_time(
    efficiency: float, tmp_path: Path, capsys
) -> None:
    """calibrate profile --scenario writes compute.memory_efficiency (source profile-fit, a
    note naming the trace); the file in the run (gpu: {preset: ./my_gpu.yaml}) prices each
    memory-bound operation at bytes / (3.35 TB/s x the fitted value), so the step's
    memory-bound work takes the measured time (within 1e-5)."""
    run = write_run(tmp_path, run_doc())
    ops = micro_batch_ops(run)
    step = write(tmp_path / "step.json", step_trace(ops, 2, efficiency, 1))
    out = tmp_path / "my_gpu.yaml"
    assert main(["calibrate", "profile", str(step), "--scenario", str(run), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "# memory-bound work:" in printed and "predicted at the full 3.35 TB/s" in printed
    assert f"predicted at the fitted memory efficiency {efficiency:g}" in printed
    written = yaml.safe_load(out.read_text())["spec"]["compute"]["memory_efficiency"]
    assert written["value"] == pytest.approx(efficiency, rel=1e-5)
    assert written["source"] == "profile-fit" and str(step) in written["note"]
    doc = run_doc()
    doc["cluster"]["node"]["gpu"] = {"preset": "./my_gpu.yaml"}
    again = write_run(tmp_path, doc, "again.yaml")
    prepared = prepare(again)
    device = prepared.topology.devices[prepared.strategy.placement.workers[0]]
    model = DeviceModels(tmp_path).of(device)
    assert model.memory_efficiency == written["value"]
    memory_ops = [op for op in ops if op.flops == 0]
    for op in memory_ops:
        expected = op.bytes / (H100_BANDWIDTH * written["value"])
        assert model.operation_seconds(op) == pytest.approx(expected, rel=1e-12)
    measured = read_profile(step).other[ELEMENTWISE][1]
    assert 2 * model.seconds(memory_ops) == pytest.approx(measured, rel=1e-5)


def test_a_fitted_file_as_base_predicts_a_second_run(tmp_path: Path, capsys) -> None:
    """The check a single ratio allows: the file fitted on micro-batches of 2 (at 0.6), as
    --base of a trace of micro-batches of 1 of the same GPU (at 0.6 too), predicts that
    trace's memory-bound time to within 0.1% (printed as +0.0%)."""
    first = write_run(tmp_path, run_doc())
    step = write(tmp_path / "step.json", step_trace(micro_batch_ops(first), 2, 0.6, 1))
    out = tmp_path / "my_gpu.yaml"
    assert main(["calibrate", "profile", str(step), "--scenario", str(first), "-o", str(out)]) == 0
    doc = run_doc(global_batch=2, micro_batch=1)
    doc["cluster"]["node"]["gpu"] = {"preset": "./my_gpu.yaml"}
    second = write_run(tmp_path, doc, "second.yaml")
    other = write(tmp_path / "other.json", step_trace(micro_batch_ops(second), 2, 0.6, 1))
    argv = ["--base", str(out), "--scenario", str(second), "-o", str(tmp_path / "again.yaml")]
    capsys.readouterr()
    assert main(["calibrate", "profile", str(other), *argv]) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if "the base's memory efficiency 0.6" in line)
    assert row.endswith("+0.0%")


def test_without_scenario_one_line_says_what_the_memory_efficiency_needs(
    tmp_path: Path, capsys
) -> None:
    run = write_run(tmp_path, run_doc())
    step = write(tmp_path / "step.json", step_trace(micro_batch_ops(run), 2, 0.6, 1))
    out = tmp_path / "my_gpu.yaml"
    assert main(["calibrate", "profile", str(step), "-o", str(out)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "memory efficiency" in line]
    assert lines == [
        "memory efficiency: not fitted (needs --scenario RUN.yaml, the run the trace is a step "
        "of); the base GPU's is kept"
    ]
    assert "memory_efficiency" not in yaml.safe_load(out.read_text())["spec"].get("compute", {})


def _refused(capsys, *argv: str) -> str:
    assert main(["calibrate", "profile", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_runs_the_trace_cannot_be_a_step_of_are_refused(tmp_path: Path, capsys) -> None:
    """Exit 2 at --scenario, naming the file: a run of 4x the trace's micro-batches (its
    products 0.25 x), one on other GPUs, one with no transformer; at --stage, a stage the
    run does not have (and --stage without --scenario)."""
    run = write_run(tmp_path, run_doc())
    step = str(write(tmp_path / "step.json", step_trace(micro_batch_ops(run), 2, 0.6, 1)))
    out = str(tmp_path / "gpu.yaml")

    def err_of(doc: dict[str, Any]) -> str:
        return _refused(
            capsys, step, "--scenario", str(write_run(tmp_path, doc, "r.yaml")), "-o", out
        )

    err = err_of(run_doc(global_batch=16))
    assert "--scenario" in err and "0.25 x those of 1 step(s)" in err and "r.yaml" in err
    other = run_doc()
    other["cluster"]["node"] = {"preset": "dgx-a100", "gpus": 2, "nics": 2}
    assert "the run's GPUs are a100-sxm4-80gb, the trace's h100-sxm5-80gb" in err_of(other)
    staged = run_doc()
    staged["parallelism"] = {"tp": 1, "pp": 2}
    staged_file = str(write_run(tmp_path, staged, "staged.yaml"))
    err = _refused(capsys, step, "--scenario", staged_file, "--stage", "2", "-o", out)
    assert "--stage" in err and "2 pipeline stage(s)" in err and "0 to 1" in err
    assert "staged.yaml" in err
    err = _refused(capsys, step, "--stage", "1", "-o", out)
    assert "--stage" in err and "--scenario RUN.yaml" in err
    collective = run_doc()
    for key in ("model", "training", "parallelism", "pipeline"):
        del collective[key]
    collective["workload"] = {"collective": "allreduce", "bytes": "1MB"}
    assert "no transformer model" in err_of(collective)
    assert not Path(out).exists()


def test_unknown_scenario_file_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path, run_doc())
    step = str(write(tmp_path / "step.json", step_trace(micro_batch_ops(run), 2, 0.6, 1)))
    err = _refused(
        capsys, step, "--scenario", str(tmp_path / "none.yaml"), "-o", str(tmp_path / "g.yaml")
    )
    assert "none.yaml" in err


def test_fit_profile_is_unchanged_by_the_memory_kernels(tmp_path: Path) -> None:
    """The products' curve fit reads the same products with or without the element-wise
    kernels beside them."""
    run = write_run(tmp_path, run_doc())
    ops = micro_batch_ops(run)
    with_memory = read_profile(write(tmp_path / "a.json", step_trace(ops, 2, 0.6, 1)))
    without = read_profile(
        write(tmp_path / "b.json", step_trace([o for o in ops if o.m], 2, 0.6, 1))
    )
    h100 = find("h100-sxm", "gpu")
    a, b = fit_profile(with_memory, h100, "none"), fit_profile(without, h100, "none")
    assert a.curves["bf16"].curve == b.curves["bf16"].curve


def test_scenario_step_is_a_scenario_error_for_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="none.yaml"):
        scenario_step(str(tmp_path / "none.yaml"), find("h100-sxm", "gpu"))


# -- pipeline parallelism: the trace is one stage's GPU ---------------------------------------


def staged_run(tmp_path: Path) -> Path:
    """run_doc's model with 4 blocks over 2 pipeline stages, tp 1 (2 micro-batches of 2
    sequences a step, as run_doc): stage 0 the embedding and blocks 0-1, stage 1 blocks 2-3
    and the head."""
    doc = run_doc()
    doc["model"]["transformer"]["layers"] = 4
    doc["parallelism"] = {"tp": 1, "pp": 2}
    return write_run(tmp_path, doc, "staged.yaml")


def stage_ops(path: Path, stage: int) -> list[Operation]:
    """The forward and backward operations of one micro-batch on a GPU of ``stage``, listed
    from clustersim.model.operators over the layers the pipeline gives that stage."""
    prepared = prepare(path)
    strategy = prepared.strategy
    model = build_model(load_scenario(path).model)
    b = prepared.scenario.training.micro_batch
    ops: list[Operation] = []
    for plan in strategy.plans[stage :: strategy.pp]:
        for layer in model.layers[plan.first_layer : plan.first_layer + plan.layers]:
            forward = forward_operations(layer, model.transformer, b, 1)
            ops += forward + backward_operations(forward)
    return ops


@pytest.mark.parametrize("stage", [0, 1])
def test_a_stage_of_a_pipeline_run_is_found_and_its_efficiency_given_back(
    stage: int, tmp_path: Path, capsys
) -> None:
    """A trace of one GPU of stage 0 or 1 of a 2-stage run, its element-wise kernels timed
    at 0.6: calibrate profile --scenario takes the stage whose products match (ratio 1, the
    other stage's printed), fits 0.6 back (within 1e-5); --stage naming it gives the same
    file; --stage naming the other stage is refused (its products, with or without the
    head's, are more than 2 x off the trace's)."""
    run = staged_run(tmp_path)
    ops = stage_ops(run, stage)
    other = stage_ops(run, 1 - stage)
    assert sum(op.flops for op in ops if op.m) != sum(op.flops for op in other if op.m)
    step = write(tmp_path / "step.json", step_trace(ops, 2, 0.6, 1))
    out = tmp_path / "auto.yaml"
    assert main(["calibrate", "profile", str(step), "--scenario", str(run), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"pipeline stage {stage} of 2 taken as the traced GPU's" in printed
    written = yaml.safe_load(out.read_text())["spec"]["compute"]["memory_efficiency"]
    assert written["value"] == pytest.approx(0.6, rel=1e-5)
    named = tmp_path / "named.yaml"
    argv = ["--scenario", str(run), "--stage", str(stage), "-o", str(named)]
    assert main(["calibrate", "profile", str(step), *argv]) == 0
    assert "taken as the traced GPU's" not in capsys.readouterr().out
    assert named.read_text().replace("named", "auto") == out.read_text()
    argv = ["--scenario", str(run), "--stage", str(1 - stage), "-o", str(tmp_path / "x.yaml")]
    err = _refused(capsys, str(step), *argv)
    assert "--scenario" in err and "x those of 1 step(s) of the run on one GPU" in err


def test_interleaved_stages_take_their_chunks(tmp_path: Path) -> None:
    """With 2 chunks per stage (interleaved 1F1B, 4 blocks over 2 stages x 2 chunks), stage 0
    runs virtual stages 0 and 2, stage 1 virtual stages 1 and 3: their memory-bound bytes
    are those of the layers of those chunks."""
    doc = run_doc()
    doc["model"]["transformer"]["layers"] = 4
    doc["parallelism"] = {"tp": 1, "pp": 2}
    doc["pipeline"] = {"schedule": "interleaved", "chunks": 2}
    run = write_run(tmp_path, doc, "chunks.yaml")
    base = find("h100-sxm", "gpu")
    for stage in (0, 1):
        step = scenario_step(str(run), base, stage)
        assert step.bytes == pytest.approx(2 * memory_bytes(stage_ops(run, stage)), rel=1e-12)


def forward_ops(path: Path) -> list[Operation]:
    """The forward operations of one micro-batch on one GPU of the run at ``path``."""
    scenario = load_scenario(path)
    model = build_model(scenario.model)
    b, tp = scenario.training.micro_batch, scenario.parallelism.tp
    return [
        op for layer in model.layers for op in forward_operations(layer, model.transformer, b, tp)
    ]


def test_a_trace_of_forward_passes_is_fitted_to_the_forward_kernels(tmp_path: Path, capsys) -> None:
    """A trace of the run's 2 micro-batches' forward passes alone (no autograd ops), its
    element-wise kernels at 0.6: its products are the forward passes' FLOPs (ratio 1, a third
    of whole steps'), so it is fitted to the forward kernels -- 0.6 back, the note and the
    file saying so.  The same trace with one backward op of autograd is a trace of whole
    steps: refused at --scenario (0.333 x the steps' products)."""
    run = write_run(tmp_path, run_doc())
    doc = step_trace(forward_ops(run), 2, 0.6, 1)
    step = write(tmp_path / "forward.json", doc)
    out = tmp_path / "my_gpu.yaml"
    assert main(["calibrate", "profile", str(step), "--scenario", str(run), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fitted to the forward passes alone" in printed
    assert "matrix-product FLOPs of the trace over the run's steps: 1.0000" in printed
    written = yaml.safe_load(out.read_text())["spec"]["compute"]["memory_efficiency"]
    assert written["value"] == pytest.approx(0.6, rel=1e-5)
    assert "forward" in written["note"]
    backward = event("cpu_op", "autograd::engine::evaluate_function: MmBackward0", CPU, 1, 1)
    both = write(tmp_path / "both.json", doc | {"traceEvents": [*doc["traceEvents"], backward]})
    err = _refused(capsys, str(both), "--scenario", str(run), "-o", str(tmp_path / "x.yaml"))
    assert "--scenario" in err and "0.333 x those of 1 step(s)" in err
