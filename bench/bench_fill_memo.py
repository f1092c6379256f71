"""Small components' rates remembered by their routes, on and off (issue 43 item 4).

:mod:`clustersim.network.rates` answers a component of at most ``FILL_MEMO_MAX_FLOWS``
flows from a memo when a component of the same routes was solved before (and no capacity
changed since): the rings of a data-parallel flush meet the same routes at every step.  For
each case this runs the same simulation without the memo (``FILL_MEMO_MAX_FLOWS = 0``) and
with it in this process (after one run that warms the topology's caches, then each way
twice, alternately, the fastest kept) and prints both CPU times, their ratio, the share of
components answered from the memo, and whether the summaries are the same bytes (they
must be).  Nothing is asserted.

Cases: every replica at flow level on the 1,024-GPU cut of the 16k fabric (GPT-3 175B, one
pod of 16 racks, dp 16: the per-send reference of ``bench_what_ifs.py --cuts``), BERT-large
with one parameter server per worker node (12,800 components of up to 256 flows, median
2), and the NeMo Llama 3.1 405B fp8 run on 1,024 H100s (ring attention: 213,600 components,
most of two flows, where the memo has little to save and must not cost).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from clustersim.network import rates

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import variant  # noqa: E402
from on_off import off_and_on, played  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def cut(folder: Path) -> Path:
    """The 1,024-GPU cut of ``scenarios/scale/gpt3_175b_16k.yaml``, every replica per send."""
    return variant(
        "gpt3_175b_16k.yaml",
        folder,
        cluster__pods=1,
        parallelism__dp=16,
        training__global_batch=256,
        parallelism__simulate_replicas="all",
        network={"model": "flow"},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the BERT-large case only")
    args = parser.parse_args()
    os.environ["CLUSTERSIM_CHECK"] = "0"  # the engine alone, as a user's run
    with tempfile.TemporaryDirectory() as tmp:
        cases = {}
        if not args.quick:
            cases["1,024-GPU cut, every replica per send"] = played(
                cut(Path(tmp)), "fill_memo_hits"
            )
        cases["BERT-large, one PS per worker node"] = played(
            ROOT / "scenarios/ps_vs_ring/bert_large_ps_servers_1x.yaml", "fill_memo_hits"
        )
        if not args.quick:
            cases["NeMo Llama 3.1 405B fp8, 1,024 H100"] = played(
                ROOT / "scenarios/production/nemo2606_llama31_405b_1024_fp8.yaml", "fill_memo_hits"
            )
        print(
            f"{'case':<40} {'solved s':>9} {'memo s':>8} {'speed-up':>9} {'hits':>6}  same summary"
        )
        for name, run in cases.items():
            solved, memo, want, got = off_and_on(run, rates, "FILL_MEMO_MAX_FLOWS", 0)
            share = got[2] / got[1] if got[1] else 0.0
            print(
                f"{name:<40} {solved:9.2f} {memo:8.2f} {solved / memo:8.2f}x {share:6.1%}"
                f"  {got[0] == want[0]}"
            )


if __name__ == "__main__":
    main()
