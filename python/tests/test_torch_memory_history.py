"""PyTorch's memory-debugging workflow through tidepool.torch.use(): _record_memory_history starts
tidepool's recording (to os.devnull) and turns it off again, _dump_snapshot pickles tidepool's
snapshot with the events recorded meanwhile, memory_snapshot() gives its segments; a recording
the program started itself is left running when the history is turned off. PyTorch refuses all
of these for pluggable allocators.

These run over a stand-in `torch` module (torch_stand_in.py) on sim; the real PyTorch and its
torch.cuda._memory_viz draw the snapshot on the GPU (gpu/test_snapshot_gpu.py)."""

from torch_stand_in import run_with_stand_in


def test_the_history_records_and_the_dump_holds_tidepools_snapshot(tmp_path):
    path = tmp_path / "snapshot.pickle"
    r = run_with_stand_in(f"""
import json, os, pickle
import tidepool
from tidepool import _allocate
tidepool.torch.use()
torch.cuda.memory._record_memory_history(max_entries=100000)
r = {{"recording_to": tidepool.recording_path()}}
kept = _allocate.allocate(3 << 20)
_allocate.deallocate(_allocate.allocate(5 << 20))
torch.cuda.memory._dump_snapshot({str(path)!r})
torch.cuda.memory._record_memory_history(enabled=None)
r["recording_after_off"] = tidepool.recording_path()
with open({str(path)!r}, "rb") as f:
    snapshot = pickle.load(f)
r["actions"] = [e["action"] for e in snapshot["device_traces"][0]]
r["live"] = [b["size"] for s in snapshot["segments"] for b in s["blocks"]
             if b["state"] == "active_allocated"]
r["segments_equal"] = torch.cuda.memory_snapshot() == snapshot["segments"]
r["allocator"] = snapshot["allocator_settings"]["allocator"]
_allocate.deallocate(kept)
print(json.dumps(r))
""")
    assert r["recording_to"] == "/dev/null" and r["recording_after_off"] is None, r
    assert r["actions"] == ["segment_map", "alloc", "segment_map", "alloc", "free_requested",
                            "free_completed"], r
    assert r["live"] == [3 << 20], r
    assert r["segments_equal"] and r["allocator"] == "tidepool", r


def test_turning_the_history_off_leaves_the_programs_own_recording_running(tmp_path):
    own = tmp_path / "own.csv"
    r = run_with_stand_in(f"""
import json
import tidepool
tidepool.torch.use()
tidepool.record({str(own)!r})
torch.cuda.memory._record_memory_history()
torch.cuda.memory._record_memory_history(enabled=None)
print(json.dumps({{"recording": tidepool.recording_path()}}))
tidepool.stop_recording()
""")
    assert r == {"recording": str(own)}, r
