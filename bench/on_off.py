"""Shared by the benchmarks that time one engine switch on and off (a module constant)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any


def timed(run: Callable[[], Any], module: ModuleType, name: str, value: Any) -> tuple[float, Any]:
    """(CPU seconds, result) of ``run`` with ``module.name`` set to ``value`` (restored after)."""
    kept = getattr(module, name)
    setattr(module, name, value)
    try:
        start = time.process_time()
        result = run()
        return time.process_time() - start, result
    finally:
        setattr(module, name, kept)


def off_and_on(
    run: Callable[[], Any], module: ModuleType, name: str, off: Any
) -> tuple[float, float, Any, Any]:
    """``run`` once to warm the caches, then with ``module.name`` at ``off`` and at its own
    value, twice each, alternately: (best CPU s off, best CPU s on, result off, result on)."""
    on = getattr(module, name)
    run()  # the topology's caches, for both ways alike
    (s1, want), (c1, got), (s2, _), (c2, _) = (
        timed(run, module, name, v) for v in (off, on, off, on)
    )
    return min(s1, s2), min(c1, c2), want, got


def played(path: Path, counter: str) -> Callable[[], tuple[str, int, int]]:
    """A run of ``path``: its summary text, components solved and its networks' ``counter``
    (a :class:`~clustersim.network.Network` attribute: ``fill_memo_hits``, ``kept_reuses``)."""
    from clustersim.api import simulate
    from clustersim.network import Network

    def run() -> tuple[str, int, int]:
        seen: list[Network] = []
        original = Network.__init__

        def keep(self: Network, *args: object, **kwargs: object) -> None:
            original(self, *args, **kwargs)
            seen.append(self)

        Network.__init__ = keep  # type: ignore[method-assign]
        try:
            text = simulate(path).summary_json()
        finally:
            Network.__init__ = original  # type: ignore[method-assign]
        return text, sum(n.solver_calls for n in seen), sum(getattr(n, counter) for n in seen)

    return run
