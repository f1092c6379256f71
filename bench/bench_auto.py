"""The time ``auto`` adds (issue 41): a run that leaves its knobs to clustersim against the
same run with the choices written in.

For GPT-3 175B on 1,024 A100s (scenarios/megatron/gpt3_175b_1024.yaml) and on 16,384 A100s
with one replica simulated (scenarios/scale/gpt3_175b_16k.yaml), each with
``training.recompute`` and ``pipeline.chunks`` (interleaved) left to ``auto``: the CPU
seconds of :func:`clustersim.api.prepare` (where the choices are made: memory plans per
recomputation mode, a played timeline per interleaved depth), then the same scenario with
every value ``auto`` chose written in (its ``auto_choices``), prepared again.  The choices
change nothing the run simulates, so the difference is what choosing costs; the simulation
itself is the same for both and is not run here.  Best of ``--repeat`` runs each, the two
alternating; the ratio and the seconds added are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path
from typing import Any

import yaml

from clustersim.api import auto_choices, prepare
from clustersim.scenario import parse_scenario

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    ("GPT-3 175B, 1,024 GPUs", "megatron/gpt3_175b_1024.yaml"),
    ("GPT-3 175B, 16,384 GPUs, one replica", "scale/gpt3_175b_16k.yaml"),
]
LEFT_TO_AUTO = {"training.recompute": "auto", "pipeline.chunks": "auto"}
"""The knobs each case leaves to ``auto`` (the shipped files pin them)."""


def _with(document: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """``document`` with each dotted key set to its value (a copy)."""
    out = copy.deepcopy(document)
    for key, value in values.items():
        *sections, last = key.split(".")
        place = out
        for section in sections:
            place = place.setdefault(section, {})
        place[last] = value
    return out


def _prepared(document: dict[str, Any], source: str) -> tuple[float, Any]:
    """CPU seconds of preparing ``document``, and the prepared run."""
    scenario = parse_scenario(document, source)
    start = time.process_time()
    prepared = prepare(scenario)
    return time.process_time() - start, prepared


def measure(name: str, file: str, repeat: int) -> None:
    """Print the case's CPU seconds with ``auto`` and with its choices written in."""
    path = ROOT / "scenarios" / file
    document = yaml.safe_load(path.read_text())
    left = _with(document, LEFT_TO_AUTO)
    _, prepared = _prepared(left, str(path))
    chosen = auto_choices(prepared) or {}
    pinned = _with(left, {key: choice.value for key, choice in chosen.items()})
    auto_s, fixed_s = [], []
    for _ in range(repeat):
        auto_s.append(_prepared(left, str(path))[0])
        fixed_s.append(_prepared(pinned, str(path))[0])
    best_auto, best_fixed = min(auto_s), min(fixed_s)
    print(f"{name} ({file})")
    for key, choice in chosen.items():
        print(f"  {key} = {choice.value}")
    print(
        f"  prepare: auto {best_auto:.2f} s CPU, choices written in {best_fixed:.2f} s: "
        f"{best_auto / best_fixed:.2f}x, {best_auto - best_fixed:+.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, best taken")
    parser.add_argument("--quick", action="store_true", help="the 1,024-GPU case only")
    args = parser.parse_args()
    for name, file in CASES[:1] if args.quick else CASES:
        measure(name, file, args.repeat)


if __name__ == "__main__":
    main()
