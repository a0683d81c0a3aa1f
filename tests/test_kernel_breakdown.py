"""``benchmarks/kernel_breakdown.py``'s reading of Nsight Compute's raw CSV (the profiling itself
needs a GPU and ncu)."""

import pytest

from tests.helpers import benchmark_module

HEAD = ('"ID","thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg","Kernel Name",'
        '"gpu__time_duration.sum"')
UNITS = '"","","","ns"'


def test_kernel_times_add_up_per_stage_chain_and_kernel():
    breakdown = benchmark_module("kernel_breakdown")

    def row(i, ranges, kernel, ns):
        stack = "  ".join(f'""<default domain>:{r}:none:none:none:none:none:none""' for r in ranges)
        return f'"{i}","873  {stack}","{kernel}","{ns}"'

    lines = ["==PROF== Connected to process 873", HEAD, UNITS,
             row(0, ["dom.pad_many", "halo.prepare"], "pad_field", "1,000,000"),
             row(1, ["dom.pad_many", "halo.prepare"], "pad_field", "500,000"),
             row(2, ["dom.solve_pressure_padded", "st.forward_x"], "void vector_fft<256, EPT>(kernel_arguments_t)",
                 "250,000"),
             row(3, [], "update_field", "2,000,000"),
             "done"]
    got = breakdown.summarise(lines)
    assert got["kernels"] == 4 and abs(got["total_ms"] - 3.75) < 1e-12
    assert breakdown.summarise([HEAD, '"","","","usecond"', row(0, [], "k", "1,500")])["total_ms"] == 1.5
    assert got["rows"] == [
        {"stage": "(outside the stages)", "kernel": "update_field", "calls": 1, "ms": 2.0},
        {"stage": "dom.pad_many > halo.prepare", "kernel": "pad_field", "calls": 2, "ms": 1.5},
        {"stage": "dom.solve_pressure_padded > st.forward_x", "kernel": "void vector_fft", "calls": 1, "ms": 0.25},
    ]


def test_a_duration_unit_it_does_not_know_is_an_error():
    breakdown = benchmark_module("kernel_breakdown")
    with pytest.raises(ValueError, match="durations in 'cycle'"):
        breakdown.summarise([HEAD, '"","","","cycle"'])
