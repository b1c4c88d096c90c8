"""Synthetic allocation traces in RMM's replay-log format, shaped unlike the bundled recordings, to
check placement against expandable segments on workloads it was not tuned on (docs/RESULTS.md,
section 0, "Workloads it was not tuned on"):

  moe     a mixture-of-experts training step: per layer an activation, one block per expert sized
          by a random token count, and a temporary; the backward pass frees in reverse, each free
          preceded by a gradient of the same size.
  server  a serving loop: up to 24 requests at once, each with a KV cache that grows by
          reallocation (a larger one allocated, then the old one freed) and a scratch per step.
  mixed   a random mix of sizes from 4 KiB to 1 GiB, a twentieth of them never freed.
  ckpt    a transformer trained with activation checkpointing and gradient accumulation: weights,
          gradients (made by the first micro-batch of a step, freed by the optimizer step) and
          AdamW's state live on; per micro-batch of a new length each block's input is kept, the
          block's work is freed at once, the loss makes bf16 and float32 logits and their
          gradient, and the backward pass recomputes one block at a time. Width, depth,
          vocabulary, token budget and micro-batches per step drawn from the seed.
  rl      a reinforcement-learning loop of a language model, sampling and training in one process:
          each step generates completions (autocast's bf16 weight copies, a KV cache per layer
          concatenated into a larger one at every token, the token's work and its logits), frees
          them, then takes a gradient step on the whole sequences (activations kept per layer,
          bf16 and float32 logits of the completion, gradients made in the backward pass and freed
          by zero_grad; AdamW's state from the first step). Width, grouped-query width, depth,
          vocabulary and token budget drawn from the seed; prompt and completion lengths each step.
  ddp     data-parallel training with a communication stream: activations on the compute stream,
          25 MiB gradient buckets made there and freed on a second stream once reduced (a free on
          another stream than the allocation's, as RMM's and cudaFreeAsync's callers make), the
          sequence length new each step.
  fsdp    fully sharded data parallel training (FSDP2 style), three streams: each layer's
          parameters kept as an eighth-sized shard; before a layer runs (forward and backward)
          its whole parameters are gathered into a buffer made on an all-gather stream, the next
          layer's while this one runs, and freed there after it; gradients go through a
          reduce-scatter buffer made and freed on a third stream, whose gradient shard lives until
          the optimizer step frees it there; activations on the compute stream. Width and depth
          drawn from the seed, the sequence length new each step.
  pair    two training loops in one process, each on a stream of its own that it allocates on (an
          actor and a learner, two models served side by side): two of the ckpt, gnn, unet and moe
          families drawn from the seed, their rows interleaved in runs of 1-200.
  gnn     graph neural network mini-batches by neighbour sampling: node and edge counts vary 16x
          from step to step, messages per edge, aggregates per node.
  unet    a diffusion model's U-Net at a resolution drawn each step, the batch fitted to a pixel
          budget: skip activations kept down the encoder until the decoder takes them, attention
          scores at the low resolutions.
  eval    a transformer trained with its activations kept for the backward pass (attention scores
          included), the sequence length new each step, and every tenth step an evaluation of
          eight batches four times the training batch under no_grad (each layer's work freed as
          the next is made): two working sets of different shapes taking turns in one process.
  curriculum  the same training loop with a curriculum: the longest sequence allowed grows from
          128 tokens to 4096 over the run (the batch fitted to a token budget), so the shapes of
          every step are new and the attention scores grow step after step.
  amr     a GPU science code (CuPy style): a solver's fields and temporaries on a grid that adaptive
          mesh refinement regrids now and then (larger or smaller), with small reductions.
  pipe    one stage of a pipeline-parallel transformer trained with the 1F1B schedule: the stage's
          layers (the output head too on the last stage); each step 4-16 micro-batches of a new
          sequence length, each arriving as an activation from the stage before; warm-up forwards
          (as many as stages follow this one), then a backward and a forward in turn, then the
          cool-down's backwards; a micro-batch's saved tensors (attention scores included) live
          from its forward to its backward, so up to that many working sets overlap, freed oldest
          first; gradients made by the first micro-batch, AdamW's step at the end. Width, depth,
          stage count, stage and micro-batches drawn from the seed.
  krylov  a Newton-Krylov science code: each Newton step assembles a sparse matrix (CSR) on a mesh
          whose size drifts with refinement, builds an algebraic multigrid hierarchy under it (each
          level a few times smaller), and solves with restarted GMRES: one basis vector per
          iteration, all freed at each restart, with small dot-product results between.
  infer   an encoder served with dynamic batching, no grad: each batch a new sequence length and a
          batch fitted loosely to a token budget, each layer's work freed as the next layer runs;
          a batch's outputs live until its response is sent, one to four batches later.
  offload a transformer trained with its saved activations offloaded to the host: each layer's
          saved tensors are freed once the next layer has run (copied out), and brought back in
          the backward pass one layer ahead (allocated again, last layer first); the sequence
          length new every step.
  adapters  a server of many LoRA adapters over one base model: adapters (rank 8-64 on every
          layer) loaded on demand into a cache of 4-16 and evicted oldest first; each round's
          batch a prefill of a new size whose per-layer work is freed at once, its KV cache
          living until the request ends, 1-40 rounds later.

    python3 bench/synthetic/make_traces.py OUT_DIR [SEED]

writes OUT_DIR/NAME.csv.gz for each NAME above; the same seed gives the same traces.
Replay them with `build/tools/tidepool replay OUT_DIR/*.csv.gz --passes 3`.
"""

import gzip
import os
import random
import sys

MiB = 1 << 20
STREAM_HANDLES = 0x1000  # stream n > 0 of a trace is written as this + n


class Trace:
    """Rows of one thread, on the default stream unless a row names another; pointers from a bump
    allocator, never reused."""

    def __init__(self):
        self.rows = []
        self.next_pointer = 0x7F0000000000
        self.live = {}

    def alloc(self, size, stream=0):
        size = max(512, (size + 511) // 512 * 512)
        pointer = self.next_pointer
        self.next_pointer += size + 4096
        self.rows.append(("allocate", pointer, size, stream))
        self.live[pointer] = size
        return pointer

    def free(self, pointer, stream=0):
        self.rows.append(("free", pointer, self.live.pop(pointer), stream))

    def write(self, path):
        with gzip.open(path, "wt") as out:
            out.write("Thread,Time,Action,Pointer,Size,Stream\n")
            for row, (action, pointer, size, stream) in enumerate(self.rows, start=1):
                us = row * 10  # 10 us a row
                hours, rest = divmod(us, 3_600_000_000)
                minutes, rest = divmod(rest, 60_000_000)
                handle = hex(STREAM_HANDLES + stream) if stream else "0x0"
                out.write(f"0,{hours:02d}:{minutes:02d}:{rest / 1e6:09.6f},{action},{hex(pointer)},{size},{handle}\n")


def moe(seed, steps=60, layers=12, experts=16, d=2048):
    r = random.Random(seed)
    trace = Trace()
    for _ in range(layers * 4):  # weights, live throughout
        trace.alloc(r.choice([8, 16, 32]) * MiB)
    for _ in range(steps):
        tokens = r.choice([2048, 4096, 6144, 8192])
        kept = []
        for _ in range(layers):
            kept.append(trace.alloc(tokens * d * 2))
            counts = [max(0, int(r.gauss(tokens * 2 / experts, tokens / experts))) for _ in range(experts)]
            per_expert = [trace.alloc(c * d * 2 * 4) for c in counts if c]
            temporary = trace.alloc(tokens * d * 4)
            kept.extend(per_expert)
            trace.free(temporary)
        for pointer in reversed(kept):
            gradient = trace.alloc(trace.live[pointer])
            trace.free(gradient)
            trace.free(pointer)
    return trace


def server(seed, rounds=4000, d=4096):
    r = random.Random(seed)
    trace = Trace()
    for _ in range(20):  # weights
        trace.alloc(64 * MiB)
    active = {}  # request -> [tokens, KV cache pointer, tokens left to generate]
    for i in range(rounds):
        if len(active) < 24 and r.random() < 0.5:
            tokens = r.randint(64, 4096)
            active[i] = [tokens, trace.alloc(tokens * d * 2 * 2), r.randint(16, 1024)]
        for request in list(active):
            tokens, cache, left = active[request]
            step = r.randint(1, 32)
            if r.random() < 0.3:  # the cache grows: a larger one, then the old one freed
                larger = trace.alloc((tokens + step * 8) * d * 4)
                trace.free(cache)
                cache = larger
                tokens += step * 8
            trace.free(trace.alloc(tokens * 512))  # the step's scratch
            left -= step
            if left <= 0:
                trace.free(cache)
                del active[request]
            else:
                active[request] = [tokens, cache, left]
    return trace


def mixed(seed, operations=60000):
    r = random.Random(seed)
    trace = Trace()
    freeable = []
    for _ in range(operations):
        if freeable and r.random() < 0.5:
            i = r.randrange(len(freeable))
            pointer = freeable[i]
            freeable[i] = freeable[-1]
            freeable.pop()
            trace.free(pointer)
        else:
            size = int(2 ** r.uniform(12, 28)) if r.random() < 0.9 else int(2 ** r.uniform(25, 30))
            pointer = trace.alloc(size)
            if r.random() >= 0.05:  # else never freed
                freeable.append(pointer)
    return trace


def optimizer_step(trace, weights, optimizer_state, gradients):
    """AdamW's step: its two moments per weight made at the first step (returned, to keep), then
    zero_grad(set_to_none=True) frees the step's gradients."""
    if not optimizer_state:
        optimizer_state = [trace.alloc(trace.live[w]) for w in weights for _ in range(2)]
    for pointer in gradients:
        trace.free(pointer)
    return optimizer_state


def ckpt(seed, steps=24):
    r = random.Random(seed)
    d = r.choice([768, 1024, 1536])
    layers = r.choice([8, 12, 16])
    vocab = r.choice([32000, 50304])
    budget = r.choice([4096, 8192, 16384])
    micro = r.choice([1, 2, 4])
    trace = Trace()
    shapes = [d * 3 * d, d * d, d * 4 * d, 4 * d * d]  # qkv, projection, MLP in, MLP out (fp32)
    trace.alloc(vocab * d * 4)  # the tied embedding
    weights = [trace.alloc(n * 4) for _ in range(layers) for n in shapes]
    optimizer_state = []
    for _ in range(steps):
        gradients = []
        for m in range(micro):
            length = r.randrange(256, 4096 + 1, 64)
            tokens = max(1, budget // length) * length
            kept = [trace.alloc(tokens * d * 4)]  # the embedding's output, each block's input
            for _ in range(layers):  # forward without saving: the block's work is freed at once
                work = [trace.alloc(tokens * 3 * d * 2), trace.alloc(tokens * d * 2), trace.alloc(tokens * 4 * d * 2)]
                for pointer in work:
                    trace.free(pointer)
                kept.append(trace.alloc(tokens * d * 4))
            logits = trace.alloc(tokens * vocab * 2)
            logits32 = trace.alloc(tokens * vocab * 4)
            trace.free(logits)
            grad_logits = trace.alloc(tokens * vocab * 4)
            trace.free(logits32)
            grad_x = trace.alloc(tokens * d * 4)
            trace.free(grad_logits)
            for _ in range(layers):  # from the last block down: recompute it, then its backward pass
                saved = [trace.alloc(tokens * 3 * d * 2), trace.alloc(tokens * d * 2), trace.alloc(tokens * 4 * d * 2),
                         trace.alloc(tokens * 4 * d * 2)]
                if m == 0:
                    gradients.extend(trace.alloc(n * 4) for n in shapes)
                temporary = trace.alloc(tokens * 4 * d * 2)
                trace.free(temporary)
                for pointer in reversed(saved):
                    trace.free(pointer)
                grad_in = trace.alloc(tokens * d * 4)
                trace.free(grad_x)
                trace.free(kept.pop())
                grad_x = grad_in
            trace.free(grad_x)
            trace.free(kept.pop())
        optimizer_state = optimizer_step(trace, weights, optimizer_state, gradients)
    return trace


def transformer(r):
    """A decoder-only transformer drawn from `r`: width, depth, vocabulary and token budget."""
    return {"d": r.choice([768, 1024, 1536]), "layers": r.choice([8, 12]), "heads": 16,
            "vocab": r.choice([32000, 50304]), "budget": r.choice([8192, 16384])}


def layer_weights(d):
    """The element counts of a layer's weights: qkv, projection, MLP in, MLP out."""
    return [d * 3 * d, d * d, d * 4 * d, 4 * d * d]


def stack_weights(trace, d, layers, element_bytes):
    """Each of `layers` layers' weights (layer_weights(d)), `element_bytes` an element, made in order."""
    return [trace.alloc(n * element_bytes) for _ in range(layers) for n in layer_weights(d)]


def transformer_weights(trace, m):
    """The tied embedding and each layer's weights (fp32)."""
    return [trace.alloc(m["vocab"] * m["d"] * 4)] + stack_weights(trace, m["d"], m["layers"], 4)


def layer_forward(trace, m, tokens, length):
    """One layer's forward under bf16 autocast: its qkv, attention scores, attention output and MLP
    activation, then its output (the last of the five returned)."""
    d = m["d"]
    return [trace.alloc(tokens * 3 * d * 2), trace.alloc(tokens // length * m["heads"] * length * length * 2),
            trace.alloc(tokens * d * 2), trace.alloc(tokens * 4 * d * 2), trace.alloc(tokens * d * 2)]


def layer_backward(trace, m, tokens, kept, grad_x, gradients=None):
    """One layer's backward, from the last layer down: its weight gradients appended to `gradients`
    (None: they exist already), a temporary, the layer's five saved tensors freed from `kept`; returns
    the gradient of its input, grad_x freed."""
    if gradients is not None:
        gradients.extend(trace.alloc(n * 4) for n in reversed(layer_weights(m["d"])))
    trace.free(trace.alloc(tokens * 4 * m["d"] * 2))
    for _ in range(5):
        trace.free(kept.pop())
    grad_in = trace.alloc(tokens * m["d"] * 2)
    trace.free(grad_x)
    return grad_in


def transformer_pass(trace, m, tokens, length, train):
    """One forward pass of `tokens` tokens in sequences of `length` under bf16 autocast. Training
    keeps each layer's qkv, attention scores, attention output, MLP activation and output for the
    backward pass, which frees them from the last layer down, and returns the weight gradients it
    made; evaluation (no_grad) frees each layer's work as soon as the next layer's input exists."""
    d, vocab = m["d"], m["vocab"]
    kept = [trace.alloc(tokens * d * 2)]
    for _ in range(m["layers"]):
        *work, out = layer_forward(trace, m, tokens, length)
        if train:
            kept += work + [out]
        else:
            for pointer in work:
                trace.free(pointer)
            trace.free(kept.pop())
            kept.append(out)
    logits = trace.alloc(tokens * vocab * 2)
    logits32 = trace.alloc(tokens * vocab * 4)
    trace.free(logits)
    if not train:
        trace.free(logits32)
        trace.free(kept.pop())
        return []
    grad_logits = trace.alloc(tokens * vocab * 4)
    trace.free(logits32)
    grad_x = trace.alloc(tokens * d * 2)
    trace.free(grad_logits)
    gradients = [trace.alloc(vocab * d * 4)]
    while len(kept) > 1:
        grad_x = layer_backward(trace, m, tokens, kept, grad_x, gradients)
    trace.free(grad_x)
    trace.free(kept.pop())
    return gradients


def transformer_training(seed, steps, sequence_length, after_step=None):
    """A transformer (transformer()) trained for `steps` steps with AdamW, each step's sequences
    sequence_length(r, step) tokens long and the batch fitted to the token budget; after_step(trace,
    r, m, step), if given, runs after each optimizer step."""
    r = random.Random(seed)
    m = transformer(r)
    trace = Trace()
    weights = transformer_weights(trace, m)
    optimizer_state = []
    for step in range(steps):
        length = sequence_length(r, step)
        gradients = transformer_pass(trace, m, max(1, m["budget"] // length) * length, length, True)
        optimizer_state = optimizer_step(trace, weights, optimizer_state, gradients)
        if after_step is not None:
            after_step(trace, r, m, step)
    return trace


def evaluate(seed, steps=60):
    def evaluation(trace, r, m, step):  # every tenth step, eight batches four times as large
        if step % 10 == 9:
            for _ in range(8):
                length = r.randrange(256, 2048 + 1, 64)
                transformer_pass(trace, m, max(1, 4 * m["budget"] // length) * length, length, False)

    return transformer_training(seed, steps, lambda r, step: r.randrange(256, 2048 + 1, 64), evaluation)


def curriculum(seed, steps=80):
    def sequence_length(r, step):  # the longest allowed grows from 128 to 4096 tokens over the run
        return r.randrange(64, 128 + (4096 - 128) * (step + 1) // steps + 1, 64)

    return transformer_training(seed, steps, sequence_length)


def rl(seed, steps=20):
    r = random.Random(seed)
    d = r.choice([768, 1024, 1536])
    kv = d // r.choice([1, 2, 4])  # grouped-query attention: keys and values narrower than d
    f = (int(2.75 * d) + 255) // 256 * 256  # the gated MLP's width
    layers = r.choice([8, 12, 16])
    vocab = r.choice([32000, 50304])
    budget = r.choice([8192, 16384])
    trace = Trace()
    shapes = [d * d, d * kv, d * kv, d * d, d * f, d * f, f * d]  # q, k, v, o, gate, up, down (fp32)
    weights = [trace.alloc(vocab * d * 4), trace.alloc(vocab * d * 4)]  # embedding, untied head
    weights += [trace.alloc(n * 4) for _ in range(layers) for n in shapes]
    optimizer_state = []
    for _ in range(steps):
        prompt = r.randrange(64, 768 + 1, 32)
        new = r.randrange(32, 160 + 1, 32)
        batch = budget // (prompt + new)
        # Sampling, no gradients: autocast's bf16 copies of the weights live through generate.
        casts = [trace.alloc(trace.live[w] // 2) for w in weights]
        caches = [[trace.alloc(batch * prompt * kv * 2), trace.alloc(batch * prompt * kv * 2)] for _ in range(layers)]
        for pointer in (trace.alloc(batch * prompt * d * 2), trace.alloc(batch * prompt * f * 2)):
            trace.free(pointer)  # the prefill's work
        sequence = trace.alloc(batch * prompt * 8)
        for length in range(prompt, prompt + new):
            for cache in caches:  # each token: the keys and values concatenated into larger tensors
                for i in range(2):
                    larger = trace.alloc(batch * (length + 1) * kv * 2)
                    trace.free(cache[i])
                    cache[i] = larger
                for pointer in (trace.alloc(batch * d * 2), trace.alloc(batch * f * 2)):
                    trace.free(pointer)
            logits = trace.alloc(batch * vocab * 4)
            probabilities = trace.alloc(batch * vocab * 4)
            trace.free(logits)
            trace.free(probabilities)
            longer = trace.alloc(batch * (length + 1) * 8)
            trace.free(sequence)
            sequence = longer
        for cache in caches:
            for pointer in cache:
                trace.free(pointer)
        for pointer in casts:
            trace.free(pointer)
        # The policy-gradient step on the whole sequences: casts again, kept for the backward pass.
        tokens = batch * (prompt + new)
        casts = [trace.alloc(trace.live[w] // 2) for w in weights]
        saved_widths = (d, d, kv, kv, d, f, f, f)  # what autograd keeps of a layer, in bf16
        kept = [trace.alloc(tokens * d * 4)]
        for _ in range(layers):
            kept += [trace.alloc(tokens * n * 2) for n in saved_widths]
            kept.append(trace.alloc(tokens * d * 4))  # the residual stream
        logits = trace.alloc(tokens * vocab * 2)
        taken = trace.alloc(batch * new * vocab * 4)  # the completion's logits in float32, log-softmaxed
        trace.free(logits)
        grad_taken = trace.alloc(batch * new * vocab * 4)
        trace.free(taken)
        grad_logits = trace.alloc(tokens * vocab * 2)
        trace.free(grad_taken)
        gradients = [trace.alloc(trace.live[w]) for w in weights[:2]]
        grad_x = trace.alloc(tokens * d * 4)
        trace.free(grad_logits)
        for _ in range(layers):
            for n in reversed(shapes):
                gradients.append(trace.alloc(n * 4))
                trace.free(trace.alloc(n * 2))  # the bf16 weight gradient, accumulated into fp32
            for _ in range(len(saved_widths) + 1):  # the layer's saved tensors and its residual
                trace.free(kept.pop())
            grad_in = trace.alloc(tokens * d * 4)
            trace.free(grad_x)
            grad_x = grad_in
        trace.free(grad_x)
        trace.free(kept.pop())
        for pointer in casts:
            trace.free(pointer)
        trace.free(sequence)
        optimizer_state = optimizer_step(trace, weights, optimizer_state, gradients)
    return trace


def ddp(seed, steps=40):
    r = random.Random(seed)
    d = r.choice([1024, 2048])
    layers = r.choice([12, 24])
    trace = Trace()
    weights = [trace.alloc(n * 4) for _ in range(layers) for n in (3 * d * d, d * d, 4 * d * d, 4 * d * d)]
    optimizer_state = []
    for _ in range(steps):
        length = r.randrange(256, 2048 + 1, 64)
        tokens = (8192 // length) * length
        kept = []
        for _ in range(layers):
            kept += [trace.alloc(tokens * d * 2), trace.alloc(tokens * 3 * d * 2), trace.alloc(tokens * 4 * d * 2)]
        bucket = trace.alloc(25 * MiB)
        for i, pointer in enumerate(reversed(kept), start=1):
            gradient = trace.alloc(trace.live[pointer])
            trace.free(pointer)
            trace.free(gradient)
            if i % 6 == 0:  # the bucket is full: reduced on the communication stream, freed there
                trace.free(bucket, stream=1)
                bucket = trace.alloc(25 * MiB)
        trace.free(bucket, stream=1)
        gradients = [trace.alloc(trace.live[w]) for w in weights]
        optimizer_state = optimizer_step(trace, weights, optimizer_state, gradients)
    return trace


def fsdp(seed, steps=30, shards=8):
    r = random.Random(seed)
    d = r.choice([2048, 4096])
    layers = r.choice([16, 24, 32])
    gather, reduce = 1, 2  # the all-gather and reduce-scatter streams
    layer_bytes = 12 * d * d * 2  # a layer's bf16 parameters
    trace = Trace()
    for _ in range(layers):
        trace.alloc(layer_bytes // shards)
    moments = []
    for _ in range(steps):
        length = r.randrange(512, 4096 + 1, 128)
        tokens = (16384 // length) * length
        kept = []
        gathered = trace.alloc(layer_bytes, stream=gather)
        for layer in range(layers):
            ahead = trace.alloc(layer_bytes, stream=gather) if layer + 1 < layers else None
            kept.append([trace.alloc(tokens * n * d * 2) for n in (1, 4, 1)])
            trace.free(gathered, stream=gather)
            gathered = ahead
        logits = trace.alloc(tokens * 32000 * 2)
        grad_logits = trace.alloc(tokens * 32000 * 2)
        trace.free(logits)
        gradient_shards = []
        gathered = trace.alloc(layer_bytes, stream=gather)
        for layer in reversed(range(layers)):
            ahead = trace.alloc(layer_bytes, stream=gather) if layer > 0 else None
            inputs = [trace.alloc(trace.live[a]) for a in kept[layer]]
            gradient = trace.alloc(layer_bytes)
            for pointer in kept[layer] + inputs:
                trace.free(pointer)
            trace.free(gathered, stream=gather)
            scattered = trace.alloc(layer_bytes, stream=reduce)
            trace.free(gradient)
            gradient_shards.append(trace.alloc(layer_bytes // shards, stream=reduce))
            trace.free(scattered, stream=reduce)
            gathered = ahead
        trace.free(grad_logits)
        if not moments:
            moments = [trace.alloc(layer_bytes // shards * 2) for _ in range(2 * layers)]
        for shard in gradient_shards:  # the optimizer's step on the shards, each with a temporary
            trace.free(trace.alloc(layer_bytes // shards * 2))
            trace.free(shard, stream=reduce)
    return trace


def pair(seed):
    r = random.Random(seed)
    first, second = r.sample([ckpt, gnn, unet, moe], 2)
    loops = [first(seed).rows, second(seed + 1000).rows]
    trace = Trace()
    done = [0, 0]
    while done[0] < len(loops[0]) or done[1] < len(loops[1]):
        which = 0 if done[1] >= len(loops[1]) or (done[0] < len(loops[0]) and r.random() < 0.5) else 1
        run = loops[which][done[which]:done[which] + r.randint(1, 200)]
        done[which] += len(run)
        # The second loop's pointers moved clear of the first's (both bump from the same start).
        trace.rows += run if which == 0 else [(a, p + (1 << 44), size, 1) for a, p, size, _ in run]
    return trace


def gnn(seed, steps=60):
    r = random.Random(seed)
    d = r.choice([128, 256, 512])
    layers = r.choice([2, 3])
    classes = 40
    trace = Trace()
    weights = [trace.alloc(d * d * 4) for _ in range(layers * 2)]
    optimizer_state = []
    for _ in range(steps):
        nodes = int(2 ** r.uniform(14, 18))
        edges = nodes * r.choice([10, 15, 25])
        features = trace.alloc(nodes * d * 4)
        edge_index = trace.alloc(edges * 2 * 8)
        kept = []
        for _ in range(layers):  # a message per edge, their sum per node, the layer's output
            kept += [trace.alloc(edges * d * 4), trace.alloc(nodes * d * 4), trace.alloc(nodes * d * 4)]
        logits = trace.alloc(nodes * classes * 4)
        grad_logits = trace.alloc(nodes * classes * 4)
        trace.free(logits)
        for pointer in reversed(kept):
            gradient = trace.alloc(trace.live[pointer])
            trace.free(gradient)
            trace.free(pointer)
        trace.free(grad_logits)
        gradients = [trace.alloc(trace.live[w]) for w in weights]
        trace.free(edge_index)
        trace.free(features)
        optimizer_state = optimizer_step(trace, weights, optimizer_state, gradients)
    return trace


def unet(seed, steps=40):
    r = random.Random(seed)
    base = r.choice([128, 192, 256])
    trace = Trace()
    weights = [trace.alloc(int(2 ** r.uniform(18, 24))) for _ in range(120)]
    optimizer_state = []
    for _ in range(steps):
        resolution = r.choice([32, 48, 64, 96, 128])
        batch = max(1, 64 * 64 * 32 // (resolution * resolution))
        kept = []
        channels, side = base, resolution
        for _ in range(4):  # the encoder: two convolutions a level, attention where it is small
            for _ in range(2):
                kept += [trace.alloc(batch * channels * side * side * 2) for _ in range(2)]
                if side <= 32:
                    kept.append(trace.alloc(batch * side ** 4 * 2))
            side //= 2
            channels = min(channels * 2, base * 4)
        for _ in range(4):  # the decoder: each level takes its skip (twice the channels)
            side *= 2
            channels = max(channels // 2, base)
            kept += [trace.alloc(batch * channels * 2 * side * side * 2) for _ in range(3)]
        output = trace.alloc(batch * 4 * resolution * resolution * 4)
        grad_output = trace.alloc(batch * 4 * resolution * resolution * 4)
        trace.free(output)
        for pointer in reversed(kept):
            gradient = trace.alloc(trace.live[pointer])
            trace.free(pointer)
            trace.free(gradient)
        trace.free(grad_output)
        gradients = [trace.alloc(trace.live[w]) for w in weights]
        optimizer_state = optimizer_step(trace, weights, optimizer_state, gradients)
    return trace


def amr(seed, iterations=3000):
    r = random.Random(seed)
    trace = Trace()
    cells = int(2 ** r.uniform(22, 24))
    fields = [trace.alloc(cells * 8) for _ in range(6)]
    workspace = trace.alloc(cells * 16)
    for _ in range(iterations):
        if r.random() < 0.01:  # regrid: new fields, then the old ones go
            cells = min(1 << 26, max(1 << 20, int(cells * r.uniform(0.7, 1.5))))
            regridded = [trace.alloc(cells * 8) for _ in range(6)]
            for pointer in fields:
                trace.free(pointer)
            fields = regridded
            trace.free(workspace)
            workspace = trace.alloc(cells * 16)
        temporaries = [trace.alloc(cells * 8) for _ in range(r.randint(2, 5))]
        trace.free(trace.alloc(r.choice([512, 4096, 65536])))  # a reduction's result
        for pointer in temporaries:
            trace.free(pointer)
    return trace


def pipeline(seed, steps=30):
    r = random.Random(seed)
    m = transformer(r)
    d, vocab = m["d"], m["vocab"]
    stages = r.choice([2, 4, 8])
    stage = r.randrange(stages)
    layers = max(1, m["layers"] * r.choice([2, 3]) // stages)
    micro = r.choice([4, 8, 16])
    last = stage == stages - 1
    trace = Trace()
    weights = stack_weights(trace, d, layers, 4)
    if last:
        weights.append(trace.alloc(vocab * d * 4))  # the output head
    optimizer_state = []
    for _ in range(steps):
        length = r.randrange(256, 4096 + 1, 64)
        tokens = max(1, m["budget"] // 4 // length) * length
        gradients = []
        saved = {}

        def forward(k):
            kept = [trace.alloc(tokens * d * 2)]  # the activation received from the stage before
            for _ in range(layers):
                kept += layer_forward(trace, m, tokens, length)
            if last:
                logits = trace.alloc(tokens * vocab * 2)
                kept.append(trace.alloc(tokens * vocab * 4))  # float32 logits, kept for the loss's backward
                trace.free(logits)
            else:
                trace.free(trace.alloc(tokens * d * 2))  # the output, freed once sent to the next stage
            saved[k] = kept

        def backward(k):
            kept = saved.pop(k)
            if last:
                if not gradients:
                    gradients.append(trace.alloc(vocab * d * 4))
                grad_logits = trace.alloc(tokens * vocab * 4)
                trace.free(kept.pop())
                grad_x = trace.alloc(tokens * d * 2)
                trace.free(grad_logits)
            else:
                grad_x = trace.alloc(tokens * d * 2)  # received from the next stage
            for _ in range(layers):  # the first micro-batch makes the gradients the others accumulate into
                grad_x = layer_backward(trace, m, tokens, kept, grad_x, gradients if k == 0 else None)
            trace.free(grad_x)  # sent to the stage before
            trace.free(kept.pop())

        forwards = backwards = 0
        while forwards < min(micro, stages - stage):  # warm-up
            forward(forwards)
            forwards += 1
        while backwards < micro:  # one backward, one forward, then the cool-down's backwards
            backward(backwards)
            backwards += 1
            if forwards < micro:
                forward(forwards)
                forwards += 1
        optimizer_state = optimizer_step(trace, weights, optimizer_state, gradients)
    return trace


def krylov(seed, solves=60):
    r = random.Random(seed)
    trace = Trace()
    n = int(2 ** r.uniform(20, 23))
    solution = trace.alloc(n * 8)
    for _ in range(solves):
        if r.random() < 0.2:  # the mesh refined or coarsened: the solution moved to the new mesh
            n = min(1 << 25, max(1 << 18, int(n * r.uniform(0.8, 1.4))))
            moved = trace.alloc(n * 8)
            trace.free(solution)
            solution = moved
        nonzeros = n * r.randint(7, 27)
        matrix = [trace.alloc(nonzeros * 8), trace.alloc(nonzeros * 4), trace.alloc((n + 1) * 4)]
        hierarchy = []
        rows = n
        while rows > 4096:  # each coarser level's matrix and two vectors
            rows //= r.randint(3, 5)
            hierarchy += [trace.alloc(rows * r.randint(7, 27) * 12), trace.alloc(rows * 8), trace.alloc(rows * 8)]
        rhs = trace.alloc(n * 8)
        restart = r.choice([20, 30, 50])
        for _ in range(r.randint(1, 4)):
            basis = []
            for k in range(restart):
                basis.append(trace.alloc(n * 8))
                work = trace.alloc(n * 8)  # the preconditioned vector
                trace.free(trace.alloc(r.choice([512, 4096]) * (k + 1)))  # dot products against the basis
                trace.free(work)
            for pointer in basis:
                trace.free(pointer)
        trace.free(rhs)
        for pointer in hierarchy + matrix:
            trace.free(pointer)
    return trace


def infer(seed, batches=1500):
    r = random.Random(seed)
    d = r.choice([768, 1024])
    layers = r.choice([12, 24])
    heads = d // 64
    trace = Trace()
    stack_weights(trace, d, layers, 2)  # bf16
    waiting = []  # [batches left before the response is sent, its outputs]
    for _ in range(batches):
        length = r.choice([32, 64, 128, 256, 384, 512])
        batch = max(1, int(r.uniform(0.3, 1.0) * 16384 // length))
        tokens = batch * length
        x = trace.alloc(tokens * d * 2)
        for _ in range(layers):
            qkv = trace.alloc(tokens * 3 * d * 2)
            scores = trace.alloc(batch * heads * length * length * 2)
            attention = trace.alloc(tokens * d * 2)
            trace.free(scores)
            trace.free(qkv)
            mlp = trace.alloc(tokens * 4 * d * 2)
            out = trace.alloc(tokens * d * 2)
            trace.free(mlp)
            trace.free(attention)
            trace.free(x)
            x = out
        waiting.append([r.randint(1, 4), [x, trace.alloc(batch * d * 4)]])  # per-token and pooled outputs
        for entry in waiting:
            entry[0] -= 1
            if entry[0] == 0:
                for pointer in entry[1]:
                    trace.free(pointer)
        waiting = [entry for entry in waiting if entry[0] > 0]
    return trace


def offload(seed, steps=40):
    r = random.Random(seed)
    m = transformer(r)
    d, vocab = m["d"], m["vocab"]
    trace = Trace()
    weights = transformer_weights(trace, m)
    optimizer_state = []
    for _ in range(steps):
        length = r.randrange(256, 4096 + 1, 64)
        tokens = max(1, m["budget"] // length) * length
        saved_sizes = []
        previous = []
        for _ in range(m["layers"]):
            saved = layer_forward(trace, m, tokens, length)
            saved_sizes.append([trace.live[pointer] for pointer in saved])
            for pointer in previous:  # the layer before's saved tensors, copied out by now
                trace.free(pointer)
            previous = saved
        logits = trace.alloc(tokens * vocab * 4)
        grad_logits = trace.alloc(tokens * vocab * 4)
        trace.free(logits)
        for pointer in previous:
            trace.free(pointer)
        grad_x = trace.alloc(tokens * d * 2)
        trace.free(grad_logits)
        gradients = [trace.alloc(vocab * d * 4)]
        ahead = [trace.alloc(size) for size in saved_sizes[-1]]  # the last layer's tensors brought back
        for layer in reversed(range(m["layers"])):
            current = ahead
            ahead = [trace.alloc(size) for size in saved_sizes[layer - 1]] if layer > 0 else []
            grad_x = layer_backward(trace, m, tokens, current, grad_x, gradients)
        trace.free(grad_x)
        optimizer_state = optimizer_step(trace, weights, optimizer_state, gradients)
    return trace


def adapters(seed, rounds=3000, d=4096, layers=32):
    r = random.Random(seed)
    trace = Trace()
    stack_weights(trace, d, layers, 2)  # the base model, bf16
    loaded = []  # oldest first
    cache = r.randint(4, 16)
    running = []  # (the round it ends in, its KV cache)
    for round_ in range(rounds):
        if r.random() < 0.1:  # an adapter not loaded is asked for
            rank = r.choice([8, 16, 32, 64])
            loaded.append([trace.alloc(rank * d * 2 * 2) for _ in range(layers * 4)])  # A and B per weight
            if len(loaded) > cache:
                for pointer in loaded.pop(0):
                    trace.free(pointer)
        batch, length = r.randint(1, 64), r.randint(16, 2048)
        x = trace.alloc(batch * length * d * 2)
        for _ in range(layers):
            trace.free(trace.alloc(batch * length * 4 * d * 2))
        running.append((round_ + r.randint(1, 40), trace.alloc(batch * length * d * 2 * 2 * 4)))
        trace.free(x)
        for entry in [entry for entry in running if entry[0] <= round_]:
            trace.free(entry[1])
            running.remove(entry)
    return trace


FAMILIES = (("moe", moe), ("server", server), ("mixed", mixed), ("ckpt", ckpt), ("rl", rl), ("ddp", ddp),
            ("fsdp", fsdp), ("pair", pair), ("gnn", gnn), ("unet", unet), ("amr", amr), ("eval", evaluate),
            ("curriculum", curriculum), ("pipe", pipeline), ("krylov", krylov), ("infer", infer),
            ("offload", offload), ("adapters", adapters))


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit("usage: make_traces.py OUT_DIR [SEED]")
    out, seed = argv[1], int(argv[2]) if len(argv) == 3 else 1
    os.makedirs(out, exist_ok=True)
    for name, make in FAMILIES:
        path = os.path.join(out, f"{name}.csv.gz")
        make(seed).write(path)
        print(path)


if __name__ == "__main__":
    main(sys.argv)
