"""GPU compute models: the efficiency curve, its calibration from measured kernels, the
roofline of a transformer layer's kernels, and what the pipeline strategy makes of them.

Sources: OpenXLA's measured H100 bf16 matmul table (scenarios/kernels/h100_bf16_xla.csv,
cited in its header); the roofline max(F / rate, bytes / bandwidth) (Williams et al. 2009);
the FLOPs of a transformer layer (Narayanan et al. 2021, Section 5.1, clustersim.model.transformer).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clustersim import simulate
from clustersim.compute import (
    DEFAULT_CURVE,
    EfficiencyCurve,
    compute_model,
    fit_curve,
    read_kernels,
)
from clustersim.errors import ScenarioError
from clustersim.model.operators import backward_operations, forward_operations
from clustersim.model.transformer import Transformer

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "scenarios" / "kernels" / "h100_bf16_xla.csv"
H100_PEAK = 989e12


def test_fit_to_the_h100_table_is_within_its_stated_error() -> None:
    """The fitted curve is within 12.5% rms (log ratio) of XLA's 41 measured shapes, and its
    ceiling (0.77 of peak) is below the best measured shape's 0.80 (783 and 793 TFLOP/s)."""
    samples = read_kernels(H100, H100_PEAK)
    assert len(samples) == 41
    curve = fit_curve(samples, H100_PEAK)
    errors = [math.log(curve(s.flops) / (s.flops / s.seconds / H100_PEAK)) for s in samples]
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    assert rms == pytest.approx(0.125, abs=0.01)
    assert curve.e_max == pytest.approx(0.767, abs=0.01)
    assert curve.half_flops == pytest.approx(5.1e9, rel=0.05)


@pytest.mark.parametrize("e_max, half", [(0.9, 1e9), (0.6, 3e10), (1.0, 0.0)])
def test_fit_recovers_the_curve_it_was_made_from(tmp_path: Path, e_max: float, half: float) -> None:
    curve = EfficiencyCurve(e_max, half)
    lines = ["m,n,k,dtype,seconds"]
    for size in (128, 512, 2048, 8192):
        flops = 2.0 * size**3
        lines.append(f"{size},{size},{size},bf16,{flops / (312e12 * curve(flops))!r}")
    file = tmp_path / "k.csv"
    file.write_text("\n".join(lines))
    fitted = fit_curve(read_kernels(file, 312e12), 312e12)
    assert fitted.e_max == pytest.approx(e_max, rel=0.01)
    assert fitted.half_flops == pytest.approx(half, rel=0.01, abs=1e6)


@pytest.mark.parametrize(
    "text, where",
    [
        ("m,n,dtype,tflops\n1,2,bf16,3", "header missing k"),
        ("m,n,k,dtype\n1,2,3,bf16", "needs one of tflops or seconds"),
        ("m,n,k,dtype,tflops\n1,2,3,bf17,3", "line 2: dtype 'bf17'"),
        ("# c\nm,n,k,dtype,tflops\n1,2.5,3,bf16,3", "line 3: column n is '2.5'"),
        ("m,n,k,dtype,tflops\n1,2,3,bf16,-1", "column tflops is '-1'"),
        ("m,n,k,dtype,tflops\n1,2,3,bf16", "4 cells"),
        ("m,n,k,dtype,tflops\n4096,4096,4096,bf16,400", "above the peak"),
        ("m,n,k,dtype,tflops\n", "has 0 kernels"),
    ],
)
def test_bad_kernel_files_are_refused(tmp_path: Path, text: str, where: str) -> None:
    file = tmp_path / "bad.csv"
    file.write_text(text)
    with pytest.raises(ScenarioError) as info:
        read_kernels(file, 312e12, "cluster.node.gpu.compute.kernels")
    assert where in str(info.value) and "bad.csv" in str(info.value)


GPT = Transformer(layers=2, hidden=4096, heads=32, ffn=16384, vocab=51200, seq=2048)


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("b", [1, 4])
def test_kernels_add_up_to_the_layers_flops(tp: int, b: int) -> None:
    """Products' FLOPs = the layer's FLOPs x b / t, forward and backward (2 x forward)."""
    for layer in GPT.build("gpt").layers:
        fwd = forward_operations(layer, GPT, b, tp)
        assert sum(op.flops for op in fwd) == pytest.approx(layer.forward_flops * b / tp)
        bwd = backward_operations(fwd)
        assert sum(op.flops for op in bwd) == pytest.approx(layer.backward_flops * b / tp)


def test_roofline_is_the_larger_of_compute_and_memory_time() -> None:
    """An MLP on an A100 (312 TFLOP/s, 2 TB/s, efficiency 0.8): each product at
    F / (312e12 x 0.8 x eff(F)), GeLU at its bytes / 2e12; flat = F / (312e12 x 0.8)."""
    layer = GPT.mlp("mlp")
    ops = forward_operations(layer, GPT, 1, 1)
    roof = compute_model("roofline", 312e12, 0.8, 2e12)
    flat = compute_model("flat", 312e12, 0.8, 2e12)
    expected = sum(
        op.flops / (312e12 * 0.8 * DEFAULT_CURVE(op.flops)) if op.flops else op.bytes / 2e12
        for op in ops
    )
    assert roof.seconds(ops) == pytest.approx(expected, rel=1e-12)
    assert flat.seconds(ops) == pytest.approx(layer.forward_flops / (312e12 * 0.8), rel=1e-12)
    gelu = next(op for op in ops if op.name == "activation")
    assert gelu.bytes == 4.0 * 2048 * 16384  # read + write of b s f 16-bit values


def _scenario(tmp_path: Path, micro_batch: int, model: str = "roofline") -> Path:
    text = f"""
name: mb
cluster:
  kind: two_tier
  racks: 1
  nodes_per_rack: 1
  node:
    gpus: 1
    gpu: {{flops: 312TFLOPS, efficiency: 0.8, memory: 80GB, memory_bandwidth: 2TB/s,
          compute: {{model: {model}}}}}
    pcie: {{bandwidth: 32GB/s, latency: 1us}}
    nic: {{bandwidth: 200Gb/s, latency: 2us}}
model: {{preset: gpt3-125m}}
training: {{global_batch: 16, micro_batch: {micro_batch}, iterations: 1, precision: bf16,
           recompute: none}}
parallelism: {{tp: 1, pp: 1, dp: 1}}
pipeline: {{schedule: 1f1b}}
"""
    path = tmp_path / f"mb{micro_batch}{model}.yaml"
    path.write_text(text)
    return path


def test_micro_batch_size_matters_under_the_roofline(tmp_path: Path) -> None:
    """GPT-3 125M (h = 768) on one A100: products of a micro-batch of 1 are ~2.4 GFLOPs, near
    the curve's F_half (1.8 GFLOPs), so larger micro-batches reach more of the peak -- what
    ``clustersim plan`` now sees; the flat model gives every micro-batch size the same time."""
    roof = [simulate(_scenario(tmp_path, b)).summary["tflops_per_gpu"] for b in (1, 2, 4, 8)]
    flat = [simulate(_scenario(tmp_path, b, "flat")).summary["tflops_per_gpu"] for b in (1, 8)]
    assert roof == sorted(roof) and roof[-1] > 1.04 * roof[0], roof
    assert flat[0] == pytest.approx(flat[1], rel=1e-3)
    assert roof[-1] < flat[-1]  # eff(F) <= e_max < 1 and the memory-bound kernels add time


def test_unknown_compute_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as info:
        simulate(_scenario(tmp_path, 1, "rofline"))
    assert "compute.model" in str(info.value) and "roofline" in str(info.value)


def test_kernels_file_of_a_scenario_calibrates_it(tmp_path: Path) -> None:
    """A kernels file relative to the scenario; a missing one is a ScenarioError."""
    path = _scenario(tmp_path, 1)
    text = path.read_text().replace("model: roofline", "model: roofline, kernels: k.csv")
    path.write_text(text)
    with pytest.raises(ScenarioError, match="k.csv"):
        simulate(path)
    (tmp_path / "k.csv").write_text(
        "m,n,k,dtype,tflops\n1024,1024,1024,bf16,100\n8192,8192,8192,bf16,280\n"
    )
    slow = simulate(path).summary["tflops_per_gpu"]
    (tmp_path / "k.csv").write_text(
        "m,n,k,dtype,tflops\n1024,1024,1024,bf16,250\n8192,8192,8192,bf16,280\n"
    )
    fast = simulate(path).summary["tflops_per_gpu"]
    assert slow < fast


def test_bad_kernels_file_exits_2_from_the_cli(tmp_path: Path, capsys) -> None:
    """`clustersim run` names the key, the file, the line and the column; no traceback."""
    from clustersim.cli import main

    path = _scenario(tmp_path, 1)
    path.write_text(path.read_text().replace("model: roofline", "model: roofline, kernels: k.csv"))
    (tmp_path / "k.csv").write_text("m,n,k,dtype,tflops\n1024,1024,x,bf16,100\n")
    assert main(["run", str(path), "-o", str(tmp_path / "out"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "cluster.node.gpu.compute.kernels" in err and "k.csv line 2: column k is 'x'" in err
    assert "Traceback" not in err


def test_resolved_scenario_finds_the_kernels_file_from_its_own_folder(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scenario.resolved.yaml holds the kernels path made absolute, so running it from the
    output folder (another working directory) gives the same summary, byte for byte."""
    from clustersim.cli import main

    path = _scenario(tmp_path, 1)
    path.write_text(path.read_text().replace("model: roofline", "model: roofline, kernels: k.csv"))
    (tmp_path / "k.csv").write_text(
        "m,n,k,dtype,tflops\n1024,1024,1024,bf16,100\n8192,8192,8192,bf16,280\n"
    )
    first = tmp_path / "first"
    assert main(["run", str(path), "-o", str(first), "-q"]) == 0
    resolved = first / "scenario.resolved.yaml"
    assert str(tmp_path.resolve() / "k.csv") in resolved.read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["run", str(resolved), "-o", str(tmp_path / "second"), "-q"]) == 0
    summaries = [(tmp_path / d / "summary.json").read_text() for d in ("first", "second")]
    strip = [s.split('"engine"')[0] for s in summaries]
    assert strip[0] == strip[1]
