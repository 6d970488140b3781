"""The low-VRAM bench's peak analysis (scripts/bench_lowvram.py --phases), on hand-made allocator histories.

docs/benchmarks.md's "alive at the peak" lists come from `live_at_peak`: replaying torch's allocator trace, the
largest live sum and the allocations alive then, in units of one [S, hidden] activation, largest first.
"""
from h3kit.scripts.bench_lowvram import live_at_peak

UNIT = 1000


def _alloc(addr, size, where="chunked.py", line=1, name="grouped"):
    frames = [{"filename": "/x/torch/nn/functional.py", "line": 9, "name": "linear"},
              {"filename": f"/repo/kernels/{where}", "line": line, "name": name}]
    return {"action": "alloc", "addr": addr, "size": size, "frames": frames}


def _free(addr):
    return {"action": "free_completed", "addr": addr}


def test_the_peak_is_the_largest_live_sum_not_the_last_state():
    trace = [_alloc(1, 1000), _alloc(2, 1333, line=328), _alloc(3, 333, line=325, name="<genexpr>"), _free(3),
             _free(2), _alloc(4, 500)]
    assert live_at_peak({"device_traces": [trace]}, UNIT) == [
        "total 2.666", "1.333 chunked.py:328 grouped", "1.000 chunked.py:1 grouped", "0.333 chunked.py:325 <genexpr>"]


def test_frees_of_blocks_allocated_before_recording_are_ignored_and_tiny_blocks_not_listed():
    trace = [_free(99), _alloc(1, 2000), _alloc(2, 10)]  # 10 < UNIT/64: counted in the total, not listed
    assert live_at_peak({"device_traces": [trace]}, UNIT) == ["total 2.010", "2.000 chunked.py:1 grouped"]
