"""tidepool.dump_snapshot() of a PyTorch program on tidepool, on the GPU: torch.cuda._memory_viz
renders it (its HTML plots, the segment summary, the trace, the flame graph lines) without error,
and the recording made meanwhile replays; PyTorch's own calls for the same (its memory history and
_dump_snapshot, refused under pluggable allocators) work through tidepool.torch.use()."""

import os
import subprocess

from gpu_support import REPO_ROOT, require, run_workload


def test_memory_viz_renders_a_dump_of_torch_on_tidepool(tmp_path):
    require("torch")
    r = run_workload("snapshot_viz.py", tmp_path)
    assert r["segments"] > 0 and r["live_blocks"] > 0  # the model's weights and AdamW state
    assert r["events"] > 0
    for name, size in r["pages"].items():
        assert size > 1000, name
        assert "<!DOCTYPE html>" in (tmp_path / f"{name}.html").read_text()
    assert r["segsum_lines"] > 3 and r["trace_lines"] > 3 and r["flame_lines"] > 0
    tool = os.path.join(REPO_ROOT, "build", "tools", "tidepool")
    if os.access(tool, os.X_OK):
        result = subprocess.run([tool, "replay", "--allocators", "tidepool", str(tmp_path / "run.csv.gz")],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr


def test_pytorchs_memory_history_and_dump_snapshot_work_through_use(tmp_path):
    require("torch")
    r = run_workload("torch_memory_history.py", tmp_path)
    assert r["events"] > 0 and {"alloc", "free_requested", "segment_map"} <= set(r["actions"]), r
    assert r["segments"] > 0 and r["live_blocks"] > 0, r
    for name, size in r["pages"].items():
        assert size > 1000, name
        assert "<!DOCTYPE html>" in (tmp_path / f"{name}.html").read_text()
    assert r["recording_after_off"] is None, r
