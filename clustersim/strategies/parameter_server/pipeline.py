"""Per-key pipelining of parameter-server traffic (BytePS, Jiang et al. OSDI 2020, §3).

Two things let a pull start while other keys are still being pushed
(``data_parallel.ps.partition_bytes``; see
:mod:`clustersim.strategies.parameter_server.strategy`):

* **Partitions.**  Every key larger than ``partition_bytes`` is cut into
  ``ceil(key bytes / partition_bytes)`` equal partitions, which are keys of
  their own (``name:0``, ``name:1``, ...): each is pushed, aggregated,
  updated and pulled on its own and placed on a server like any key.
* **Ordered connections.**  Each (sender, receiver) pair -- a worker's
  connection to a server, and back -- carries one message at a time, in the
  order they were sent, as one TCP connection of ps-lite or BytePS does.
  Without it, a worker's pushes would all start at once, share its NIC fairly
  and all end together with the last byte, so no key's aggregation could close
  before the whole model had arrived.

* **Scheduling credit** (``data_parallel.ps.credit``, BytePS's
  ``BYTEPS_SCHEDULING_CREDIT``, ByteScheduler's credit): a worker keeps at most
  ``credit`` pushes on the wire across all its connections, the others wait in the
  order their gradients were ready.  A partition then arrives at about the worker's
  whole NIC rate (``partition / B``) instead of its share over every server
  (``partition / (B / k)``), so the pipeline fills after one partition whatever the
  number of servers -- when no other worker pushes to the same server at that moment
  (synchronised workers all do: then a worker with one push on the wire gets a share of
  that server's NIC).  Unset: no limit (BytePS's default, scheduling off).

Without ``partition_bytes`` none applies: today's keys, and every message
starts at once (:class:`Connections` with ``ordered=False``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...engine import Simulation

Block = tuple[str, int, float]
"""``(key name, layer index, params)``."""


def partition_count(
    blocks: Sequence[Block], bytes_per_param: float, partition_bytes: float | None
) -> int:
    """How many keys :func:`partition_blocks` makes (without making them)."""
    if partition_bytes is None:
        return len(blocks)
    return sum(max(1, _parts(p * bytes_per_param, partition_bytes)) for _, _, p in blocks)


def _parts(nbytes: float, partition_bytes: float) -> int:
    return math.ceil(nbytes / partition_bytes - 1e-9)


def partition_blocks(
    blocks: Sequence[Block], bytes_per_param: float, partition_bytes: float | None
) -> list[Block]:
    """``blocks`` with every block above ``partition_bytes`` cut into equal partitions
    ``name:j`` of at most ``partition_bytes`` bytes; unchanged when it is None."""
    if partition_bytes is None:
        return list(blocks)
    out: list[Block] = []
    for name, layer, params in blocks:
        parts = _parts(params * bytes_per_param, partition_bytes)
        if parts <= 1:
            out.append((name, layer, params))
        else:
            out += [(f"{name}:{j}", layer, params / parts) for j in range(parts)]
    return out


@dataclass
class Message:
    """One message of a connection; ``state``: queued, sent (on the wire), arrived or
    cancelled."""

    src: str
    dst: str
    nbytes: float
    then: Callable[[], None]
    label: str
    iteration: int
    op: str
    state: str = "queued"
    sent: Any = None
    """What :meth:`Simulation.transfer_then` returned, once sent."""
    start_s: float = 0.0


class Connections:
    """Worker-server messages: at once (``ordered=False``), or one at a time per
    (sender, receiver) pair in the order sent (``ordered=True``).  With
    ``cancellable=True`` every message can be cancelled (:meth:`cancel`): each is
    sent with :meth:`Simulation.transfer_then` and :meth:`send` returns it."""

    def __init__(
        self,
        sim: Simulation,
        ordered: bool,
        cancellable: bool = False,
        credit: int | None = None,
        credited: str = "push",
    ) -> None:
        self.sim = sim
        self.ordered = ordered
        self.cancellable = cancellable
        self.queues: dict[tuple[str, str], deque[Message]] = {}
        """Messages of each connection; the head is on the wire."""
        self.credit = credit
        """Messages of op ``credited`` a sender may have admitted at once (None: no limit)."""
        self.credited = credited
        self.admitted: dict[str, int] = {}
        self.backlog: dict[str, deque[Message]] = {}
        """Each sender's credited messages waiting for a credit, in the order sent."""

    def send(
        self,
        src: str,
        dst: str,
        nbytes: float,
        then: Callable[[], None],
        *,
        label: str,
        iteration: int,
        op: str,
    ) -> Message | None:
        """Send ``nbytes`` from ``src`` to ``dst``; ``then()`` when the last byte is in.
        The message when it can be cancelled (else None)."""
        if not self.ordered and not self.cancellable:
            event = self.sim.transfer(src, dst, nbytes, label=label, iteration=iteration, op=op)
            event.callbacks.append(lambda _e: then())
            return None
        message = Message(src, dst, nbytes, then, label, iteration, op)
        if not self.ordered:
            self._start(message, None)
            return message
        if self._uses_credit(message):
            if self.admitted.get(src, 0) >= self.credit:  # type: ignore[operator]
                self.backlog.setdefault(src, deque()).append(message)
                return message
            self.admitted[src] = self.admitted.get(src, 0) + 1
        self._enqueue(message)
        return message

    def _uses_credit(self, message: Message) -> bool:
        return self.credit is not None and message.op == self.credited

    def _enqueue(self, message: Message) -> None:
        """Put ``message`` on its connection; start it if the connection is free."""
        queue = self.queues.setdefault((message.src, message.dst), deque())
        queue.append(message)
        if len(queue) == 1:
            self._start(message, queue)

    def _release(self, message: Message) -> None:
        """``message`` (credited) left the wire: its sender's next waiting one is admitted."""
        if not self._uses_credit(message):
            return
        waiting = self.backlog.get(message.src)
        if waiting:
            self._enqueue(waiting.popleft())
        else:
            self.admitted[message.src] -= 1

    def _leave(self, message: Message, queue: deque[Message]) -> None:
        """``message``, the head of its connection's ``queue``, left the wire: the next one
        of the connection starts, and its sender's credit is given back."""
        queue.popleft()
        if queue:
            self._start(queue[0], queue)
        self._release(message)

    def _start(self, message: Message, queue: deque[Message] | None) -> None:
        def arrived() -> None:
            if queue is not None:
                self._leave(message, queue)
            if message.state == "sent":
                message.state = "arrived"
                message.then()

        message.state = "sent"
        message.start_s = self.sim.now
        message.sent = self.sim.transfer_then(
            message.src,
            message.dst,
            message.nbytes,
            arrived,
            label=message.label,
            iteration=message.iteration,
            op=message.op,
        )

    def cancel(self, message: Message) -> float:
        """Cancel ``message`` now (the next one of its connection starts); the bytes it had
        moved.  One on the wire leaves the network and is booked as a ``transfer`` record
        of op ``cancelled`` up to now; one whose last byte is in but not yet delivered
        (the same instant) is only not delivered."""
        state, message.state = message.state, "cancelled"
        if state == "queued":
            waiting = self.backlog.get(message.src)
            if waiting is not None and message in waiting:
                waiting.remove(message)
                return 0.0
            self.queues[message.src, message.dst].remove(message)
            self._release(message)
            return 0.0
        if state != "sent":
            return 0.0
        sent = message.sent
        if all(f.done for f in getattr(sent, "flows", (sent,))):
            return message.nbytes  # arrived(): the queue moves on, then() is skipped
        sim = self.sim
        moved = sim.cancel_send(sent)
        sim.book(
            message.src,
            "transfer",
            f"{message.label} (cancelled)",
            message.start_s,
            sim.now,
            moved,
            src=message.src,
            dst=message.dst,
            iteration=message.iteration,
            op="cancelled",
            phase="communication",
        )
        queue = self.queues.get((message.src, message.dst)) if self.ordered else None
        if queue:
            self._leave(message, queue)
        return moved
