"""Scale: the shipped 16,384- and 131,072-GPU scenarios, measured in fresh processes.

* ``scenarios/scale/dense_131k.yaml`` (Llama 3 405B on 131,072 H100s, one replica):
  ``clustersim run``'s wall time and peak memory (``VmHWM``), with and without its run
  folder, and the folder's size.
* A 4,096-GPU cut of the same fabric (one pod of 32 racks, dp 32): one replica against
  every replica at flow level -- how far the one-replica answer is, and what it saves.
* ``scenarios/scale/gpt3_175b_16k.yaml`` (GPT-3 175B on 16,384 A100s, one replica) against
  commit 189ff0b in the same run (the hardware spelled out: that commit has no catalog),
  and the same on a 512-GPU cut with every replica at flow level.
* The 16,384-GPU run with every replica at flow level: its estimate (events, memory), not
  run unless ``--full`` (73 M sends of the data-parallel rings).

Every figure is a ratio or a size measured in this run; nothing is asserted.  ``--quick``
leaves out the old commit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios" / "scale"
OLD_COMMIT = "189ff0b"
"""The commit issue 29 measured (GPT-3 175B on 16,384 GPUs: 4.5 s with one replica)."""

_MEASURE = """
import json, os, sys, tempfile, time
import yaml
started = time.perf_counter()
import clustersim.api as api

def status(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key + ":"))

path, write = sys.argv[1], sys.argv[2] == "1"
begun = time.perf_counter()
try:
    result = api.simulate(path, max_events=10**12, max_memory=1e15)
except TypeError:  # an older clustersim without max_memory
    result = api.simulate(path, max_events=10**12)
simulated = time.perf_counter() - begun
size = 0
if write:
    with tempfile.TemporaryDirectory() as folder:
        result.write(folder + "/run")
        size = sum(f.stat().st_size for f in os.scandir(folder + "/run"))
summary = result.summary
print(json.dumps({
    "simulate_s": simulated,
    "total_s": time.perf_counter() - started,
    "peak": status("VmHWM"),
    "iteration_s": summary["iteration_time_s"],
    "classes": len(summary.get("replica_classes") or [None]),
    "folder": size,
}))
"""
"""One run in a fresh process (Linux): simulate (and write the run folder), then print
the seconds, the peak resident memory and the iteration time as JSON."""

DGX_A100_SPELLED = {
    "gpus": 8,
    "nics": 8,
    "gpu": {
        "flops": "312TFLOPS",
        "efficiency": 0.754,
        "memory": "80GB",
        "memory_bandwidth": "2TB/s",
    },
    "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
    "pcie": {"bandwidth": "32GB/s", "latency": "1us"},
    "nic": {"bandwidth": "200Gb/s", "latency": "2us"},
}
"""A DGX A100 without the catalog, for a commit that has none (docs/hardware.md's figures)."""


def measure(path: Path, write: bool = False, pythonpath: str | None = None) -> dict[str, Any]:
    """One run of ``path`` in a fresh process, with ``pythonpath`` first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERSIM_CHECK"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    argv = [sys.executable, "-c", _MEASURE, str(path), "1" if write else "0"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
    return json.loads(done.stdout.splitlines()[-1])


def variant(name: str, folder: Path, **changes: Any) -> Path:
    """A copy of ``scenarios/scale/NAME`` in ``folder`` with keys changed (``a.b=value``
    given as ``a__b``; a value of None drops the key)."""
    doc = yaml.safe_load((SCENARIOS / name).read_text())
    for key, value in changes.items():
        where = doc
        *parents, last = key.split("__")
        for parent in parents:
            where = where.setdefault(parent, {})
        if value is None:
            where.pop(last, None)
        else:
            where[last] = value
    path = folder / f"{len(list(folder.iterdir()))}_{name}"
    path.write_text(yaml.safe_dump(doc))
    return path


def old_checkout(folder: Path) -> Path | None:
    """Commit :data:`OLD_COMMIT` checked out (detached) under ``folder``, or None."""
    target = folder / "old"
    done = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(target), OLD_COMMIT],
        capture_output=True,
        text=True,
    )
    return target if done.returncode == 0 else None


def mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:,.0f} MB"


_BUILD = """
import json, sys, time
from clustersim.scenario import load_scenario
from clustersim.topology import build_topology

def rss():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))

spec = load_scenario(sys.argv[1]).cluster
before = rss()
started = time.perf_counter()
topology = build_topology(spec)
built = time.perf_counter() - started
size = rss() - before
names = [d.name for d in topology.devices.values() if d.kind == "gpu"]
ring = names[::128]  # one GPU per replica: a data-parallel ring across the racks
started = time.perf_counter()
for a, b in zip(ring, ring[1:] + ring[:1]):
    topology.route(a, b, "connection0")
routed = time.perf_counter() - started
print(json.dumps({"gpus": len(names), "links": len(topology.links), "build_s": built,
                  "bytes": size, "route_s": routed / len(ring)}))
"""
"""Build a scenario's topology in a fresh process (Linux): seconds and bytes (the resident
memory it added), and the seconds per route of a ring over one GPU of each replica."""


def topology_build(folder: Path) -> None:
    """The dense fabric at 1, 4 and 32 pods: building and routing per GPU (linear: flat)."""
    print("topology of dense_131k.yaml's fabric, built in a fresh process, per GPU")
    for pods in (1, 4, 32):
        path = variant("dense_131k.yaml", folder, cluster__pods=pods)
        argv = [sys.executable, "-c", _BUILD, str(path)]
        done = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
        gpus = done["gpus"]
        print(
            f"  {gpus:>7,} GPUs, {done['links']:>9,} links: built in {done['build_s']:5.2f} s, "
            f"{done['build_s'] / gpus * 1e6:5.1f} us and {done['bytes'] / gpus / 1e3:4.2f} kB "
            f"per GPU; an ECMP route {done['route_s'] * 1e6:5.1f} us"
        )


def dense(folder: Path) -> None:
    path = SCENARIOS / "dense_131k.yaml"
    alone = measure(path)
    full = measure(path, write=True)
    print("Llama 3 405B on 131,072 H100s, one replica (scenarios/scale/dense_131k.yaml)")
    print(
        f"  simulate: {alone['simulate_s']:.1f} s, peak {mb(alone['peak'])}; clustersim run with "
        f"its run folder: {full['total_s']:.1f} s, peak {mb(full['peak'])}, folder "
        f"{mb(full['folder'])}; iteration {alone['iteration_s']:.3f} s"
    )
    cut = {"cluster__pods": 1, "parallelism__dp": 32, "training__global_batch": 512}
    one = measure(variant("dense_131k.yaml", folder, **cut))
    every = measure(variant("dense_131k.yaml", folder, **cut, parallelism__simulate_replicas="all"))
    gap = one["iteration_s"] / every["iteration_s"] - 1
    print("  its 4,096-GPU cut (one pod of 32 racks, dp 32): one replica against every replica")
    print(
        f"    iteration {one['iteration_s']:.4f} s against {every['iteration_s']:.4f} s "
        f"({gap:+.3%}); simulate {one['simulate_s']:.1f} s against {every['simulate_s']:.1f} s "
        f"({every['simulate_s'] / one['simulate_s']:.1f}x), peak {mb(one['peak'])} against "
        f"{mb(every['peak'])}"
    )


def gpt3(folder: Path, old: Path | None, full: bool) -> None:
    spelled = {"cluster__node": DGX_A100_SPELLED}
    print("GPT-3 175B on 16,384 A100s (scenarios/scale/gpt3_175b_16k.yaml, hardware spelled out)")
    cases = [
        ("16,384 GPUs, one replica", variant("gpt3_175b_16k.yaml", folder, **spelled)),
        (
            "16,384 GPUs, every replica, analytical network (one per class played: exact here)",
            variant(
                "gpt3_175b_16k.yaml",
                folder,
                **spelled,
                parallelism__simulate_replicas="all",
                network__model="analytical",
            ),
        ),
        (
            "512-GPU cut, every replica",
            variant(
                "gpt3_175b_16k.yaml",
                folder,
                **spelled,
                cluster__pods=1,
                cluster__racks_per_pod=8,
                parallelism__dp=8,
                parallelism__simulate_replicas="all",
                training__global_batch=128,
            ),
        ),
    ]
    for what, path in cases:
        now = measure(path)
        line = (
            f"  {what}: simulate {now['simulate_s']:.1f} s, peak {mb(now['peak'])}, "
            f"iteration {now['iteration_s']:.4f} s"
        )
        if old is not None:
            then = measure(path, pythonpath=str(old))
            line += (
                f"; at {OLD_COMMIT}: {then['simulate_s']:.1f} s, peak {mb(then['peak'])}, "
                f"iteration {then['iteration_s']:.4f} s ({then['simulate_s'] / now['simulate_s']:.2f}x"
                " our time)"
            )
        print(line)
    from clustersim.api import prepare
    from clustersim.budget import format_bytes, format_count
    from clustersim.scenario.overrides import load_with_settings, parse_set

    every = ["parallelism.simulate_replicas=all"]
    _, scenario = load_with_settings(
        SCENARIOS / "gpt3_175b_16k.yaml", [parse_set(s) for s in every]
    )
    big = prepare(scenario, max_events=10**12, max_memory=1e15)
    estimate = big.strategy.estimate_memory(outputs=False).total
    print(
        f"  16,384 GPUs, every replica at flow level: {format_count(big.work.events)} events, "
        f"{format_bytes(estimate)} estimated to simulate"
        + ("" if full else " (not run: --full runs it)")
    )
    if full:
        run = measure(variant("gpt3_175b_16k.yaml", folder, parallelism__simulate_replicas="all"))
        print(
            f"    ran: {run['simulate_s']:.0f} s, peak {mb(run['peak'])}, iteration "
            f"{run['iteration_s']:.4f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"leave out commit {OLD_COMMIT}")
    parser.add_argument("--full", action="store_true", help="run 16,384 GPUs every replica")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "cases").mkdir()
        old = None if args.quick else old_checkout(folder)
        if old is None and not args.quick:
            print(f"(commit {OLD_COMMIT} is not in this clone: no comparison with it)")
        try:
            topology_build(folder / "cases")
            dense(folder / "cases")
            gpt3(folder / "cases", old, args.full)
        finally:
            if old is not None:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                    capture_output=True,
                )


if __name__ == "__main__":
    main()
