"""Ring all-reduce with contended rack uplinks, and GPT-3 175B with every replica simulated.

Three ratios, each measured in this one run (nothing is asserted):

1. **Interleaved over rack-major.**  A 1 GB ring all-reduce over the 1,024 GPUs
   of bench/bench_allreduce.py's cluster (16 racks x 8 nodes x 8 GPUs, 4:1
   uplinks, 2 spines), once with ranks in rack-major order (every ring hop but
   one per rack stays inside a rack) and once with ranks interleaved across
   racks (rank ``i`` on rack ``i mod 16``: every hop crosses the spine and 64
   flows share each uplink).  Same bytes, same number of transfers; target:
   interleaved within 3x of rack-major.
2. **Scaling exponent.**  The interleaved ring over the first ``n`` GPUs in
   interleaved order, for n = 256, 512 and 1,024, on the same cluster (so 16,
   32 and 64 flows share an uplink).  Prints the least-squares exponent ``k``
   of ``wall ~ n^k``; target: ``k <= 1.3``.  The transfers alone grow as
   n^2 (a ring of n ranks sends 2(n-1) x n messages), so the exponent of the
   wall time per transfer is printed too, and so is the exponent of the
   rack-major ring over the same sizes: a ring whose every flow is alone on
   its links (no rate solve at all), the floor of any model that simulates
   each transfer.  Both rings play send by send here (``ring_replay.REPLAY``
   off: alone in the simulation, the rack-major ring would be played whole,
   which is not the per-transfer floor these ratios compare with).
3. **GPT-3 175B, all replicas.**  scenarios/megatron/gpt3_175b_1024.yaml with
   ``parallelism.simulate_replicas: all`` and ``network.model: flow``, run in a
   subprocess by this tree: the wall time of the simulation (scenario built,
   ``Simulation.run`` only) and its peak memory, the subprocess's peak RSS minus
   its RSS just before the run (target <= 500 MB).  Then the speed-up over
   commit 59a8d77, the last before the speed-ups this bench was written for
   (714e818: the garbage collector paused during runs; 219a990: pipeline sends
   without a SimPy event per transfer, cached tensor-parallel holds), target
   >= 2.  59a8d77 is extracted with ``git archive`` into a temporary directory
   (skipped with a message when git history is not available).  It cannot read
   today's scenario (it has no hardware catalog), so both trees run
   bench/gpt3_175b_1024_59a8d77.yaml, the same scenario with the presets spelled
   out in 59a8d77's schema (its header says how), and this tree runs it with
   :data:`TODAY_PINS`, the defaults changed since set back to 59a8d77's
   behaviour.  Both then simulate the same iteration: the bench prints both
   simulated times and their difference, and the ratio of the two best wall
   times of two runs each, alternated.

``--quick`` runs smaller sizes (for a smoke test); ``--skip-old`` skips the
old-commit run, ``--skip-rings`` and ``--skip-gpt3`` the two parts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clustersim.collectives import CollectiveCall, ring_replay, run_collective
from clustersim.engine import Simulation
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology

ROOT = Path(__file__).resolve().parent.parent
OLD_COMMIT = "59a8d77"
"""The last commit before the speed-ups of the flow model with every replica (714e818, 219a990)."""
GPT3 = "scenarios/megatron/gpt3_175b_1024.yaml"
GPT3_OLD_SCHEMA = "bench/gpt3_175b_1024_59a8d77.yaml"
"""GPT3 in a schema both trees read (presets spelled out; see its header)."""
PAIRS = 2
"""Runs of each tree on :data:`GPT3_OLD_SCHEMA`; the best wall time of each is compared."""
ALL_REPLICAS_FLOW = {"parallelism": {"simulate_replicas": "all"}, "network": {"model": "flow"}}
TODAY_PINS = {
    "cluster": {"node": {"gpu": {"compute": {"model": "flat"}}}},
    "network": {"protocol": "none", "channels": 1},
    "training": {"memory": {"fragmentation": 0}},
}
"""What this tree needs to simulate :data:`GPT3_OLD_SCHEMA` as 59a8d77 does: the defaults
changed since, set back.  ``compute.model: flat`` (FLOPs at peak x efficiency; the
roofline became the default with shape-aware compute, a9f9f7d), the textbook
collectives (``protocol: none``, one channel; NCCL's defaults came with 9f1c848) and
no fragmentation allowance (0.10 since 43c2bb0; memory only, not time)."""

CLUSTER = {
    "racks": 16,
    "nodes_per_rack": 8,
    "node": {
        "gpus": 8,
        "pcie": {"bandwidth": "32GB/s", "latency": "1us"},
        "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
        "nic": {"bandwidth": "100Gb/s", "latency": "2us"},
    },
    "rack_uplink": {"oversubscription": 4.0},
    "spines": 2,
}


def ring(n: int, interleaved: bool, size_bytes: float) -> tuple[float, float, int]:
    """Ring all-reduce over ``n`` GPUs; ``(wall s, simulated s, transfers)``.

    Rack-major: the first ``n`` GPUs in build order.  Interleaved: rank ``i``
    is GPU ``i // racks`` of rack ``i mod racks`` (the first ``n`` GPUs in
    interleaved order).
    """
    t0 = time.perf_counter()
    doc = {"name": "bench-contended-ring", "cluster": CLUSTER, "workload": {"program": []}}
    topology = build_topology(parse_scenario(doc).cluster)
    gpus = [d.name for d in topology.select("*/gpu*")]
    racks = CLUSTER["racks"]
    if interleaved:
        per_rack = len(gpus) // racks
        gpus = [gpus[(i % racks) * per_rack + i // racks] for i in range(len(gpus))]
    sim = Simulation(topology)
    ring_replay.REPLAY = False  # the per-transfer play (see the module docstring)
    try:
        run_collective(sim, CollectiveCall("allreduce", tuple(gpus[:n]), size_bytes, "ring"))
        sim.run()
    finally:
        ring_replay.REPLAY = True
    return time.perf_counter() - t0, sim.now, sim.network.flows_completed


GPT3_RUNNER = """
import json, resource, sys, time
import yaml
def peak_kB():
    # VmHWM: this process's own peak (ru_maxrss keeps the parent's across exec on Linux)
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
from clustersim.api import prepare
from clustersim.engine import Simulation
from clustersim.scenario import parse_scenario
def merge(into, settings):
    for key, value in settings.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
doc = yaml.safe_load(open(sys.argv[1]))
merge(doc, json.loads(sys.argv[2]))
prepared = prepare(parse_scenario(doc, sys.argv[1]))
sim = Simulation.from_scenario(prepared.scenario, prepared.topology)
prepared.strategy.start(sim)
rss0 = peak_kB()
t0 = time.perf_counter()
sim.run()
wall = time.perf_counter() - t0
rss1 = peak_kB()
print(json.dumps({"wall_s": wall, "sim_s": sim.now, "rss0_kB": rss0, "rss1_kB": rss1,
                  "flows": sim.network.flows_completed}))
"""


def run_gpt3(pythonpath: Path, scenario: str, settings: dict) -> dict:
    """Run ``scenario`` (a path under ROOT) with ``settings`` merged in, by the code under
    ``pythonpath``, in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    out = subprocess.run(
        [sys.executable, "-c", GPT3_RUNNER, str(ROOT / scenario), json.dumps(settings)],
        env=env,
        cwd=pythonpath,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def old_tree(dest: Path) -> bool:
    """Extract commit OLD_COMMIT into ``dest``; False when git history is not available."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", OLD_COMMIT],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    return True


def fitted_exponent(ns: list[int], walls: list[float]) -> float:
    """Least-squares slope of log(wall) over log(n)."""
    xs = [math.log(n) for n in ns]
    ys = [math.log(w) for w in walls]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bytes", type=float, default=1e9)
    parser.add_argument("--quick", action="store_true", help="64..256 GPUs instead of 256..1024")
    parser.add_argument("--skip-old", action="store_true", help=f"do not run {OLD_COMMIT}")
    parser.add_argument("--skip-gpt3", action="store_true")
    parser.add_argument("--skip-rings", action="store_true", help="only the GPT-3 175B part")
    args = parser.parse_args()
    if not args.skip_rings:
        rings(args.bytes, [64, 128, 256] if args.quick else [256, 512, 1024])
    if not args.skip_gpt3:
        gpt3(args.skip_old)


def rings(size_bytes: float, ns: list[int]) -> None:
    """Ratios 1 and 2."""
    big = ns[-1]
    print(f"ring all-reduce of {size_bytes:.3g} B, {CLUSTER['racks']} racks, 4:1 uplinks, 2 spines")
    walls_rm = {}
    for n in ns:
        wall_rm, sim_rm, flows_rm = ring(n, False, size_bytes)
        walls_rm[n] = wall_rm
        print(
            f"  rack-major  {n:5d} GPUs: wall {wall_rm:7.2f} s, simulated {sim_rm * 1e3:8.3f} ms, {flows_rm:,} transfers"
        )
    wall_rm = walls_rm[big]
    walls, per_transfer = {}, {}
    for n in ns:
        wall, sim_s, flows = ring(n, True, size_bytes)
        walls[n] = wall
        per_transfer[n] = wall / flows
        print(
            f"  interleaved {n:5d} GPUs: wall {wall:7.2f} s, simulated {sim_s * 1e3:8.3f} ms, {flows:,} transfers"
        )
    print(f"1. interleaved / rack-major at {big} GPUs: {walls[big] / wall_rm:.2f}x (target <= 3)")
    k = fitted_exponent(ns, [walls[n] for n in ns])
    k1 = fitted_exponent(ns, [per_transfer[n] for n in ns])
    print(f"2. interleaved wall ~ n^{k:.2f} over n = {ns} (target <= 1.3)")
    print(f"   wall per transfer ~ n^{k1:.2f} (the transfers alone grow as n^2)")
    k0 = fitted_exponent(ns, [walls_rm[n] for n in ns])
    print(f"   rack-major wall ~ n^{k0:.2f}: the floor of a per-transfer model (no rate solves)")


def gpt3(skip_old: bool) -> None:
    """Ratio 3 and the simulation's peak memory."""
    new = run_gpt3(ROOT, GPT3, ALL_REPLICAS_FLOW)
    peak_mb = (new["rss1_kB"] - new["rss0_kB"]) / 1024
    print(
        f"3. GPT-3 175B all replicas, flow model: this tree {new['wall_s']:.2f} s "
        f"(simulated {new['sim_s']:.3f} s, {new['flows']:,} transfers), "
        f"simulation peak memory {peak_mb:.0f} MB (RSS peak {new['rss1_kB'] / 1024:.0f} MB; target <= 500)"
    )
    if skip_old:
        return
    with tempfile.TemporaryDirectory() as tmp:
        if not old_tree(Path(tmp)):
            print(f"   {OLD_COMMIT} not run: git history not available")
            return
        runs = [  # alternated, so a load that comes and goes weighs on both trees alike
            (run_gpt3(Path(tmp), GPT3_OLD_SCHEMA, {}), run_gpt3(ROOT, GPT3_OLD_SCHEMA, TODAY_PINS))
            for _ in range(PAIRS)
        ]
    old = min((then for then, _ in runs), key=lambda r: r["wall_s"])
    now = min((now for _, now in runs), key=lambda r: r["wall_s"])
    gap = now["sim_s"] / old["sim_s"] - 1
    same = "the same iteration" if abs(gap) < 1e-9 else f"DIFFERENT iterations ({gap:+.2e})"
    walls = "; ".join(f"{then['wall_s']:.2f} s and {now['wall_s']:.2f} s" for then, now in runs)
    print(
        f"   against {OLD_COMMIT}, both on {GPT3_OLD_SCHEMA} (this tree with TODAY_PINS), "
        f"{PAIRS} runs each, alternated ({OLD_COMMIT} and this tree: {walls}): "
        f"simulated {now['sim_s']:.6f} s and {old['sim_s']:.6f} s ({same}), "
        f"{now['flows']:,} and {old['flows']:,} transfers"
    )
    print(
        f"   speed-up over {OLD_COMMIT}, best wall of each: {old['wall_s']:.2f} s / "
        f"{now['wall_s']:.2f} s = {old['wall_s'] / now['wall_s']:.2f}x (target >= 2)"
    )


if __name__ == "__main__":
    main()
