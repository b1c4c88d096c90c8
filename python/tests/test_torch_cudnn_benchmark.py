"""tidepool.torch.use() keeps cuDNN's benchmark mode off, warning once: PyTorch's benchmark asks
the allocator's cacheInfo, which its pluggable interface refuses, so the first convolution would
raise. The mode is turned off when it was on before use(), and stays off when the program sets it
later through the module's attribute or flags() / set_flags(), whether torch.backends.cudnn was
imported before use() or after.

These run over a stand-in `torch` module (torch_stand_in.py, whose `convolution` refuses as
PyTorch's does when the flag is on); a convolution net trained with the flag set runs through the
real PyTorch on the GPU (gpu/test_frameworks_gpu.py)."""

import pytest

from torch_stand_in import run_with_stand_in


@pytest.mark.parametrize("cudnn_imported", ["before use()", "after use()"])
def test_benchmark_set_after_use_stays_off_and_warns_once(cudnn_imported):
    early = cudnn_imported == "before use()"
    r = run_with_stand_in(f"""
import json, warnings
import tidepool
if {early}:
    import_cudnn()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    tidepool.torch.use()
    cudnn = import_cudnn() if not {early} else torch.backends.cudnn
    cudnn.benchmark = True
    after_attribute = cudnn.benchmark
    convolved = cudnn.convolution()
    cudnn.set_flags(_benchmark=True)
    after_flags = torch._C._get_cudnn_benchmark()
    cudnn.benchmark = False
print(json.dumps({{"after_attribute": after_attribute, "after_flags": after_flags,
                   "convolved": convolved, "warnings": [str(w.message) for w in caught]}}))
""")
    assert r["after_attribute"] is False and r["after_flags"] is False, r
    assert r["convolved"] == "convolved", r
    assert len(r["warnings"]) == 1, r
    assert "cudnn.benchmark stays off" in r["warnings"][0], r
    assert "cacheInfo" in r["warnings"][0], r


def test_benchmark_on_before_use_is_turned_off():
    r = run_with_stand_in("""
import json, warnings
import tidepool
cudnn = import_cudnn()
cudnn.benchmark = True
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    tidepool.torch.use()
print(json.dumps({"benchmark": cudnn.benchmark, "convolved": cudnn.convolution(),
                  "warnings": len(caught)}))
""")
    assert r == {"benchmark": False, "convolved": "convolved", "warnings": 1}, r


def test_benchmark_left_off_warns_nothing():
    r = run_with_stand_in("""
import json, warnings
import tidepool
cudnn = import_cudnn()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    tidepool.torch.use()
    cudnn.benchmark = False
print(json.dumps({"benchmark": cudnn.benchmark, "warnings": len(caught)}))
""")
    assert r == {"benchmark": False, "warnings": 0}, r
