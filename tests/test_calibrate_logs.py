"""clustersim.calibrate.logs: nccl-tests' text output in every variant the parser reads (real
published logs under tests/fixtures/nccl_tests/, and the format variants written out here),
and the logs it refuses, each with its file, line, what was wrong and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustersim.calibrate.log_text import format_log
from clustersim.calibrate.logs import infer_tool, read_log
from clustersim.errors import ScenarioError

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_tests"

DEVICE = (
    "#  Rank {r:2d} Group  0 Pid {pid:6d} on {host} device {d:2d} [0x{d:02x}] NVIDIA A100-SXM4-80GB"
)
HEADER = (
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def table(rows: list[str], header: str = HEADER) -> str:
    return "\n".join(["#", header, *rows, "# Out of bounds values : 0 OK", ""])


@pytest.mark.parametrize(
    ("name", "nodes", "gpus", "sizes", "first", "last"),
    [
        ("oci_a100_roce_2n_all_reduce.log", 2, 8, 31, (8, 34.74), (8589934592, 67689.0)),
        ("aws_p4d_a100_efa_2n_all_reduce.log", 2, 8, 28, (8, 179.3), (1073741824, 26416.0)),
        ("h100_ib_ndr_2n_all_reduce.log", 2, 8, 14, (1048576, 82.98), (8589934592, 34508.0)),
        ("h100_ib_ndr_4n_all_reduce.log", 4, 8, 14, (1048576, 93.26), (8589934592, 51285.0)),
        ("h100_ib_ndr_8n_all_reduce.log", 8, 8, 14, (1048576, 115.7), (8589934592, 52733.0)),
        ("gcp_a3mega_h100_tcpxo_2n_all_reduce.log", 2, 8, 31, (8, 123.5), (8589934592, 47535.0)),
    ],
)
def test_published_logs_read_as_printed(name, nodes, gpus, sizes, first, last) -> None:
    """Each published log: nodes from the host names, GPUs per node, every size, and the
    time of a size the faster of its out-of-place and in-place columns (to 1e-9)."""
    (run,) = read_log(FIXTURES / name)
    assert (run.nodes, run.gpus_per_node, len(run.rows), run.tool) == (
        nodes,
        gpus,
        sizes,
        "all_reduce",
    )
    for row, (size, time_us) in ((run.rows[0], first), (run.rows[-1], last)):
        assert row.size_bytes == size
        assert row.time_s == pytest.approx(time_us * 1e-6, rel=1e-9)


def test_a_size_is_timed_by_its_faster_column_and_keeps_the_spread(tmp_path) -> None:
    """The faster of the two columns gives the row its time and bus bandwidth, whichever it
    is; the spread is the slower over the faster.  The 8-node H100 log's 8 MiB row
    (out-of-place 1272.4 us, in-place 321.4) reads 321.4 us, spread 3.96."""
    rows = [
        "     1048576        262144     float     sum      -1    317.0    3.31    6.20      0"
        "    93.26   11.24   21.08      0",
        "     2097152        524288     float     sum      -1    150.0    13.98   26.21      0"
        "    160.0   13.11   24.58      0",
        "     4194304       1048576     float     sum      -1    200.0    20.97   39.32      0",
    ]
    head = format_log("all_reduce", 1, 8, [(8, 1e-5)], 1.75).splitlines()[:11]
    (run,) = read_log(write(tmp_path, "x_all_reduce.log", "\n".join([*head, table(rows)])))
    got = [v for r in run.rows for v in (r.time_s * 1e6, r.busbw_GBps, r.spread)]
    expected = [93.26, 21.08, 317.0 / 93.26, 150.0, 26.21, 160 / 150.0, 200.0, 39.32, 1.0]
    assert got == pytest.approx(expected, rel=1e-9)
    (big,) = read_log(FIXTURES / "h100_ib_ndr_8n_all_reduce.log")
    row = next(r for r in big.rows if r.size_bytes == 8 * 2**20)
    assert (row.time_s, row.spread) == pytest.approx((321.4e-6, 1272.4 / 321.4))


def test_the_row_lines_are_the_file_s() -> None:
    """A row remembers its line in the file (the node file cites rows by line)."""
    path = FIXTURES / "oci_a100_roce_2n_all_reduce.log"
    (run,) = read_log(path)
    lines = path.read_text().splitlines()
    assert lines[run.rows[0].line - 1].split()[0] == "8"
    assert lines[run.rows[-1].line - 1].split()[0] == "8589934592"


def test_nccl_debug_lines_of_a_published_log() -> None:
    """The p4d log's NCCL_DEBUG=INFO lines give the NCCL version; '...' and truncation lines
    between them are skipped."""
    (run,) = read_log(FIXTURES / "aws_p4d_a100_efa_2n_all_reduce.log")
    assert run.nccl.version == "2.23.4"
    assert run.gpu_names == ("NVIDIA A100-SXM4-40GB",)


def test_nccl_debug_lines_channels_network_nics_nodes_and_algorithms(tmp_path) -> None:
    """Channels, network, the NICs of NET/IB (RoCE named), comm's nodes and local ranks and
    the algorithm per size, as NCCL prints them."""
    devices = [DEVICE.format(r=r, pid=100 + r, host=f"h{r // 8}", d=r % 8) for r in range(16)]
    info = [
        "h0:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "h0:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [2]mlx5_2:1/RoCE "
        "[3]mlx5_3:1/RoCE [RO]; OOB eth0:10.0.0.1<0>",
        "h0:1:1 [0] NCCL INFO Using network IB",
        "h0:1:1 [0] NCCL INFO comm 0x5555 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
        "h0:1:1 [0] NCCL INFO Channel 00/16 :    0   1   2",
        "h0:1:1 [0] NCCL INFO Channel 15/16 :    0   1   2",
        "h0:1:1 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo TREE proto LL128 channel{Lo..Hi}={0..15}",
    ]
    rows = [
        "     1048576        262144     float     sum      -1    90.00   11.65   21.85      0    90.00   11.65   21.85      0",
        "     4194304       1048576     float     sum      -1   130.00   32.26   60.50      0   130.00   32.26   60.50      0",
    ]
    head = "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 4(factor) warmup iters: 5 iters: 20"
    text = "\n".join([head, "# Using devices", *devices, *info]) + "\n" + table(rows)
    (run,) = read_log(write(tmp_path, "x.log", text))
    nccl = run.nccl
    assert (nccl.version, nccl.channels, nccl.network) == ("2.21.5", 16, "IB")
    assert (nccl.nics_per_node, nccl.link_layer, nccl.nodes, nccl.local_ranks) == (4, "RoCE", 2, 8)
    assert nccl.algorithms == {1048576: "TREE/LL128"}
    assert run.tool == "all_reduce"  # from the AllReduce debug line


@pytest.mark.parametrize(
    "line",
    [
        "h0:1:1 [0] NCCL INFO 4194304 Bytes -> Algo 1 proto 2 time 131.250000",  # 2.20-2.22
        "h0:1:1 [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo 1 proto 2 time 131.25",  # 2.23
        "h0:1:1 [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..15}",
    ],
)
def test_the_tuning_lines_of_every_nccl_version(tmp_path, line: str) -> None:
    """NCCL 2.20-2.22 print a size's algorithm and protocol as numbers without the
    operation (nccl#1453's log), 2.23 with it, 2.24 and later by name: the same
    RING/SIMPLE (NCCL_ALGO_RING 1, NCCL_PROTO_SIMPLE 2 in their nccl_common.h)."""
    rows = [
        "     1048576        262144     float     sum      -1    90.00   11.65   21.85      0    90.00   11.65   21.85      0",
        "     4194304       1048576     float     sum      -1   130.00   32.26   60.50      0   130.00   32.26   60.50      0",
    ]
    devices = [DEVICE.format(r=r, pid=100 + r, host=f"h{r // 8}", d=r % 8) for r in range(16)]
    head = "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 4(factor) warmup iters: 5 iters: 20"
    text = "\n".join([head, "# Using devices", *devices, line]) + "\n" + table(rows)
    (run,) = read_log(write(tmp_path, "all_reduce.log", text))
    assert run.nccl.algorithms == {4194304: "RING/SIMPLE"}


def test_g_and_t_runs_one_process_many_gpus(tmp_path) -> None:
    """A -g 8 run (one process, one pid, eight devices) and a -t 2 -g 4 run: one node of 8."""
    for threads, gpus in ((1, 8), (2, 4)):
        devices = [DEVICE.format(r=r, pid=4242, host="box", d=r) for r in range(8)]
        head = (
            f"# nThread {threads} nGpus {gpus} minBytes 8 maxBytes 64 step: 2(factor) "
            "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0"
        )
        rows = [
            "           8             2     float     sum      -1    20.00    0.00    0.00      0    20.00    0.00    0.00      0",
            "          64            16     float     sum      -1    21.00    0.00    0.01      0    21.00    0.00    0.01      0",
        ]
        path = write(
            tmp_path, f"g{gpus}_all_reduce.log", "\n".join([head, *devices]) + "\n" + table(rows)
        )
        (run,) = read_log(path)
        assert (run.nodes, run.gpus_per_node) == (1, 8)


def test_old_format_error_column_no_root_no_group_and_no_hash(tmp_path) -> None:
    """nccl-tests before #wrong: a float 'error' column, no root column, device lines without
    'Group', and a log pasted where markdown ate the leading '#'."""
    old_header = (
        "       size         count      type   redop     time   algbw   busbw  error"
        "     time   algbw   busbw  error"
    )
    text = "\n".join(
        [
            " nThread 1 nGpus 1 minBytes 32 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 validation: 1",
            " Using devices",
            *(
                f"   Rank  {r} Pid {1821213 + r} on AI-A100 device  {r} [0x00] NVIDIA A100-SXM4-40GB"
                for r in range(8)
            ),
            old_header,
            "        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
            "          32             8     float     sum    30.01    0.00    0.00  0e+00    29.99    0.00    0.00  0e+00",
            "        1024           256     float     sum    31.00    0.03    0.06  0e+00    31.00    0.03    0.06  0e+00",
            " Out of bounds values : 0 OK",
        ]
    )
    (run,) = read_log(write(tmp_path, "issue583_all_reduce.txt", text))
    assert (run.nodes, run.gpus_per_node, len(run.rows)) == (1, 8, 2)
    assert run.rows[0].time_s == pytest.approx(29.99e-6)


def test_launcher_prefixes_are_dropped(tmp_path) -> None:
    """Open MPI's --tag-output ([1,0]<stdout>:) and srun's --label (0: ) prefixes."""
    body = format_log("all_reduce", 2, 4, [(1024, 20e-6), (1048576, 60e-6)], 2 * 7 / 8)
    for prefix in ("[1,0]<stdout>:", "0: "):
        text = "\n".join(prefix + line for line in body.splitlines())
        (run,) = read_log(write(tmp_path, "tagged_all_reduce.log", text))
        assert (run.nodes, run.gpus_per_node, len(run.rows)) == (2, 4, 2)


def test_the_algorithm_and_protocol_the_launch_forced(tmp_path) -> None:
    """``NCCL_ALGO`` / ``NCCL_PROTO set by environment to ...`` lines, with a launcher's
    prefix, before the table or before the header (another rank printed first): the run's
    environment; a file without them has none."""
    rows = [(1024, 20e-6), (1048576, 60e-6)]
    forced = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
    body = format_log("all_reduce", 2, 4, rows, 2 * 7 / 8, environment=forced)
    tagged = "\n".join("[1,0]<stdout>:" + line for line in body.splitlines())
    (run,) = read_log(write(tmp_path, "ring_all_reduce.log", tagged))
    assert run.nccl.environment == forced
    early = "h:9:9 [3] NCCL INFO NCCL_ALGO set by environment to Tree\n" + format_log(
        "all_reduce", 2, 4, rows, 2 * 7 / 8
    )
    (run,) = read_log(write(tmp_path, "tree_all_reduce.log", early))
    assert run.nccl.environment == {"NCCL_ALGO": "Tree"}
    plain = format_log("all_reduce", 2, 4, rows, 2 * 7 / 8)
    (run,) = read_log(write(tmp_path, "plain_all_reduce.log", plain))
    assert run.nccl.environment == {}


def test_the_tool_from_the_log_the_file_name_or_the_table(tmp_path) -> None:
    """all_gather from the command line in the log, alltoall from the file name,
    reduce_scatter and sendrecv from the table (bus factor, redop, root)."""
    rows = [(1048576, 100e-6), (16777216, 400e-6)]
    gather = "$ ./build/all_gather_perf -b 1M -e 16M -f 16 -g 8\n" + format_log(
        "all_gather", 1, 8, rows, 7 / 8
    )
    assert read_log(write(tmp_path, "a.log", gather))[0].tool == "all_gather"
    alltoall = format_log("alltoall", 1, 8, rows, 7 / 8)
    assert read_log(write(tmp_path, "run_alltoall.log", alltoall))[0].tool == "alltoall"
    scatter = format_log("reduce_scatter", 1, 8, rows, 7 / 8)
    assert read_log(write(tmp_path, "b.log", scatter))[0].tool == "reduce_scatter"
    sendrecv = format_log("sendrecv", 1, 8, rows, 1.0)
    (run,) = read_log(write(tmp_path, "c.log", sendrecv))
    assert (run.tool, run.op) == ("sendrecv", None)
    assert infer_tool(run) == "sendrecv"


def test_several_runs_in_one_file(tmp_path) -> None:
    """Each '# nThread' header starts a run: two tools, one file."""
    rows = [(1048576, 100e-6), (16777216, 400e-6)]
    text = (
        "# Collective test starting: all_reduce_perf\n"
        + format_log("all_reduce", 1, 8, rows, 7 / 4)
        + "# Collective test starting: reduce_scatter_perf\n"
        + format_log("reduce_scatter", 1, 8, rows, 7 / 8)
    )
    runs = read_log(write(tmp_path, "both.log", text))
    assert [run.tool for run in runs] == ["all_reduce", "reduce_scatter"]


def refused(path: Path, **kwargs) -> str:
    with pytest.raises(ScenarioError) as info:
        read_log(path, **kwargs)
    return str(info.value)


def test_a_file_that_is_not_nccl_tests_output(tmp_path) -> None:
    message = refused(write(tmp_path, "notes.txt", "hello\nworld\n"))
    assert message.startswith(f"{tmp_path / 'notes.txt'}: <top level>: not nccl-tests output")
    assert "allowed:" in message


def test_wrong_results_are_refused_at_their_line(tmp_path) -> None:
    """#wrong not 0 names the line, the size and the column; so does a FAILED bounds line."""
    text = format_log("all_reduce", 1, 8, [(1024, 20e-6), (2048, 21e-6)], 7 / 4)
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip().startswith("2048"))
    lines[index] = lines[index][: lines[index].rindex("0")] + "3"
    message = refused(write(tmp_path, "w.log", "\n".join(lines)))
    assert f"line {index + 1}: #wrong is 3 at size 2048 (in-place)" in message
    assert "allowed: logs whose #wrong column is 0" in message
    failed = text.replace("Out of bounds values : 0 OK", "Out of bounds values : 12 FAILED")
    assert "Out of bounds values : 12 FAILED" in refused(write(tmp_path, "f.log", failed))


def test_one_size_only_is_refused_unless_only_predicted() -> None:
    """A published one-size log (OCI, 10 GiB): refused for a fit, read for a check."""
    path = FIXTURES / "oci_a100_roce_1n_10g_all_reduce.log"
    message = refused(path)
    assert "line 3: only one size (10737418240 B) was measured" in message
    (run,) = read_log(path, min_sizes=1)
    assert run.rows[0].time_s == pytest.approx(80922e-6)


def test_hosts_with_different_gpu_counts_and_an_ambiguous_tool(tmp_path) -> None:
    text = format_log("all_reduce", 2, 4, [(1024, 20e-6), (2048, 21e-6)], 7 / 4)
    lopsided = "\n".join(line for line in text.splitlines() if "Rank  7 " not in line)
    assert "the hosts ran different numbers of GPUs (node-0: 4, node-1: 3)" in refused(
        write(tmp_path, "l_all_reduce.log", lopsided)
    )
    rows = [(1048576, 100e-6), (16777216, 400e-6)]
    gather = format_log("all_gather", 1, 8, rows, 7 / 8)
    message = refused(write(tmp_path, "mystery.log", gather))
    assert "does not say which operation ran" in message and "--op" in message
    (run,) = read_log(write(tmp_path, "mystery.log", gather), tool="alltoall")
    assert run.op == "alltoall"
