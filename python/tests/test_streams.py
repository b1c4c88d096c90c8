"""Streams from Python: tidepool.forget_stream tells the pools a stream is gone (tidepool.cupy
does it for CuPy's streams); unknown streams are ignored, bad devices refused."""

import pytest


def test_forget_stream(tp):
    tp.deallocate(tp.allocate(1 << 20))  # a pool exists
    tp.forget_stream(0x1234)  # never seen: nothing to do
    tp.forget_stream(0x1234, device=0)
    tp.forget_stream(None)  # the default stream is never destroyed: ignored
    with pytest.raises(tp.TidepoolError, match="device 7"):
        tp.forget_stream(0x1234, device=7)
