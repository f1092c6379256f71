"""``make fuzz``: run thousands of generated command lines and scenario documents through
``clustersim`` and print the tally (runs, exit codes, tracebacks, hangs, and each class
of finding with its smallest example).

The generators, the runner and the oracle are the test suite's (``tests/fuzzing.py``);
``make test`` runs a small derandomised sample of the same.  Exit code 1 if any run
printed a traceback or hung.

    python bench/fuzz.py                  # 10,000 examples (CLUSTERSIM_FUZZ_EXAMPLES)
    python bench/fuzz.py -n 500 --seed 7  # another sample
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("CLUSTERSIM_CHECK", "1")  # as in the test suite: invariants checked

from tests import fuzzing  # noqa: E402

DEFAULT_EXAMPLES = 10_000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-n",
        "--examples",
        type=int,
        default=int(os.environ.get("CLUSTERSIM_FUZZ_EXAMPLES", DEFAULT_EXAMPLES)),
        help=f"examples to run (default: $CLUSTERSIM_FUZZ_EXAMPLES or {DEFAULT_EXAMPLES:,})",
    )
    parser.add_argument(
        "--seed", type=int, help="random seed (default: derandomised, as in make test)"
    )
    parser.add_argument(
        "--limit", type=float, default=fuzzing.HANG_S, help="seconds before a run is a hang"
    )
    parser.add_argument(
        "--kind",
        choices=["all", "documents", "commands"],
        default="all",
        help="document runs (run/validate of generated scenarios), command lines of any "
        "command, or both (default)",
    )
    args = parser.parse_args()
    strategy = {
        "all": fuzzing.invocations(),
        "documents": fuzzing.document_runs(),
        "commands": fuzzing.command_lines(),
    }[args.kind]
    started = time.monotonic()
    every = max(1, args.examples // 20)

    def progress(tally: fuzzing.Tally, invocation: object, found: list[fuzzing.Finding]) -> None:
        for finding in found:
            print(f"  run {tally.runs}: {finding.cls}", file=sys.stderr, flush=True)
        if tally.runs % every == 0:
            elapsed = time.monotonic() - started
            print(
                f"{tally.runs} runs, {tally.tracebacks} tracebacks, {tally.hangs} hangs, "
                f"{elapsed:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    tally = fuzzing.campaign(
        args.examples, strategy, limit_s=args.limit, seed=args.seed, on_run=progress
    )
    elapsed = time.monotonic() - started
    print(tally.report())
    print(f"\n{elapsed:.0f} s in all, {1000 * elapsed / max(1, tally.runs):.0f} ms per example")
    return 1 if tally.tracebacks or tally.hangs else 0


if __name__ == "__main__":
    sys.exit(main())
