"""The link heatmap: transfers routed over the cluster, bytes spread over time bins."""

from __future__ import annotations

import pytest

from clustersim.outputs.heatmap import heatmap_figure, link_heatmap
from clustersim.records import Record
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology

DOC = {
    "name": "star",
    "cluster": {
        "kind": "custom",
        "devices": [{"name": n} for n in ("a", "b", "c")],
        "switches": ["sw"],
        "links": [{"src": n, "dst": "sw", "bandwidth": "1GB/s"} for n in ("a", "b", "c")],
    },
    "workload": {"program": [{"id": "t", "transfer": {"src": "a", "dst": "b", "bytes": "1MB"}}]},
}


def test_bytes_are_conserved_on_each_link_of_the_route() -> None:
    """A 1 MB transfer over [0, 1] s in 4 bins: 0.25 MB per bin on a->sw and sw->b, so a
    utilisation of 0.25e6 / (1e9 x 0.25) = 1e-3 in each cell; c's links carry nothing."""
    topology = build_topology(parse_scenario(DOC).cluster)
    records = [Record("a", "transfer", "t", 0.0, 1.0, 1e6, src="a", dst="b")]
    data = link_heatmap(records, topology, bins=4)
    assert sorted(data.links) == ["a->sw", "sw->b"]
    assert data.edges_s == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    assert data.utilisation.tolist() == [pytest.approx([1e-3] * 4)] * 2
    fig = heatmap_figure(data)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == data.links


def test_a_run_without_transfers_has_no_heatmap() -> None:
    topology = build_topology(parse_scenario(DOC).cluster)
    assert link_heatmap([Record("a", "compute", "fwd", 0.0, 1.0)], topology) is None
