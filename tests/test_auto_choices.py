"""``auto``: what a scenario leaves out, chosen as a tuned production run chooses it.

Sources: Megatron-Core's uneven pipeline split (``num_layers_in_first_pipeline_stage`` /
``num_layers_in_last_pipeline_stage``, ``account_for_embedding_in_pipeline_split`` /
``account_for_loss_in_pipeline_split``) and the Llama 3 paper (405B: 126 layers over 16
stages, the first and last one layer fewer); Korthikanti et al. 2022, Table 2 (a block's
activations with tensor and sequence parallelism); the least recomputation that fits and the
fastest interleaving depth by the simulator's own memory plan and analytical timeline
(clustersim/strategies/auto.py, clustersim/strategies/hybrid/auto.py).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.api import prepare, simulate
from clustersim.errors import ScenarioError
from clustersim.parallel.schedules import ideal_timeline, make_schedule, played_timeline
from clustersim.parallel.stages import megatron_blocks
from clustersim.scenario import parse_scenario

from .conftest import SCENARIOS
from .test_hybrid import SHAPE, doc, korthikanti_layer, run

# --------------------------------------------------------------------------- the stage split


def test_llama3_405b_split_is_megatron_cores() -> None:
    """126 blocks over 16 stages: the first and last stage one block fewer (Llama 3, 3.3.2)."""
    assert megatron_blocks(126, 16) == [7, *[8] * 14, 7]


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 6, 8, 12, 16, 35, 64])
def test_megatron_split_keeps_every_block_and_shortens_only_the_ends(parts: int) -> None:
    """Every split adds up to the blocks, one block at least per stage; blocks that divide give
    equal stages; blocks + 2 that divide give Megatron-Core's accounted split (the ends one
    fewer); otherwise, where Megatron-Core's form exists (middle stages of m = ceil(blocks /
    stages) each, the ends 1 to m), the middle stages are equal and the ends take no more than
    they do, the first no more than the last; where it does not, the stages differ by one
    block at most and the ends take the fewer."""
    for blocks in range(parts, 8 * parts + 3):
        counts = megatron_blocks(blocks, parts)
        assert len(counts) == parts and sum(counts) == blocks and min(counts) >= 1
        least = -(-blocks // parts)
        if blocks % parts == 0:
            assert counts == [blocks // parts] * parts
        elif (blocks + 2) % parts == 0 and parts > 2:
            q = (blocks + 2) // parts
            assert counts == [q - 1, *[q] * (parts - 2), q - 1]
        elif parts > 2 and least <= (blocks - 2) // (parts - 2):
            assert set(counts[1:-1]) == {least}
            assert counts[0] <= counts[-1] <= least
        elif parts > 2:
            assert max(counts) - min(counts) <= 1
            assert counts[0] == counts[-1] == min(counts)


def test_fewer_blocks_than_stages_are_refused() -> None:
    with pytest.raises(ValueError):
        megatron_blocks(3, 4)


def _uneven(stages: str | None = None, pp: int = 3, layers: int = 4) -> dict[str, Any]:
    document = doc(pp=pp, dp=1, gpus=pp, batch=pp, shape={**SHAPE, "layers": layers})
    if stages is not None:
        document["pipeline"]["stages"] = stages
    return document


def test_uneven_blocks_are_split_by_default() -> None:
    """4 blocks over 3 stages run (they were refused before): [1, 2, 1] blocks, the embedding
    on the first and the head on the last; the split is reported as auto's choice."""
    summary = run(_uneven()).summary
    assert summary["stage_layers"] == [3, 4, 3]  # embedding + 1 block, 2 blocks, 1 block + head
    assert summary["stage_layer_names"][0][0] == "embedding"
    choice = summary["auto_choices"]["pipeline.stage_layers"]
    assert choice["value"] == [3, 4, 3]
    assert "do not divide into 3 stages" in choice["reason"]


def test_stages_even_still_refuses_what_does_not_divide() -> None:
    with pytest.raises(ScenarioError) as info:
        run(_uneven("even"))
    assert info.value.problems[0].path == "parallelism.pp"
    assert "pipeline.stages: even" in str(info.value)


@pytest.mark.parametrize("pp", [2, 4])
def test_blocks_that_divide_are_split_as_before(pp: int) -> None:
    """Where the blocks divide, auto is even: the split of ``stages: even``."""
    auto = run(_uneven(pp=pp, layers=8)).summary
    even = run(_uneven("even", pp=pp, layers=8)).summary
    assert auto["stage_layers"] == even["stage_layers"]
    assert auto["iteration_time_s"] == even["iteration_time_s"]


# --------------------------------------------------------------------------- sequence parallelism


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_sequence_parallelism_is_on_wherever_tp_is_above_one(t: int) -> None:
    """Korthikanti et al.'s Table 2: with SP a block keeps s b h (34/t + 5 a s/(h t)) bytes,
    without it s b h (10 + 24/t + 5 a s/(h t)); auto gives the first wherever t > 1."""
    summary = run(doc(tp=t, dp=1, gpus=t, batch=8, shape={**SHAPE, "layers": 8})).summary
    s, h, a = SHAPE["seq"], SHAPE["hidden"], SHAPE["heads"]
    on = t > 1
    assert summary["sequence_parallel"] is on
    blocks = 8 * korthikanti_layer(s, 1, h, a, t, on)
    head = 2 * s * h / (t if on else 1) + 4 * s * SHAPE["vocab"] / t
    embedding = s * h / (t if on else 1)
    peak = summary["activation_memory"]["0"]["peak_bytes"]
    assert peak == pytest.approx(blocks + embedding + head, rel=1e-12)
    chosen = summary.get("auto_choices", {}).get("parallelism.sequence_parallel")
    assert (chosen is not None) == on
    if on:
        assert chosen["value"] is True


@pytest.mark.parametrize("t", [2, 4])
def test_sequence_parallelism_written_false_stays_off(t: int) -> None:
    summary = run(doc(tp=t, dp=1, gpus=t, batch=2, sequence_parallel=False)).summary
    assert summary["sequence_parallel"] is False
    assert "parallelism.sequence_parallel" not in summary.get("auto_choices", {})
    assert summary["communication"]["tensor_parallel"]["ops"] == ["allreduce"]


def test_sequence_parallelism_stays_off_on_a_2d_grid() -> None:
    """The 2-D mode splits every activation over its grid itself: auto leaves SP off."""
    summary = run(doc(tp=4, dp=1, gpus=4, batch=2, tp_mode="2d")).summary
    assert summary["sequence_parallel"] is False


# --------------------------------------------------------------------------- recomputation


def _memory_bound(memory: str, **changes: Any) -> dict[str, Any]:
    """8 blocks over 2 stages of 1F1B, 8 micro-batches of 4 sequences: stage 0 holds two
    micro-batches in flight, stage 1 one."""
    shape = {**SHAPE, "layers": 8, "seq": 1024}
    return doc(pp=2, dp=1, gpus=2, batch=32, micro_batch=4, shape=shape, memory=memory, **changes)


def _peaks(document: dict[str, Any]) -> list[float]:
    """Each stage's peak bytes (memory plan with the 10% allowance)."""
    prepared = prepare(parse_scenario(document))
    from clustersim.api import memory_block

    block = memory_block(prepared)
    groups = prepared.strategy.groups[0]
    return [block.per_device[group[0]].peak_bytes for group in groups]


@pytest.mark.parametrize("share", [0.3, 0.5, 0.8, 0.95, 1.2])
def test_each_stage_takes_the_least_recomputation_that_fits(share: float) -> None:
    """Capacity between the peaks of the modes: every stage takes the first of none,
    selective, full with which it fits (its own peak under each mode, the memory plan's), and
    the run fits unless even full does not."""
    peaks = {
        mode: _peaks(_memory_bound("1000GB", recompute=mode))
        for mode in ("none", "selective", "full")
    }
    capacity = share * peaks["none"][0]
    document = _memory_bound(f"{capacity / 1e9:.6f}GB")
    summary = run(document).summary
    expected = []
    for s in range(2):
        fitting = [m for m in ("none", "selective", "full") if peaks[m][s] <= capacity * (1 - 1e-6)]
        expected.append(fitting[0] if fitting else "full")
    got = summary.get("stage_recompute") or [summary["recompute_mode"]] * 2
    assert got == expected
    choice = summary["auto_choices"]["training.recompute"]
    assert choice["value"] == (expected[0] if len(set(expected)) == 1 else expected)
    assert summary["memory"]["fits"] == all(
        any(peaks[m][s] <= capacity for m in ("none", "selective", "full")) for s in range(2)
    )


def test_written_recompute_is_kept_even_over_memory() -> None:
    """A written mode is the user's: kept, and a run over memory stays a warning."""
    summary = run(_memory_bound("1GB", recompute="none")).summary
    assert summary["recompute_mode"] == "none"
    assert "training.recompute" not in summary.get("auto_choices", {})
    assert summary["memory"]["fits"] is False


def test_recompute_per_stage_runs_as_written() -> None:
    """The list auto writes into scenario.resolved.yaml runs to the same result."""
    tight = _memory_bound("6GB")
    chosen = run(tight).summary
    pinned = _memory_bound("6GB", recompute=chosen["auto_choices"]["training.recompute"]["value"])
    again = run(pinned).summary
    assert again["iteration_time_s"] == chosen["iteration_time_s"]
    assert again["memory"]["peak_bytes"] == chosen["memory"]["peak_bytes"]
    assert "training.recompute" not in again.get("auto_choices", {})


def test_a_recompute_list_must_name_every_stage() -> None:
    with pytest.raises(ScenarioError) as info:
        run(_memory_bound("80GB", recompute=["none", "full", "none"]))
    assert info.value.problems[0].path == "training.recompute"
    assert "the pipeline has 2 stages" in str(info.value)


def test_gpt3_175b_on_80gb_with_tp8_pp8_recomputes_selectively() -> None:
    """Korthikanti et al.'s 175B layout (tp 8 x pp 8, 3 interleaved chunks, sequence
    parallelism) on A100 80GB: without recomputation the first stages are over memory; auto
    takes selective recomputation there (the paper's choice), never full."""
    path = SCENARIOS / "production" / "kor22_175b_64.yaml"
    document = yaml.safe_load(path.read_text())
    document["training"]["recompute"] = "auto"
    summary = prepare(parse_scenario(document, str(path))).strategy
    modes = summary.stage_recompute
    assert modes[0] == "selective"
    assert "full" not in modes
    assert set(modes) <= {"none", "selective"}
    assert modes == sorted(modes, key=lambda m: m != "selective")  # the early stages recompute


# --------------------------------------------------------------------------- interleaving depth


def test_played_timeline_with_free_hops_is_the_ideal_timeline() -> None:
    """The analytical timeline auto prices depths with is the textbook one when transfers
    are free and every operation takes its fixed time."""
    for p, m, v in itertools.product([2, 4], [4, 8], [1, 2, 3]):
        schedule = make_schedule("interleaved", p, m, v)
        ideal = ideal_timeline(schedule, 1.0, 2.0)
        played = played_timeline(schedule, lambda _s, op: 1.0 if op.kind == "fwd" else 2.0)
        assert played == ideal


@pytest.mark.parametrize("hop_s", [0.0, 0.01, 0.1])
def test_a_transfer_delays_every_dependency_by_its_time(hop_s: float) -> None:
    """One stage device per virtual stage (v = 1), m = 1: the forward crosses p - 1 hops and
    the backward p - 1 again: the iteration is p (F + B) + 2 (p - 1) hop."""
    p = 4
    schedule = make_schedule("1f1b", p, 1)
    ends = played_timeline(schedule, lambda _s, op: 1.0, lambda a, b: hop_s)
    assert max(end for _, end in ends.values()) == pytest.approx(2 * p + 2 * (p - 1) * hop_s)


def _interleaved(chunks: Any = "auto", **changes: Any) -> dict[str, Any]:
    """12 blocks over 2 stages, 8 micro-batches, interleaved with ``chunks``."""
    settings: dict[str, Any] = {"pp": 2, "dp": 1, "gpus": 2, "batch": 8, **changes}
    document = doc(shape={**SHAPE, "layers": 12}, **settings)
    document["pipeline"] = {"schedule": "interleaved", "chunks": chunks}
    return document


def test_interleaving_depth_is_the_fastest_by_the_timeline() -> None:
    """12 blocks over 2 stages: depths 2, 3 and 6 are priced (7 would leave a stage without a
    block); the one chosen is the fastest of them by the analytical timeline, and the
    simulated run of each depth ranks it first too (within 1%)."""
    summary = run(_interleaved()).summary
    choice = summary["auto_choices"]["pipeline.chunks"]
    priced = {
        int(part.split(":")[0]): part
        for part in choice["reason"].split("(", 1)[1].rstrip(")").split(", ")
    }
    assert set(priced) == {2, 3, 6}
    simulated = {v: run(_interleaved(v)).summary["iteration_time_s"] for v in priced}
    assert summary["chunks"] == choice["value"]
    assert simulated[summary["chunks"]] <= min(simulated.values()) * 1.01


def test_a_slow_link_between_stages_makes_interleaving_shallower() -> None:
    """Across a slow link each extra chunk pays its transfers: the depth chosen falls."""
    fast = run(_interleaved(nvlink="1000GB/s")).summary["chunks"]
    document = _interleaved(nodes=2, gpus=1, nic="0.05GB/s")
    slow = run(document).summary["chunks"]
    assert slow < fast


def test_written_chunks_are_kept() -> None:
    summary = run(_interleaved(3)).summary
    assert summary["chunks"] == 3
    assert "pipeline.chunks" not in summary.get("auto_choices", {})


# --------------------------------------------------------------------------- micro-batch


def _unbatched(schedule: str, pp: int, dp: int, batch: int) -> dict[str, Any]:
    """A pipeline run that writes neither training.micro_batch nor pipeline.micro_batches."""
    document = doc(shape={**SHAPE, "layers": 2 * pp}, pp=pp, dp=dp, gpus=pp * dp, batch=batch)
    del document["training"]["micro_batch"]
    document["pipeline"] = {
        "schedule": schedule,
        **({"chunks": 2} if schedule == "interleaved" else {}),
    }
    return document


@pytest.mark.parametrize(
    ("schedule", "pp", "dp", "batch"),
    [
        ("1f1b", 2, 1, 8),
        ("1f1b", 4, 2, 24),
        ("interleaved", 2, 2, 16),
        ("interleaved", 4, 1, 32),
        ("gpipe", 2, 4, 12),
    ],
)
def test_micro_batches_left_out_are_one_sample(schedule: str, pp: int, dp: int, batch: int) -> None:
    """NeMo's and Megatron-Core's pipeline-parallel recipes run micro_batch_size=1: with pp > 1
    and neither key written, m = global_batch / dp micro-batches of one sample, reported."""
    summary = run(_unbatched(schedule, pp, dp, batch)).summary
    assert summary["micro_batches"] == batch // dp
    choice = summary["auto_choices"]["training.micro_batch"]
    assert choice["value"] == 1
    assert f"{batch // dp} micro-batches per replica" in choice["reason"]


def test_the_smallest_micro_batch_the_schedule_takes() -> None:
    """Where the schedule refuses one sample's count, the next divisor that it takes."""
    from clustersim.strategies import auto

    size, choice = auto.micro_batch(24, 4, lambda m: m in (6, 3)) or (None, None)
    assert (size, choice.value if choice else None) == (4, 4)
    assert auto.micro_batch(24, 4, lambda m: False) is None
    assert auto.micro_batch(24, 4, lambda m: True)[0] == 1  # type: ignore[index]


@pytest.mark.parametrize("written", ["pipeline", "training"])
def test_written_micro_batches_are_kept(written: str) -> None:
    document = _unbatched("1f1b", 2, 1, 16)
    if written == "pipeline":
        document["pipeline"]["micro_batches"] = 4
    else:
        document["training"]["micro_batch"] = 4
    summary = run(document).summary
    assert summary["micro_batches"] == 4
    assert "training.micro_batch" not in summary.get("auto_choices", {})


@pytest.mark.parametrize(("tp", "dp", "batch"), [(2, 1, 16), (1, 2, 12), (2, 2, 4)])
def test_without_a_pipeline_the_micro_batches_are_accumulation_steps_of_one(
    tp: int, dp: int, batch: int
) -> None:
    """pp = 1: micro-batches of one sample too, global_batch / dp accumulation steps (the
    former default, 8 steps, did not divide a replica's 2 samples)."""
    document = doc(tp=tp, dp=dp, gpus=tp * dp, batch=batch)
    del document["training"]["micro_batch"]
    summary = run(document).summary
    assert summary["micro_batches"] == batch // dp
    assert (
        "gradient-accumulation steps" in summary["auto_choices"]["training.micro_batch"]["reason"]
    )


def test_a_list_of_layers_keeps_eight_micro_batches() -> None:
    """auto chooses for transformers; a model given as layers keeps pipeline.micro_batches."""
    document = _unbatched("1f1b", 2, 1, 16)
    document["model"] = {
        "layers": [
            {"name": f"l{i}", "flops": "1TFLOP", "params": 1e6, "activations": "1MB"}
            for i in range(4)
        ]
    }
    summary = run(document).summary
    assert summary["micro_batches"] == 8
    assert "training.micro_batch" not in summary.get("auto_choices", {})


# --------------------------------------------------------------------------- reporting


def test_the_resolved_file_runs_to_the_same_result(tmp_path: Path) -> None:
    """`clustersim run` writes what auto chose into scenario.resolved.yaml; running that file
    chooses nothing and gives the same summary numbers."""
    from clustersim.cli import main

    source = tmp_path / "auto.yaml"
    source.write_text(yaml.safe_dump(_interleaved(nvlink="1000GB/s")))
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["run", str(source), "-o", str(first), "-q"]) == 0
    resolved = yaml.safe_load((first / "scenario.resolved.yaml").read_text())
    assert resolved["pipeline"]["chunks"] != "auto"
    assert main(["run", str(first / "scenario.resolved.yaml"), "-o", str(second), "-q"]) == 0
    a = yaml.safe_load((first / "summary.json").read_text())
    b = yaml.safe_load((second / "summary.json").read_text())
    assert a["auto_choices"] and "auto_choices" not in b
    assert a["iteration_time_s"] == b["iteration_time_s"]
    assert a["memory"]["peak_bytes"] == b["memory"]["peak_bytes"]


def test_validate_and_run_print_every_choice(tmp_path: Path, capsys: Any) -> None:
    from clustersim.cli import main

    source = tmp_path / "auto.yaml"
    source.write_text(yaml.safe_dump(_interleaved(tp=2, gpus=4)))
    assert main(["validate", str(source)]) == 0
    printed = capsys.readouterr().out
    for key in ("pipeline.chunks", "parallelism.sequence_parallel", "training.recompute"):
        assert f"auto      {key} = " in printed


def test_choices_are_deterministic() -> None:
    first = run(_interleaved(tp=2, gpus=4)).summary["auto_choices"]
    second = run(_interleaved(tp=2, gpus=4)).summary["auto_choices"]
    assert first == second


def test_a_bad_chunks_value_names_the_key() -> None:
    document = _interleaved("deep")
    with pytest.raises(ScenarioError) as info:
        simulate(parse_scenario(document, "deep.yaml"))
    assert "pipeline.chunks" in str(info.value)
    assert "deep.yaml" in str(info.value)
