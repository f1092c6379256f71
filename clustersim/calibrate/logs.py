"""nccl-tests' own text output, read into runs: who ran (ranks, nodes, GPUs per node), which
operation, and per size the measured time.

What nccl-tests prints (NVIDIA/nccl-tests ``src/common.cu``; the variants read here)::

    # nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 ...
    #
    # Using devices
    #  Rank  0 Group  0 Pid  43 on host-a device  0 [0x0f] NVIDIA A100-SXM4-40GB
    #  ...
    #                                          out-of-place                    in-place
    #       size    count   type   redop    root     time   algbw   busbw #wrong     time ...
    #        (B) (elements)                          (us)  (GB/s)  (GB/s)            (us) ...
               8        2  float     sum      -1    36.47    0.00    0.00      0    34.74 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 66.4834

* **Runs**: a file may hold several (each starts at its ``nThread ... nGpus`` line); ``-g``
  (GPUs per thread) and ``-t`` (threads) runs list every rank on its device line, as MPI
  runs over several nodes do: the host names give the nodes, the ranks per host the GPUs
  per node.
* **Columns** are read from the table's own header line: older nccl-tests have no
  ``root`` (or ``redop``) column and an ``error`` column (a float) where newer ones count
  ``#wrong``; the in-place group may be absent.  The time of a size is the faster of its
  out-of-place and in-place times (microseconds in the file, seconds here): both time the
  same collective, and what one column has more is a cost of that column's calls alone --
  a disturbance, or what NCCL does once at an algorithm's first call (since NCCL 2.22 it
  connects the algorithm's peers then, ``NCCL_RUNTIME_CONNECT``), which the out-of-place
  calls, timed first, pay at a size nccl-tests did not warm up (it warms up at the
  smallest and the largest).  :attr:`Row.spread` keeps how far apart the two were.
* **Line prefixes** of launchers are dropped: Open MPI's ``[1,0]<stdout>:`` and srun's
  ``0: ``; so is a leading ``#`` (a log pasted without it reads the same).
* **The operation** is taken from the log itself (``# Collective test starting:
  all_gather_perf``, a command line naming ``alltoall_perf``, NCCL's ``AllGather:`` debug
  lines), else from the file name, else from the table (the bus factor busbw / algbw, the
  ``redop`` and ``root`` columns) where that is unambiguous.
* **NCCL_DEBUG=INFO lines**, where present: the NCCL version, channels (``Channel 00/24``),
  the network (``Using network IB``), the NICs NCCL uses (``NET/IB : Using [0]mlx5_0:1/IB
  ...``, ``found 4 nics``), nodes and local ranks (``comm ... nRanks 16 nNodes 2 localRanks
  8``), the algorithm and protocol per size (``AllReduce: 2097152 Bytes -> Algo NVLS
  proto SIMPLE``; NCCL 2.20-2.23's ``2097152 Bytes -> Algo 4 proto 2``: the fit then runs
  the same at that size, :func:`.fit.point_choice`), and the algorithm or protocol the
  launch forced (``NCCL_ALGO set by environment to Ring``: the fit then runs that
  algorithm, :func:`.fit.forced_choice`).

Refused, with the file, the line, what was wrong and what is allowed
(:class:`~clustersim.errors.ScenarioError`, exit 2 in the CLI): a file with no nccl-tests
run in it, a row whose ``#wrong`` is not 0 (or an ``Out of bounds values`` line that says
FAILED), a run of one size only, hosts running different numbers of GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Problem, ScenarioError

MAX_LOG_BYTES = 64 * 1024 * 1024
"""Largest log file read, bytes."""

TOOLS: dict[str, str | None] = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reduce_scatter": "reducescatter",
    "alltoall": "alltoall",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "sendrecv": None,
    "hypercube": None,
}
"""nccl-tests tool (``all_reduce`` of ``all_reduce_perf``) -> the clustersim operation that
simulates it (None: read, but clustersim has no such operation to fit it with)."""
NCCL_NAMES = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "AllToAll": "alltoall",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
    "SendRecv": "sendrecv",
}
"""NCCL's debug-line names of operations -> nccl-tests tools."""
DTYPE_BYTES = {
    "int8": 1,
    "uint8": 1,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "half": 2,
    "float": 4,
    "double": 8,
    "bfloat16": 2,
    "f8e4m3": 1,
    "f8e5m2": 1,
}
"""nccl-tests' ``type`` column -> bytes per element."""

_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+: )")
_HEADER = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
_DEVICE = re.compile(
    r"^Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*)$"
)
_TOOL = re.compile(r"\b(" + "|".join(TOOLS) + r")_perf\b")
_OUT_OF_BOUNDS = re.compile(r"Out of bounds values\s*:\s*(\d+)\s+(\w+)")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
_CHANNEL = re.compile(r"NCCL INFO Channel \d+/(\d+)")
_COLL_CHANNELS = re.compile(r"NCCL INFO (\d+) coll channels")
_NETWORK = re.compile(r"NCCL INFO Using network (\S+(?: \S+)?)")
_NET_IB = re.compile(r"NCCL INFO NET/IB : Using (.*?)(?:; OOB|$)")
_FOUND_NICS = re.compile(r"found (\d+) nics")
_OFI_PLUGIN = re.compile(r"NCCL INFO NET/OFI Initializing (aws-ofi-nccl \S+)")
_COMM = re.compile(r"nRanks (\d+) nNodes (\d+) localRanks (\d+)")
_ALGO = re.compile(r"NCCL INFO (?:(\w+): )?(\d+) Bytes -> Algo (\w+) proto (\w+)")
NCCL_ALGORITHM_IDS = {
    "0": "TREE",
    "1": "RING",
    "2": "COLLNET_DIRECT",
    "3": "COLLNET_CHAIN",
    "4": "NVLS",
    "5": "NVLS_TREE",
    "6": "PAT",
}
"""NCCL 2.20-2.23 print the algorithm of their tuning lines as a number (``Algo 1``): its
``NCCL_ALGO_*`` (src/include/nccl_common.h at v2.20.3 and v2.23.4); later ones print the
name."""
NCCL_PROTOCOL_IDS = {"0": "LL", "1": "LL128", "2": "SIMPLE"}
"""The same for the protocol (``proto 2``): ``NCCL_PROTO_*``."""
_ENV = re.compile(r"NCCL INFO (NCCL_ALGO|NCCL_PROTO) set by environment to (\S+)")
_NUMBER = re.compile(r"^[0-9]")


@dataclass(frozen=True)
class Row:
    """One size of a run, as measured."""

    size_bytes: int
    """nccl-tests' size column (bytes)."""
    time_s: float
    """The faster of the out-of-place and in-place times (seconds; see the module
    docstring)."""
    busbw_GBps: float
    """nccl-tests' bus bandwidth of that column (GB/s, 1e9 bytes/s)."""
    line: int
    """Line of the row in its file (1-based)."""
    spread: float = 1.0
    """The slower column's time over the faster's (1 with one column)."""


@dataclass
class NcclInfo:
    """What NCCL_DEBUG=INFO lines said (None or empty where nothing did)."""

    version: str | None = None
    channels: int | None = None
    """Channels of a collective (the largest ``Channel xx/N`` or ``N coll channels``)."""
    network: str | None = None
    """NCCL's network transport (``IB``, ``Socket``, ``AWS Libfabric``)."""
    nics_per_node: int | None = None
    """NICs NCCL uses on a node (``NET/IB : Using [0]... [7]...``, ``found 8 nics``)."""
    link_layer: str | None = None
    """``IB`` or ``RoCE`` where the NET/IB line says."""
    plugin: str | None = None
    """The network plugin and its version where a line names it (``aws-ofi-nccl 1.13.2-aws``:
    ``NET/OFI Initializing aws-ofi-nccl ...``)."""
    nodes: int | None = None
    local_ranks: int | None = None
    algorithms: dict[int, str] = field(default_factory=dict)
    """Size (bytes) -> ``ALGO/PROTO`` NCCL chose (``RING/LL``)."""
    environment: dict[str, str] = field(default_factory=dict)
    """``NCCL_ALGO`` and ``NCCL_PROTO`` as the log's environment forced them (``NCCL INFO
    NCCL_ALGO set by environment to Ring``), anywhere in the file: one launch's setting."""


@dataclass
class Run:
    """One nccl-tests run: its ranks and its rows."""

    file: str
    line: int
    """Line of its ``nThread ... nGpus`` header."""
    tool: str | None
    """nccl-tests tool (``all_reduce``), None if the log does not say."""
    hosts: dict[str, int]
    """Host -> ranks on it, in order of first appearance."""
    gpu_names: tuple[str, ...]
    """The device names of the ranks (``NVIDIA A100-SXM4-40GB``), distinct, in order."""
    rows: list[Row]
    nccl: NcclInfo
    dtype: str = "float"
    redop: str | None = None
    root: int | None = None

    @property
    def ranks(self) -> int:
        return sum(self.hosts.values())

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @property
    def gpus_per_node(self) -> int:
        return next(iter(self.hosts.values()), 0)

    @property
    def op(self) -> str | None:
        """The clustersim operation that simulates this run (None: none does)."""
        return TOOLS.get(self.tool) if self.tool else None

    def describe(self) -> str:
        """``all_reduce_perf, 2 nodes x 8 GPUs, 31 sizes 8 B .. 8 GiB`` (for reports)."""
        sizes = [row.size_bytes for row in self.rows]
        nodes = f"{self.nodes} node{'s' if self.nodes > 1 else ''}"
        return (
            f"{self.tool or '?'}_perf, {nodes} x {self.gpus_per_node} GPUs, "
            f"{len(sizes)} size{'s' if len(sizes) > 1 else ''} {_bytes(min(sizes))}"
            + (f" .. {_bytes(max(sizes))}" if len(sizes) > 1 else "")
        )


def _bytes(size: int) -> str:
    """A power-of-two size in words (``8 GiB``), else bytes."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _refuse(file: str, line: int, message: str, allowed: str = "") -> ScenarioError:
    return ScenarioError(Problem(f"line {line}" if line else "", message, allowed), file)


class _Reader:
    """Reads one file's lines into runs (one pass, state per run)."""

    def __init__(self, file: str, text: str) -> None:
        self.file = file
        self.lines = text.splitlines()
        self.runs: list[Run] = []
        self.run: Run | None = None
        self.columns: list[str] = []
        self.tool_hint: str | None = _tool_in(Path(file).name)
        self.nccl = NcclInfo()
        self.environment: dict[str, str] = {}
        """The NCCL_ALGO and NCCL_PROTO the file's lines say were set (its launch's)."""
        self.devices: list[tuple[str, str]] = []
        self.seen_devices: set[int] = set()

    def read(self) -> list[Run]:
        for number, raw in enumerate(self.lines, start=1):
            self._line(number, raw)
        self._close()
        for run in self.runs:  # printed at NCCL's start, before or after a run's header
            run.nccl.environment.update(self.environment)
        if not self.runs:
            raise _refuse(
                self.file,
                0,
                "not nccl-tests output: no '# nThread N nGpus N minBytes ...' header followed "
                "by a '#  size  count  type ... time  algbw  busbw' table",
                "the text all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf "
                "or sendrecv_perf print, as printed (NCCL_DEBUG lines may be mixed in)",
            )
        return self.runs

    def _line(self, number: int, raw: str) -> None:
        line = _PREFIX.sub("", raw).rstrip()
        self._nccl_line(line)
        text = line.lstrip().lstrip("#").strip()
        header = _HEADER.search(text)
        if header:
            self._close()
            self._open(number)
            return
        tool = _TOOL.search(text)
        if tool and not text.startswith("Rank"):
            self.tool_hint = tool.group(1)
            if self.run is not None and self.run.tool is None:
                self.run.tool = tool.group(1)
        if self.run is None:
            return
        device = _DEVICE.match(text)
        if device:
            rank = int(device.group(1))
            if rank not in self.seen_devices:
                self.seen_devices.add(rank)
                self.devices.append((device.group(2), device.group(4).strip()))
            return
        words = text.split()
        if "size" in words and "busbw" in words and "time" in words:
            self.columns = [w.lstrip("#") for w in words]
            return
        if _NUMBER.match(text) and self.columns and not line.lstrip().startswith("#"):
            self._row(number, words)
            return
        self._footer(number, text)

    def _open(self, number: int) -> None:
        self.run = Run(self.file, number, self.tool_hint, {}, (), [], NcclInfo())
        self.nccl = self.run.nccl
        self.columns, self.devices, self.seen_devices = [], [], set()

    def _close(self) -> None:
        run = self.run
        if run is None:
            return
        for host, _ in self.devices:
            run.hosts[host] = run.hosts.get(host, 0) + 1
        run.gpu_names = tuple(dict.fromkeys(name for _, name in self.devices if name))
        self.runs.append(run)
        self.run = None

    def _nccl_line(self, line: str) -> None:
        info = self.nccl
        for pattern, apply in _NCCL_FIELDS:
            found = pattern.search(line)
            if found:
                apply(info, found)
        env = _ENV.search(line)
        if env:
            self.environment[env.group(1)] = env.group(2)
        algo = _ALGO.search(line)
        if algo:
            name = NCCL_ALGORITHM_IDS.get(algo.group(3), algo.group(3))
            proto = NCCL_PROTOCOL_IDS.get(algo.group(4), algo.group(4))
            info.algorithms.setdefault(int(algo.group(2)), f"{name}/{proto}")
            if self.run is not None and self.run.tool is None and algo.group(1):
                self.run.tool = NCCL_NAMES.get(algo.group(1))

    def _row(self, number: int, words: list[str]) -> None:
        assert self.run is not None
        columns = self.columns
        if len(words) != len(columns) and len(words) * 2 != len(columns) + _lead(columns):
            raise _refuse(
                self.file,
                number,
                f"a row of {len(words)} fields under a header of {len(columns)} columns",
                "rows as nccl-tests prints them, one field per column of the header above",
            )
        lead = _lead(columns)
        fields = dict(zip(columns[:lead], words[:lead]))
        try:
            size = int(fields["size"])
        except (KeyError, ValueError):
            raise _refuse(self.file, number, f"size {words[0]!r} is not a whole number") from None
        self.run.dtype = fields.get("type", self.run.dtype)
        self.run.redop = fields.get("redop", self.run.redop)
        if "root" in fields and fields["root"].lstrip("-").isdigit():
            self.run.root = int(fields["root"])
        groups = [words[i : i + 4] for i in range(lead, len(words), 4)]
        times, buses = [], []
        for place, group in zip(("out-of-place", "in-place"), groups):
            time_us, _, busbw = (self._number(number, w) for w in group[:3])
            _check_wrong(self.file, number, size, place, group[3])
            times.append(time_us)
            buses.append(busbw)
        if size <= 0:
            return  # nothing moves: a size of 0 measures NCCL's call, not the links
        fastest = min(range(len(times)), key=times.__getitem__)
        spread = max(times) / times[fastest] if times[fastest] > 0 else 1.0
        row = Row(size, times[fastest] * 1e-6, buses[fastest], number, spread)
        self.run.rows.append(row)

    def _number(self, number: int, word: str) -> float:
        try:
            return float(word)
        except ValueError:
            raise _refuse(
                self.file, number, f"{word!r} is not a number", "times in us, GB/s"
            ) from None

    def _footer(self, number: int, text: str) -> None:
        bounds = _OUT_OF_BOUNDS.search(text)
        if bounds and (int(bounds.group(1)) != 0 or bounds.group(2).upper() != "OK"):
            raise _refuse(
                self.file,
                number,
                f"nccl-tests says {bounds.group(0)!r}: the run computed wrong results, so its "
                "times do not measure a correct collective",
                "logs whose 'Out of bounds values' line says 0 OK",
            )


def _lead(columns: Sequence[str]) -> int:
    """Columns before the first ``time`` (size, count, type, redop, root)."""
    return columns.index("time") if "time" in columns else len(columns)


def _check_wrong(file: str, line: int, size: int, place: str, wrong: str) -> None:
    """``#wrong`` (a count) must be 0, an old ``error`` column (a float) small; N/A passes."""
    if wrong.upper() == "N/A":
        return
    try:
        value = float(wrong.rstrip("*"))
    except ValueError:
        value = float("inf")
    bad = value != 0 if wrong.isdigit() else (value > 1e-3 or wrong.endswith("*"))
    if bad:
        raise _refuse(
            file,
            line,
            f"#wrong is {wrong} at size {size} ({place}): the run computed wrong results, so "
            "its times do not measure a correct collective",
            "logs whose #wrong column is 0 (or N/A) on every row",
        )


def _set(attribute: str, convert: type = int, largest: bool = False):  # noqa: ANN202
    def apply(info: NcclInfo, found: re.Match[str]) -> None:
        value = convert(found.group(1))
        old = getattr(info, attribute)
        if largest and old is not None:
            value = max(old, value)
        setattr(info, attribute, value)

    return apply


def _net_ib(info: NcclInfo, found: re.Match[str]) -> None:
    devices = re.findall(r"\[\d+\]\S+", found.group(1))
    if devices:
        info.nics_per_node = max(info.nics_per_node or 0, len(devices))
        info.link_layer = "RoCE" if any("RoCE" in d for d in devices) else "IB"


def _comm(info: NcclInfo, found: re.Match[str]) -> None:
    info.nodes, info.local_ranks = int(found.group(2)), int(found.group(3))


_NCCL_FIELDS = (
    (_VERSION, _set("version", str)),
    (_CHANNEL, _set("channels", int, largest=True)),
    (_COLL_CHANNELS, _set("channels", int, largest=True)),
    (_NETWORK, _set("network", str)),
    (_NET_IB, _net_ib),
    (_FOUND_NICS, _set("nics_per_node", int, largest=True)),
    (_OFI_PLUGIN, _set("plugin", str)),
    (_COMM, _comm),
)
"""(pattern, what a match sets) for the NCCL_DEBUG lines read."""


def _tool_in(text: str) -> str | None:
    """The nccl-tests tool a file name names (``all_gather`` in ``ag_all_gather.log`` or
    ``allgather.txt``; the longest name first, so that ``reduce_scatter`` is no ``reduce``)."""
    plain = text.lower().replace("_", "").replace("-", "")
    for tool in sorted(TOOLS, key=lambda t: len(t.replace("_", "")), reverse=True):
        if tool.replace("_", "") in plain:
            return tool
    return None


def infer_tool(run: Run) -> str | None:
    """The tool a run's table implies where the log names none: from the bus factor (busbw /
    algbw: 2(n-1)/n all-reduce, (n-1)/n the gathers and scatters, 1 the others), the
    ``redop`` and ``root`` columns; None when that leaves a choice (all_gather and alltoall
    print alike)."""
    n = run.ranks
    big = max(run.rows, key=lambda row: row.size_bytes, default=None)
    if big is None or n < 2 or big.time_s <= 0:
        return None
    factor = big.busbw_GBps * 1e9 * big.time_s / big.size_bytes
    candidates = {"all_reduce": 2 * (n - 1) / n, "shares": (n - 1) / n, "ones": 1.0}
    kind = min(candidates, key=lambda k: abs(candidates[k] - factor))
    if abs(candidates[kind] - factor) > 0.03 * candidates[kind]:
        return None
    reduces = run.redop not in (None, "none")
    rooted = run.root is not None and run.root >= 0
    table = {
        ("all_reduce", True, False): "all_reduce",
        ("shares", True, False): "reduce_scatter",
        ("ones", True, True): "reduce",
        ("ones", False, True): "broadcast",
        ("ones", True, False): "sendrecv",
    }
    return table.get((kind, reduces, rooted))


def check_run(run: Run, min_sizes: int = 2) -> None:
    """Refuse a run clustersim cannot use (ScenarioError at its header line): no ranks, hosts
    running different numbers of GPUs, fewer than ``min_sizes`` sizes (one size cannot be
    fitted; a log only predicted may have one), no operation known."""
    where = (run.file, run.line)
    if not run.hosts:
        raise _refuse(
            *where,
            "no device lines ('#  Rank  0 Group  0 Pid ... on HOST device 0 [...] NAME'): the log "
            "does not say how many GPUs and nodes ran",
            "the log as nccl-tests prints it, with its '# Using devices' lines",
        )
    counts = sorted(set(run.hosts.values()))
    if len(counts) > 1:
        detail = ", ".join(f"{host}: {n}" for host, n in run.hosts.items())
        raise _refuse(
            *where,
            f"the hosts ran different numbers of GPUs ({detail})",
            "runs with the same number of GPUs on every node",
        )
    if run.ranks < 2:
        raise _refuse(*where, "one rank only: nothing moves", "runs of 2 GPUs or more")
    sizes = sorted({row.size_bytes for row in run.rows})
    if len(sizes) < min_sizes:
        what = f"only one size ({sizes[0]} B) was" if sizes else "no size above 0 B was"
        raise _refuse(
            *where,
            f"{what} measured: one size cannot separate a latency from a bandwidth",
            "a run over a range of sizes (nccl-tests -b 8 -e 8G -f 2)",
        )
    if run.tool is None:
        run.tool = infer_tool(run)
    if run.tool is None:
        raise _refuse(
            *where,
            "the log does not say which operation ran (all_gather and alltoall print alike)",
            "a file name with the tool in it (alltoall.log), the command line in the log, or "
            "--op all_gather | alltoall | ...",
        )


def read_log(path: str | Path, tool: str | None = None, min_sizes: int = 2) -> list[Run]:
    """Every run in the nccl-tests log ``path``, checked (:func:`check_run`, each of
    ``min_sizes`` sizes or more); ``tool`` names the nccl-tests tool of runs whose log does
    not say (``alltoall``).  ScenarioError naming the file (and line) for a file that cannot
    be read or used."""
    file = str(path)
    try:
        if not Path(path).is_file():
            what = "is not a regular file" if Path(path).exists() else "no such file"
            raise _refuse(file, 0, what, "an nccl-tests log (a regular file)")
        data = Path(path).read_bytes()
    except OSError as exc:
        raise _refuse(file, 0, f"cannot be read ({exc.strerror})", "an nccl-tests log") from None
    if len(data) > MAX_LOG_BYTES:
        raise _refuse(file, 0, f"larger than {MAX_LOG_BYTES // 2**20} MiB", "an nccl-tests log")
    text = data.decode("utf-8", errors="replace")
    runs = _Reader(file, text).read()
    for run in runs:
        if run.tool is None and tool is not None:
            run.tool = tool
        check_run(run, min_sizes)
    return runs


def read_logs(
    paths: Iterable[str | Path], tool: str | None = None, min_sizes: int = 2
) -> list[Run]:
    """The runs of every log, in order (:func:`read_log`)."""
    return [run for path in paths for run in read_log(path, tool, min_sizes)]
