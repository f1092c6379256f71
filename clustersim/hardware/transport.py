"""What a NIC's transport costs: RDMA (the default, kernel bypass) or TCP (the kernel's
socket stack), for ``cluster.node.nic.transport``.

RDMA moves data NIC to NIC without the CPU: a NIC runs at its line rate (NCCL's collectives
at NCCL's NET share of it, :mod:`clustersim.collectives.bus`) and costs no host CPU.  Over
TCP every byte goes through the kernel (copies between user and socket buffers, per-packet
protocol work), which costs both rate and CPU.  clustersim models TCP by three numbers, each
from a measurement:

* **share of line rate** (:data:`TCP_SHARE` = 0.5): the bandwidth a NIC gives traffic over
  TCP, as a share of its line rate.  The best NCCL socket-transport rings users report reach
  about half the line rate, from 25 to 100 Gb/s (all-reduce bus bandwidth, nccl-tests):

  - 25 Gb/s (Azure VMs, NCCL 2.9.6, tuned sockets and threads): at most 1.7 GB/s of
    3.125 GB/s, 0.544 -- NVIDIA/nccl-tests#83,
    https://github.com/NVIDIA/nccl-tests/issues/83 (NTTTCP gave 21-25 Gb/s on the same VMs);
  - 32 Gb/s (cloud VMs, NCCL 2.4.2, 1 or 2 rings): 1.85 and 1.95 GB/s of 4 GB/s, 0.46-0.49,
    "not ... more than 60% of wire speed" -- NVIDIA/nccl#209,
    https://github.com/NVIDIA/nccl/issues/209;
  - 100 Gb/s (4 nodes of 8 V100, NCCL_MIN_NCHANNELS=4): best bus bandwidth 4-6 GB/s of
    12.5 GB/s, 0.32-0.48 -- NVIDIA/nccl#450, https://github.com/NVIDIA/nccl/issues/450.

  BytePS's own guide says the same of its TCP transport: "a single TCP connection usually
  cannot run up to 25Gbps" (bytedance/byteps ``docs/best-practice.md``, v0.2.0,
  https://github.com/bytedance/byteps/pull/206).  BytePS's OSDI'20 paper (Jiang et al.,
  "A Unified Architecture for Accelerating Distributed DNN Training in Heterogeneous GPU/CPU
  Clusters") runs both transports on 100 Gb/s; its per-transport throughput figures could
  not be read from the sources at hand, so they are not used here.

* **per-message overhead** (:data:`TCP_MESSAGE_S` = 12 us per NIC a message crosses, so
  24 us between two TCP nodes): the system calls, wake-ups and socket bookkeeping of one
  send.  From NVIDIA/nccl-tests#82 (https://github.com/NVIDIA/nccl-tests/issues/82): an 8-byte
  broadcast between two nodes over NCCL's socket transport (NCCL 2.9.6) takes 38.17 us in
  place and 45.82 us out of place, 42.0 us on average; clustersim prices the same call over
  RDMA at 17.3 us (LL's base and NET hop latencies, the cables), which leaves 24.7 us per
  message, 12 us per NIC crossed (rounded down).

* **CPU per byte** (:data:`TCP_CPU_S_PER_BYTE` = 1.9e-10 s, 8 / 42e9): Linux's stack at
  100 Gb/s, Cai et al., "Understanding Host Network Stack Overheads", SIGCOMM 2021
  (https://doi.org/10.1145/3452296.3472888): one core no longer processes a flow at line rate,
  the receiver's kernel-to-user data copy being the bottleneck, and a single long flow with
  every optimization on (TSO/GRO, jumbo frames, aRFS) reaches about 42 Gb/s per core.
  clustersim charges that per byte at both ends (the sender's side costs less; an upper
  bound there).  The 42 Gb/s is the paper's section 3.1 figure as remembered, not re-read
  from a stored copy.

Left out: congestion control and loss (a TCP flow shares a link max-min fairly like any
other), the CPU time as work on the node CPU's compute stream (it is reported, summary
``tcp``, not simulated, so a CPU parameter server is not slowed by its own kernel copies),
and the dependence of the share on tuning (threads, sockets per thread): set
``nic.tcp.share`` for a measured stack.
"""

from __future__ import annotations

from typing import Final

TRANSPORTS: Final = ("rdma", "tcp")
"""What ``cluster.node.nic.transport`` accepts."""
TCP_SHARE: Final = 0.5
"""Bandwidth a TCP NIC gives traffic over its line rate (see the module docstring)."""
TCP_MESSAGE_S: Final = 12e-6
"""Seconds each message pays per TCP NIC it crosses (sender's and receiver's stack)."""
TCP_CPU_S_PER_BYTE: Final = 8 / 42e9
"""Kernel CPU seconds per byte a TCP NIC sends or receives (one core per 42 Gb/s)."""

MEASURED_SMALL_BROADCAST_S: Final = (38.17e-6, 45.82e-6)
"""An 8-byte broadcast between two nodes over NCCL's socket transport, in place and out of
place, seconds (NVIDIA/nccl-tests#82): what :data:`TCP_MESSAGE_S` stands for."""
MEASURED_BUSBW: Final = (
    ("nccl-tests#83", 25e9, 1.7e9),
    ("nccl#209", 32e9, 1.95e9),
    ("nccl#450", 100e9, 6.0e9),
)
"""(source, line rate in bit/s, best NCCL ring all-reduce bus bandwidth over TCP in B/s):
the measurements :data:`TCP_SHARE` stands for, held by tests/test_tcp_transport.py."""
