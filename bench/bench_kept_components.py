"""Large components kept between recomputations, on and off (issue 42 item 1, issue 43).

A parameter server's pushes and pulls make components of thousands of flows; most of its
recomputations follow departures alone, and :mod:`clustersim.network.rates` then solves
the component it kept after its last search again without searching for it
(``KEEP_COMPONENTS``).  For each case this runs the same simulation with every component
searched (``KEEP_COMPONENTS = False``) and with the kept one in this process (after one
run that warms the topology's caches, then each way twice, alternately, the fastest kept)
and prints both CPU times, their ratio, the share of components solved from the kept one,
and whether the summaries are the same bytes (they must be).  Nothing is asserted.

Cases: ResNet-50 and BERT-large with their parameters sharded over the CPUs of all 16
nodes (ps_vs_ring), and parameter servers with GEO (periodic) synchronisation.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from clustersim.network import rates

sys.path.insert(0, str(Path(__file__).resolve().parent))
from on_off import off_and_on, played  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "ResNet-50, parameters sharded over 16 nodes": "ps_vs_ring/resnet50_ps_sharded.yaml",
    "BERT-large, parameters sharded over 16 nodes": "ps_vs_ring/bert_large_ps_sharded.yaml",
    "parameter servers, GEO synchronisation": "parameter_server/geo.yaml",
}


def main() -> None:
    os.environ["CLUSTERSIM_CHECK"] = "0"  # the engine alone, as a user's run
    print(f"{'case':<46} {'searched s':>10} {'kept s':>7} {'speed-up':>9} {'kept':>6}  same")
    for name, file in CASES.items():
        run = played(ROOT / "scenarios" / file, "kept_reuses")
        searched, kept, want, got = off_and_on(run, rates, "KEEP_COMPONENTS", False)
        share = got[2] / got[1] if got[1] else 0.0
        print(
            f"{name:<46} {searched:10.2f} {kept:7.2f} {searched / kept:8.2f}x {share:6.1%}"
            f"  {got[0] == want[0]}"
        )


if __name__ == "__main__":
    main()
