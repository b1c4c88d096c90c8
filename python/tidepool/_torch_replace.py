"""How tidepool.torch.use() replaces a call of torch.cuda.memory: where programs look it up
(torch.cuda.memory, and torch.cuda, which exports the same function under the same name), with
the original's name and docstring. Code that took the function by name before use() keeps
PyTorch's."""

import functools


def replace_memory_call(torch, name, make_replacement):
    """Replaces torch.cuda.memory.<name> with make_replacement(original), and torch.cuda.<name>
    where it is that same function. Nothing is replaced where this PyTorch has no such call."""
    memory = torch.cuda.memory
    original = getattr(memory, name, None)
    if original is None:
        return
    replacement = functools.wraps(original)(make_replacement(original))
    setattr(memory, name, replacement)
    if getattr(torch.cuda, name, None) is original:
        setattr(torch.cuda, name, replacement)
