"""Which devices each job of a ``jobs:`` scenario owns.

Jobs with ``devices`` (a glob) take what it matches, in the order the jobs are listed; a
device matched by two jobs is an error at the second job's ``devices``.  Then the jobs
with a ``placement`` take their ``gpus`` among the GPUs still free (every device when the
cluster has no GPUs), in the order the jobs are listed:

* ``packed`` -- the first free GPUs in build order: whole nodes, then whole racks;
* ``spread`` -- one free GPU of each rack in turn (of each node without racks, of each
  device on a flat cluster), so the job crosses as many uplinks as it can;
* ``random`` -- a sample of the free GPUs drawn from the scenario's seed and the job's name.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ...errors import Problem, ScenarioError, join_path
from ...topology import Device, Topology


def job_devices(scenario: object, topology: Topology) -> list[list[str]]:
    """Per job of ``scenario.jobs``, the names of the devices it owns, in build order."""
    jobs = scenario.jobs  # type: ignore[attr-defined]
    owner: dict[str, int] = {}
    found: list[list[str]] = [[] for _ in jobs]
    for i, job in enumerate(jobs):
        if job.devices is None:
            continue
        path = join_path("jobs", i, "devices")
        for device in topology.select(job.devices, path):
            if device.name in owner:
                j = owner[device.name]
                raise ScenarioError(
                    Problem(
                        path,
                        f"device {device.name} is also matched by jobs[{j}] ({jobs[j].name}): "
                        "jobs may not share devices",
                        "globs that match disjoint sets of devices",
                    )
                )
            owner[device.name] = i
            found[i].append(device.name)
    pool = [d for d in topology.devices.values() if d.kind == "gpu"]
    pool = pool or list(topology.devices.values())
    for i, job in enumerate(jobs):
        if job.placement is None:
            continue
        free = [d for d in pool if d.name not in owner]
        if job.gpus > len(free):
            raise ScenarioError(
                Problem(
                    join_path("jobs", i, "gpus"),
                    f"{job.gpus} GPUs asked, {len(free)} free after the jobs before it",
                    f"at most {len(free)}",
                )
            )
        chosen = PLACE[job.placement](free, job.gpus, f"{scenario.seed}/{job.name}")  # type: ignore[attr-defined]
        for device in chosen:
            owner[device.name] = i
        found[i] = [d.name for d in sorted(chosen, key=lambda d: d.index)]
    return found


def packed(free: Sequence[Device], n: int, seed: str) -> list[Device]:
    """The first ``n`` free devices in build order."""
    return list(free[:n])


def spread(free: Sequence[Device], n: int, seed: str) -> list[Device]:
    """``n`` free devices taken one per rack (node, device) in turn."""
    groups: dict[str, list[Device]] = {}
    for device in free:
        groups.setdefault(device.rack or device.node or device.name, []).append(device)
    chosen: list[Device] = []
    queues = list(groups.values())
    depth = 0
    while len(chosen) < n:
        for queue in queues:
            if depth < len(queue) and len(chosen) < n:
                chosen.append(queue[depth])
        depth += 1
    return chosen


def random_sample(free: Sequence[Device], n: int, seed: str) -> list[Device]:
    """``n`` free devices drawn at random; the same ``seed`` draws the same ones."""
    return random.Random(seed).sample(list(free), n)


PLACE = {"packed": packed, "spread": spread, "random": random_sample}
"""The placement policies by name (``jobs[i].placement``)."""
