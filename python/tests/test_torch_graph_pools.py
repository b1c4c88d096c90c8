"""tidepool.torch.use() makes torch.cuda.graph's `pool=` reach tidepool: captures given one PyTorch
pool run under one tidepool graph pool, current on every thread while they capture (PyTorch's
autograd thread included); a capture with no pool gets one of its own, which a later capture given
its CUDAGraph.pool() joins; a graph pool the program entered itself wins; a failed capture leaves
no graph pool current; inductor's CUDA graph trees are turned off, so that torch.compile's
reduce-overhead mode captures through torch.cuda.graph.

These run over a stand-in `torch` module (torch_stand_in.py: PyTorch is not installed on the
machines that run them); that the captures then share memory is tested through the real PyTorch on
the GPU (gpu/test_graph_capture_gpu.py) and in C++ on sim (tests/core/pool_graph_pool_test.cpp)."""

from torch_stand_in import run_with_stand_in

# Captures `with torch.cuda.graph(...)` and reports the graph pool current inside on this thread
# and on a thread started there (as PyTorch's autograd thread would allocate).
CAPTURE_HELPERS = """
import json, threading
import tidepool
tidepool.torch.use()

def pools_inside(cuda_graph, **graph_arguments):
    seen = {}
    with torch.cuda.graph(cuda_graph, **graph_arguments):
        seen["this_thread"] = tidepool.current_graph_pool()
        look = lambda: seen.update(other_thread=tidepool.current_graph_pool())
        worker = threading.Thread(target=look)
        worker.start()
        worker.join()
    return seen
"""


def run(body):
    r = run_with_stand_in(CAPTURE_HELPERS + body)
    return r


def test_captures_given_one_pool_share_one_graph_pool_on_every_thread():
    r = run("""
shared = torch.cuda.graph_pool_handle()
other = torch.cuda.graph_pool_handle()
result = {"first": pools_inside(torch.cuda.CUDAGraph(), pool=shared),
          "second": pools_inside(torch.cuda.CUDAGraph(), pool=shared),
          "other_pool": pools_inside(torch.cuda.CUDAGraph(), pool=other),
          "after": tidepool.current_graph_pool(),
          "mapped": tidepool.torch.graph_pool_of(shared),
          "never_used": tidepool.torch.graph_pool_of(torch.cuda.graph_pool_handle()),
          "captures": captures, "empty_cache_calls": calls["empty_cache"]}
print(json.dumps(result))
""")
    first = r["first"]["this_thread"]
    assert first != 0, r
    assert r["first"] == r["second"] == {"this_thread": first, "other_thread": first}, r
    assert r["other_pool"]["this_thread"] == r["other_pool"]["other_thread"] not in (0, first), r
    assert r["after"] == 0, r
    assert r["mapped"] == first and r["never_used"] == 0, r
    # PyTorch's own __enter__ and __exit__ still run, around the graph pool.
    assert [c[0] for c in r["captures"]] == ["begin", "end"] * 3, r
    assert r["empty_cache_calls"] == 3, r


def test_a_capture_with_no_pool_keeps_its_own_and_graph_pool_of_shares_it():
    r = run("""
first, second, joiner = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
result = {"first": pools_inside(first)["this_thread"],
          "second": pools_inside(second)["this_thread"]}
result["joiner"] = pools_inside(joiner, pool=first.pool())["this_thread"]
result["mapped"] = tidepool.torch.graph_pool_of(first.pool())
print(json.dumps(result))
""")
    assert 0 not in (r["first"], r["second"]) and r["first"] != r["second"], r
    assert r["joiner"] == r["mapped"] == r["first"], r


def test_a_graph_pool_the_program_entered_wins():
    r = run("""
mine = tidepool.GraphPool()
everyones = tidepool.GraphPool(all_threads=True)
handle = torch.cuda.graph_pool_handle()
with mine:
    on_this_thread = pools_inside(torch.cuda.CUDAGraph(), pool=handle)
with everyones:
    as_default = pools_inside(torch.cuda.CUDAGraph(), pool=handle)
result = {"mine": mine.id, "everyones": everyones.id, "on_this_thread": on_this_thread,
          "as_default": as_default, "mapped": tidepool.torch.graph_pool_of(handle),
          "after": tidepool.current_graph_pool()}
print(json.dumps(result))
""")
    assert r["on_this_thread"] == {"this_thread": r["mine"], "other_thread": 0}, r
    assert r["as_default"] == {"this_thread": r["everyones"], "other_thread": r["everyones"]}, r
    assert r["mapped"] == 0 and r["after"] == 0, r


def test_a_failed_capture_ends_and_leaves_no_graph_pool_current():
    r = run("""
failed = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(failed):
        raise ValueError("a kernel the capture refused")
except ValueError:
    pass
result = {"after": tidepool.current_graph_pool(), "captures": captures, "capturing": capturing[0]}
result["next"] = pools_inside(torch.cuda.CUDAGraph(), pool=torch.cuda.graph_pool_handle())
print(json.dumps(result))
""")
    assert r["after"] == 0 and not r["capturing"], r
    assert [c[0] for c in r["captures"]] == ["begin", "end", "begin", "end"], r
    assert r["next"]["this_thread"] == r["next"]["other_thread"] != 0, r


def test_inductors_graph_trees_are_turned_off_when_inductor_was_imported_before_use():
    r = run("""
print(json.dumps({"trees": torch._inductor.config.triton.cudagraph_trees}))
""")
    assert r == {"trees": False}, r


def test_inductors_graph_trees_are_turned_off_when_inductor_is_imported_after_use(tmp_path):
    # use() must not import inductor itself (seconds of a program's start): it waits for the import.
    (tmp_path / "config.py").write_text(
        "import types\ntriton = types.SimpleNamespace(cudagraph_trees=True)\n")
    r = run_with_stand_in(f"""
import json, sys
del sys.modules["torch._inductor.config"], torch._inductor.config
torch._inductor.__path__ = [{str(tmp_path)!r}]
import tidepool
tidepool.torch.use()
tidepool.torch.use()
imported_by_use = "torch._inductor.config" in sys.modules
import torch._inductor.config as config
print(json.dumps({{"imported_by_use": imported_by_use, "trees": config.triton.cudagraph_trees,
                  "loaded_from": config.__file__,
                  "finders_left": sum(type(f).__name__ == "_AfterImport" for f in sys.meta_path)}}))
""")
    assert r["imported_by_use"] is False and r["trees"] is False, r
    assert r["loaded_from"] == str(tmp_path / "config.py") and r["finders_left"] == 0, r


def test_captures_a_program_begins_and_ends_itself_are_followed_too():
    # CUDAGraph.capture_begin / capture_end called directly, as code that does not use
    # torch.cuda.graph does (its own stream context): the same pools as through torch.cuda.graph.
    r = run("""
handle = torch.cuda.graph_pool_handle()
direct, through_graph, private = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
direct.capture_begin(handle)
inside = tidepool.current_graph_pool()
direct.capture_end()
result = {"inside": inside, "after": tidepool.current_graph_pool(),
          "through_graph": pools_inside(through_graph, pool=handle)["this_thread"],
          "mapped": tidepool.torch.graph_pool_of(handle)}
private.capture_begin()
result["private"] = tidepool.current_graph_pool()
private.capture_end()
result["private_mapped"] = tidepool.torch.graph_pool_of(private.pool())
print(json.dumps(result))
""")
    assert r["inside"] != 0 and r["after"] == 0, r
    assert r["through_graph"] == r["mapped"] == r["inside"], r
    assert r["private"] not in (0, r["inside"]) and r["private_mapped"] == r["private"], r
