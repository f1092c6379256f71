"""NVLink generations and what their NVSwitches reduce: hardware facts the cluster section reads.

:class:`~clustersim.scenario.cluster.NvlinkSpec` takes a node's NVLink generation from its
``generation`` key or, by default, from its bandwidth (:func:`nvlink_generation`), and the
NVSwitch's reduction throughput under NVLink SHARP from :data:`NVLS_SHARE`.
"""

from __future__ import annotations

NVLINK_GENERATIONS: dict[int, float] = {1: 80e9, 2: 150e9, 3: 300e9, 4: 450e9, 5: 900e9}
"""NVLink generation -> bandwidth per GPU and direction (bytes/s) of the SXM parts that
brought it: P100 (4 links x 20 GB/s), V100 (6 x 25), A100 (12 x 25), H100/H200 (18 x 25),
B200/B300 (18 x 50) -- NVIDIA's datasheets give twice these (both directions)."""

NVLS_SHARE: dict[int, float] = {4: 274.3 / 450.0, 5: 483.0 / 900.0}
"""NVLink generation -> the NVSwitch's all-reduce throughput with NVLink SHARP (NVLS) per
GPU, as a share of the GPU's NVLink bandwidth.  NVLink 4 (H100, NVSwitch 3): 8 GPUs reach a
bus bandwidth of about 480 GB/s, an algorithm bandwidth of 274 GB/s (NVIDIA's maintainer,
NVIDIA/nccl-tests#212; nccl#1455 measures 273 GB/s); NVLink 5 (B200/B300, NVSwitch 4): 483
GB/s algorithm bandwidth on 8 B300 (nccl#2140).  The ratio of the two shares, 0.88, is that
of NCCL's tuner's NVLS efficiencies (0.74 Blackwell / 0.85 Hopper, src/graph/tuning.cc)."""


def nvlink_generation(bandwidth_Bps: float) -> int | None:
    """The NVLink generation whose SXM parts have ``bandwidth_Bps`` per GPU and direction
    (:data:`NVLINK_GENERATIONS`, within 1%), or None."""
    for generation, nominal in NVLINK_GENERATIONS.items():
        if abs(bandwidth_Bps - nominal) <= 0.01 * nominal:
            return generation
    return None
