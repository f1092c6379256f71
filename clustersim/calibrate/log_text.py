"""nccl-tests output written from times: what :func:`~clustersim.calibrate.logs.read_log`
reads, for the calibration's own tests and examples (a log of clustersim's times on a
known node, with the NCCL_DEBUG lines a launch would print)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .logs import NCCL_NAMES

_NCCL_OPS = {tool: name for name, tool in NCCL_NAMES.items()}
"""nccl-tests tools -> NCCL's debug-line names of their operations."""


def format_log(
    tool: str,
    nodes: int,
    gpus_per_node: int,
    rows: Sequence[tuple[int, float]],
    bus_factor: float,
    gpu_name: str = "NVIDIA A100-SXM4-80GB",
    environment: Mapping[str, str] | None = None,
    algorithms: Mapping[int, str] | None = None,
) -> str:
    """A log as nccl-tests prints it (MPI launch, one GPU per rank) for ``rows`` of (size in
    bytes, time in seconds), the same time in and out of place: what :func:`read_log`
    reads.  ``bus_factor`` is the operation's (2(n-1)/n for all-reduce); ``environment``:
    NCCL variables the launch set (``{"NCCL_ALGO": "Ring"}``), each printed as NCCL_DEBUG=INFO
    prints it; ``algorithms``: size -> ``ALGO/PROTO`` NCCL ran (``RING/SIMPLE``), printed
    before the size's row as NCCL's tuning lines are."""
    ranks = nodes * gpus_per_node
    sizes = [size for size, _ in rows]
    lines = [
        f"# nThread 1 nGpus 1 minBytes {min(sizes)} maxBytes {max(sizes)} step: 2(factor) "
        "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for rank in range(ranks):
        host, device = divmod(rank, gpus_per_node)
        lines.append(
            f"#  Rank {rank:2d} Group  0 Pid {1000 + rank:6d} on node-{host} device "
            f"{device:2d} [0x{16 + device:02x}] {gpu_name}"
        )
    lines += [
        f"node-0:1000:1000 [0] NCCL INFO {name} set by environment to {value}"
        for name, value in (environment or {}).items()
    ]
    redop = "none" if tool in ("all_gather", "alltoall", "broadcast") else "sum"
    per_rank = tool in ("all_gather", "reduce_scatter", "alltoall")
    lines += [
        "#",
        "#" + " " * 62 + "out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)     "
        "       (us)  (GB/s)  (GB/s)       ",
    ]
    for size, time_s in rows:
        if algorithms and size in algorithms:
            algo, _, proto = algorithms[size].partition("/")
            lines.append(
                f"node-0:1000:1000 [0] NCCL INFO {_NCCL_OPS.get(tool, tool)}: {size} Bytes -> "
                f"Algo {algo} proto {proto} time 0.000000"
            )
        count = size // 4 // (ranks if per_rank else 1)
        algbw = size / time_s / 1e9
        cells = f"{time_s * 1e6:8.2f} {algbw:7.2f} {algbw * bus_factor:7.2f}      0"
        lines.append(f"{size:12d}  {count:12d}     float  {redop:>6}      -1  {cells}  {cells}")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0", "#", ""]
    return "\n".join(lines)
