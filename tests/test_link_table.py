"""The link table (clustersim.metrics.link_table): columns that read as the list of rows
they stand for, checked against rows built one by one from ``Network.link_stats``."""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest
import simpy

from clustersim.metrics.link_table import LinkTable, build_link_table
from clustersim.network import Network
from clustersim.network.flow_level import link_columns
from clustersim.topology import Link, Route


def rows_one_by_one(net: Network, links: list[Link], makespan: float) -> list[dict[str, Any]]:
    """The table as it was built before it had columns: a dict per link that carried
    bytes or held a flow, sorted by utilisation, bytes (highest first), then name."""
    rows = []
    for stat in net.link_stats():
        if stat.bytes <= 0 and stat.peak_flows == 0:
            continue
        link = links[stat.index]
        capacity = link.bandwidth_Bps * makespan
        rows.append(
            {
                "link": link.name,
                "bandwidth_Bps": link.bandwidth_Bps,
                "bytes": stat.bytes,
                "busy_s": stat.busy_s,
                "busy_fraction": stat.busy_s / makespan if makespan > 0 else 0.0,
                "utilisation": stat.bytes / capacity if capacity > 0 else 0.0,
                "peak_flows": stat.peak_flows,
            }
        )
    rows.sort(key=lambda r: (-r["utilisation"], -r["bytes"], r["link"]))
    return rows


def random_network(seed: int, until: float | None = None) -> tuple[Network, list[Link]]:
    """Flows of random sizes over random routes of 40 links (some never used, some of equal
    load: ties broken by name), run to the end or to ``until``."""
    rng = random.Random(seed)
    links = [
        Link(i, f"l{rng.randint(0, 99):02d}-{i}", "a", "b", rng.choice([1e9, 2e9, 4e9]), 0.0)
        for i in range(40)
    ]
    env = simpy.Environment()
    net = Network(env, links)
    for _ in range(30):
        chosen = rng.sample(links[:30], rng.randint(1, 4))
        size = rng.choice([1e8, 5e8, 1e9])  # repeated sizes: rows equal but for the name
        start = rng.choice([0.0, 0.1, 0.5])

        def later(start: float = start, chosen: list[Link] = chosen, size: float = size) -> Any:
            yield env.timeout(start)
            net.transfer(Route(tuple(chosen), 0.0, min(x.bandwidth_Bps for x in chosen)), size)

        env.process(later())
    env.run(until=until)
    return net, links


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("until", [None, 0.3])
def test_columns_read_as_the_rows_built_one_by_one(seed: int, until: float | None) -> None:
    net, links = random_network(seed, until)
    makespan = net.env.now
    table = build_link_table(*link_columns(net), links, makespan)
    want = rows_one_by_one(net, links, makespan)
    assert len(want) > 5
    assert list(table) == want
    assert table == want
    assert table[0] == want[0] and table[-1] == want[-1]
    assert table[2:5] == want[2:5]
    with pytest.raises(IndexError):
        table[len(want)]


def test_used_only_stats_are_the_used_links_of_all() -> None:
    net, _links = random_network(5, 0.3)
    used = net.link_stats(used_only=True)
    every = [s for s in net.link_stats() if s.bytes > 0 or s.peak_flows > 0 or s.busy_s > 0]
    assert used == every
    assert 0 < len(used) < 40


def test_a_table_pickles_without_the_topology() -> None:
    net, links = random_network(2)
    table = build_link_table(*link_columns(net), links, net.env.now)
    copy = pickle.loads(pickle.dumps(table))
    assert isinstance(copy, LinkTable) and copy == table
    assert len(pickle.dumps(table)) < 40 * 200


def test_an_idle_network_has_an_empty_table() -> None:
    links = [Link(0, "x", "a", "b", 1e9, 0.0)]
    table = build_link_table(*link_columns(Network(simpy.Environment(), links)), links, 0.0)
    assert len(table) == 0 and list(table) == [] and not table


def test_folding_columns_equals_folding_rows() -> None:
    """``fold_links`` on the table's columns (numpy) gives what it gives on its rows."""
    from clustersim.outputs.links import fold_links

    merged = 0
    for seed in range(8):
        net, links = random_network(seed)
        table = build_link_table(*link_columns(net), links, net.env.now)
        by_rows = fold_links(list(table))
        assert fold_links(table) == by_rows
        merged += len(table) - len(by_rows)
    assert merged > 0  # some networks had equal rows to merge
