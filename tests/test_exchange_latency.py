"""``benchmarks/exchange_latency.py`` on CPU workers: real exchanges through the transports of a
``LocalCluster`` of processes, each checked for the pieces it delivered."""

import pytest

from tests.helpers import benchmark_module


def test_exchanges_on_cpu_workers_deliver_every_piece():
    from distributed import Client

    from daskflow.pencils import ucx

    bench = benchmark_module("exchange_latency")
    kinds = ["mailbox", *(["ucx"] if ucx.available() else [])]
    with bench.cpu_cluster(2) as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        rows = bench.measure(client, kinds, [0.25], rounds=2, device="cpu")
    assert [r["comm"] for r in rows] == kinds
    for row in rows:
        assert row["delivered"] is True, row
        assert row["reduction_ms"] > 0 and row["pieces_ms"] > 0 and "nccl_link_ms" not in row


def test_nccl_on_cpu_workers_is_refused_before_a_cluster_starts(capsys):
    bench = benchmark_module("exchange_latency")
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu", "--comm", "nccl", "mailbox"])
    assert "--comm nccl needs --device gpu" in capsys.readouterr().err
