"""report.html's words: the header card and tables carry units; the device table folds."""

from __future__ import annotations

import csv
import io

from clustersim.metrics import DeviceTimes, Summary
from clustersim.outputs.card import (
    DEVICE_ROWS_SHOWN,
    device_rows,
    device_table,
    duration,
    header_card,
    link_table,
)
from clustersim.outputs.devices import devices_csv

SUMMARY = {
    "scenario": "s",
    "workload": "data_parallel",
    "iteration_time_s": 0.0315,
    "iteration_times_s": [0.0315],
    "throughput_samples_per_s": 48.14,
    "tokens_per_s": 98590.57,
    "mfu": 0.332,
    "bubble_fraction": 0.08,
    "time_to_train_s": 34 * 86400.0,
    "gpu_hours": 835584.2,
}


def test_header_card_gives_every_number_its_unit() -> None:
    card = dict(header_card(Summary.of(SUMMARY), "a test", "flat: 4 gpus"))
    assert card["scenario"] == "s: a test" and card["cluster"] == "flat: 4 gpus"
    assert card["iteration time"] == "31.5 ms"
    assert card["throughput"] == "48.14 samples/s"
    assert card["tokens"] == "98,591 tokens/s"
    assert card["MFU"] == "33.2%"
    assert card["bubble"].startswith("8.0%")
    assert card["time to train"].startswith("34.0 days")
    assert card["GPU-hours"] == "835,584 GPU-hours"


def test_duration_reads_in_days_hours_or_seconds() -> None:
    assert duration(1.5) == "1.5 s"
    assert duration(3 * 3600.0).startswith("3.0 hours")


def _summary(n: int) -> Summary:
    devices = {
        f"gpu{i}": {
            "compute_s": 1.0,
            "communication_s": 0.1,
            "exposed_communication_s": 0.05,
            "idle_s": i / n,
        }
        for i in range(n)
    }
    data = {"scenario": "s", "workload": "data_parallel", "makespan_s": 1.0, "devices": devices}
    return Summary.of(data)


def test_device_table_folds_to_the_top_and_bottom_rows_and_the_csv_has_all() -> None:
    summary = _summary(50)
    bubbles = {f"gpu{i}": i / 50 for i in range(50)}
    rows = device_rows(summary, bubbles, set())
    assert [r[0] for r in rows[:2]] == ["gpu49", "gpu48"]  # most idle first
    shown, folded = device_table(rows)
    assert folded == 50 - 2 * DEVICE_ROWS_SHOWN
    assert len(shown) == 2 * DEVICE_ROWS_SHOWN + 1
    assert shown[DEVICE_ROWS_SHOWN][0].startswith(f"... {folded} more devices")
    assert shown[0] == ["gpu49", "1 s", "100 ms", "50 ms", "980 ms", "98.0%"]
    back = list(csv.DictReader(io.StringIO(devices_csv(summary))))  # device order
    assert len(back) == 50 and float(back[49]["idle_s"]) == 0.98
    assert float(back[49]["bubble_fraction"]) == 0.98  # no per_device_bubble: idle / makespan
    assert isinstance(summary.devices["gpu0"], DeviceTimes)


def test_small_device_tables_are_whole_and_workers_filter_rows() -> None:
    rows = device_rows(_summary(5), {}, {"gpu1", "gpu2"})
    assert [r[0] for r in rows] == ["gpu1", "gpu2"]
    assert device_table(rows)[1] == 0


def test_link_table_has_units() -> None:
    row = {
        "link": "a->b",
        "bandwidth_Bps": 2.5e10,
        "bytes": 1.5e9,
        "busy_s": 0.25,
        "busy_fraction": 0.5,
        "utilisation": 0.125,
        "peak_flows": 3,
    }
    assert link_table([row]) == [
        ["a->b", "25 GB/s", "1.5 GB", "250 ms", "50.0%", "12.5%", "3 flows"]
    ]
