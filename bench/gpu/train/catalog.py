"""What the GPU training benchmark runs, without torch: the workloads (their sizes, step counts
and seeded shape schedules), the allocators, and the environment each child process gets.

Shapes come from Python's own seeded RNG, so every allocator sees the same sequence of shapes;
workloads.py builds the models from the sizes here. Importable without torch, for the launcher
and the tests (python/tests/test_train_bench.py).
"""

import dataclasses
import hashlib
import os
import random

ALLOCATORS = ("default", "expandable", "tidepool")
# Run only when named: tidepool recording every allocation and free (TIDEPOOL_RECORD), so one
# command measures the recording's cost beside `tidepool` (report.recording_costs).
RECORDING = "tidepool+record"
# Run only when named: cudaMallocAsync, natively (PyTorch's backend) and behind PyTorch's
# pluggable-allocator interface (bench/gpu/pluggable_async.cpp, the library named by
# PLUGGABLE_ASYNC_VARIABLE): the same allocator both ways, so the pair measures the interface
# tidepool's package goes through, with no tidepool in the path.
ASYNC = "async"
PLUGGABLE_ASYNC = "pluggable-async"
PLUGGABLE_ASYNC_VARIABLE = "TIDEPOOL_BENCH_PLUGGABLE_ASYNC"
KNOWN_ALLOCATORS = ALLOCATORS + (RECORDING, ASYNC, PLUGGABLE_ASYNC)


def uses_tidepool(allocator):
    """Whether PyTorch is routed to tidepool in a run under `allocator`."""
    return allocator in ("tidepool", RECORDING)
# The allocator settings a child must not inherit: the benchmark chooses them itself.
ALLOC_CONF_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
EXPANDABLE_CONF = "expandable_segments:True"
ASYNC_CONF = "backend:cudaMallocAsync"


def alloc_conf(allocator):
    """The PYTORCH_CUDA_ALLOC_CONF a run under `allocator` has (None: unset)."""
    return {"expandable": EXPANDABLE_CONF, ASYNC: ASYNC_CONF}.get(allocator)


def use_pluggable_async(torch):
    """Routes `torch`'s CUDA allocations to cudaMallocAsync behind the pluggable interface (the
    library PLUGGABLE_ASYNC_VARIABLE names), before the first CUDA allocation."""
    shim = torch.cuda.memory.CUDAPluggableAllocator(os.environ[PLUGGABLE_ASYNC_VARIABLE],
                                                    "tidepool_bench_async_alloc", "tidepool_bench_async_free")
    torch.cuda.memory.change_current_allocator(shim)


@dataclasses.dataclass(frozen=True)
class GPTSize:
    """A decoder-only transformer (workloads.GPT): width, depth, heads, vocabulary, longest sequence."""

    width: int
    layers: int
    heads: int
    vocab: int
    max_len: int
    mlp_ratio: int = 4


@dataclasses.dataclass(frozen=True)
class LlamaSize:
    """transformers.LlamaConfig fields of the Llama workloads."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    max_position_embeddings: int


# ~148M parameters: the GPU is the bottleneck at 16k tokens a step.
GPT_BIG = GPTSize(width=896, layers=12, heads=14, vocab=32000, max_len=4096)
# ~6M parameters at 4k tokens a step: the CPU (kernel launches, Python) is the bottleneck.
GPT_SMALL = GPTSize(width=256, layers=4, heads=4, vocab=8192, max_len=2048)
# ~207M parameters (untied head, grouped-query attention).
LLAMA = LlamaSize(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12, num_attention_heads=16,
                  num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096)


@dataclasses.dataclass(frozen=True)
class MixtralSize:
    """transformers.MixtralConfig fields of the mixture-of-experts workload."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    num_local_experts: int
    num_experts_per_tok: int
    vocab_size: int
    max_position_embeddings: int


# ~290M parameters, most in 8 experts of which each token uses 2: the tokens each expert gets change
# with every batch (the router's choice), so the expert layers' blocks are ragged in every step.
MIXTRAL = MixtralSize(hidden_size=768, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=12,
                      num_key_value_heads=4, num_local_experts=8, num_experts_per_tok=2, vocab_size=32000,
                      max_position_embeddings=4096)


@dataclasses.dataclass(frozen=True)
class T5Size:
    """transformers.T5Config fields of the encoder-decoder workload."""

    d_model: int
    d_kv: int
    d_ff: int
    num_layers: int
    num_decoder_layers: int
    num_heads: int
    vocab_size: int


@dataclasses.dataclass(frozen=True)
class BertSize:
    """transformers.BertConfig fields of the masked-language-model workload."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    vocab_size: int
    max_position_embeddings: int


# ~0.85B parameters (TinyLlama's width, 16 layers): the frozen base of the LoRA workload, held in bf16.
LLAMA_1B = LlamaSize(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=32,
                     num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096)


@dataclasses.dataclass(frozen=True)
class MeshGraphNetSize:
    """The encode-process-decode graph network of the mesh workload (workloads.MeshGraphNet)."""

    node_features: int
    edge_features: int
    hidden: int
    blocks: int
    outputs: int


# MeshGraphNets' shape (Pfaff et al., 2021): 128 wide, the processor's blocks each an edge and a node MLP.
MESH_GRAPH_NET = MeshGraphNetSize(node_features=12, edge_features=3, hidden=128, blocks=10, outputs=2)


@dataclasses.dataclass(frozen=True)
class LatentDiffusionSize:
    """The diffusion workload's models (latent_diffusion.py): the U-Net's channels per level, residual
    blocks a level, the levels with transformer blocks, the attention heads' width; the text
    encoder's width (the U-Net's cross-attention context) and the VAE encoder's channels per level."""

    channels: tuple
    blocks: int
    attention: tuple
    head_dim: int
    context_dim: int
    latent_channels: int
    vae_channels: tuple
    text_layers: int
    text_heads: int
    text_tokens: int
    text_vocab: int


# Stable Diffusion's layout at 0.6 of its width and three levels of its four: a U-Net of ~223M
# parameters, attention on the lower two levels as SDXL has it; SD's VAE encoder and a CLIP
# ViT-L/14-sized text encoder, both frozen.
LATENT_DIFFUSION = LatentDiffusionSize(channels=(192, 384, 768), blocks=2, attention=(1, 2), head_dim=64,
                                       context_dim=768, latent_channels=4, vae_channels=(128, 256, 512, 512),
                                       text_layers=12, text_heads=12, text_tokens=77, text_vocab=49408)


# ~110M parameters (bert-base's shape): an encoder whose sequences are at most 512 tokens.
BERT_BASE = BertSize(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                     vocab_size=30522, max_position_embeddings=512)


# ~223M parameters (t5-base's shape): an encoder and a decoder whose lengths change independently.
T5_BASE = T5Size(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_decoder_layers=12, num_heads=12,
                 vocab_size=32128)


@dataclasses.dataclass(frozen=True)
class Workload:
    """One benchmark workload. `shapes(seed, steps)` gives the per-step shapes (tuples of ints)."""

    name: str
    description: str
    steps: int  # default number of steps (rounds for generation), warm-up included
    warmup: int  # leading steps left out of the median and p90
    modules: tuple  # Python packages it needs besides torch
    schedule: str  # "tokens": (batch, seqlen) within a token budget; "fixed"; "batch"; "generate";
    # "multiscale"; "seq2seq": (batch, source, target); "accumulate": micro-batches of "tokens";
    # "rollout": (batch, prompt, completion), the batch fitted to a budget of prompt + completion tokens;
    # "serve": (decoding sequences, prompt lengths prefilled...) per engine step (serve_schedule);
    # "detection": (resize side, then height, width, objects of each image) per step;
    # "meshes": (rows, columns of each mesh) per step, within a budget of nodes (mesh_schedule);
    # "buckets": (batch, height, width) per step, an aspect-ratio bucket (bucket_schedule)
    params: dict

    def shapes(self, seed, steps):
        rng = random.Random(f"{self.name}/{seed}")  # str seeds hash the same in every process
        p = self.params
        if self.schedule == "tokens":
            return token_budget_shapes(rng, steps, p["token_budget"], p["min_len"], p["max_len"], p["multiple"])
        if self.schedule == "fixed":
            return [(p["batch"], p["seqlen"])] * steps
        if self.schedule == "batch":
            return [(rng.randrange(p["min_batch"], p["max_batch"] + 1, p["multiple"]),) for _ in range(steps)]
        if self.schedule == "multiscale":
            # (batch, side): a new square image side each step, the batch fitted to a pixel budget.
            choices = range(p["min_side"], p["max_side"] + 1, p["multiple"])
            sides = [rng.choice(choices) for _ in range(steps)]
            return [(max(1, p["pixel_budget"] // (side * side)), side) for side in sides]
        if self.schedule == "seq2seq":
            # The batch fitted to a budget of source tokens; the target length drawn on its own.
            shapes = []
            for batch, source in token_budget_shapes(rng, steps, p["token_budget"], p["min_len"], p["max_len"],
                                                     p["multiple"]):
                shapes.append((batch, source, rng.randrange(p["min_target"], p["max_target"] + 1, p["multiple"])))
            return shapes
        if self.schedule == "accumulate":
            # Each step `micro` micro-batches (batch, seqlen) flattened into one tuple, a new length each.
            micro = token_budget_shapes(rng, steps * p["micro"], p["token_budget"], p["min_len"], p["max_len"],
                                        p["multiple"])
            return [tuple(x for shape in micro[i * p["micro"]:(i + 1) * p["micro"]] for x in shape)
                    for i in range(steps)]
        if self.schedule == "rollout":
            shapes = []
            for _ in range(steps):
                prompt = rng.randrange(p["min_prompt"], p["max_prompt"] + 1, p["multiple"])
                completion = rng.randrange(p["min_new"], p["max_new"] + 1, p["multiple"])
                shapes.append((max(1, p["token_budget"] // (prompt + completion)), prompt, completion))
            return shapes
        if self.schedule == "serve":
            return serve_schedule(rng, steps, p)
        if self.schedule == "detection":
            return detection_schedule(rng, steps, p)
        if self.schedule == "meshes":
            return mesh_schedule(rng, steps, p)
        if self.schedule == "buckets":
            return bucket_schedule(rng, steps, p)
        if self.schedule == "generate":
            return [(rng.choice(p["batches"]),
                     rng.randrange(p["min_prompt"], p["max_prompt"] + 1, p["multiple"]),
                     p["new_tokens"]) for _ in range(steps)]
        raise ValueError(f"{self.name}: unknown schedule {self.schedule!r}")


def token_budget_shapes(rng, steps, token_budget, min_len, max_len, multiple):
    """(batch, seqlen) per step: seqlen uniform over the multiples of `multiple` in [min_len, max_len],
    batch = token_budget // seqlen (at least 1)."""
    if min_len % multiple or max_len % multiple or not 0 < min_len <= max_len:
        raise ValueError(f"sequence lengths [{min_len}, {max_len}] are not multiples of {multiple}")
    shapes = []
    for _ in range(steps):
        seqlen = rng.randrange(min_len, max_len + 1, multiple)
        shapes.append((max(1, token_budget // seqlen), seqlen))
    return shapes


def serve_schedule(rng, steps, p):
    """The engine steps of a continuously batching server (as vLLM's scheduler makes them, prompts
    prefilled whole): requests arrive each step (`arrivals`: the counts drawn from), each with a
    prompt of `min_prompt`-`max_prompt` tokens (multiples of `multiple`) and `min_new`-`max_new`
    tokens to generate; `initial` wait at the start. Each step every running sequence decodes one
    token, then waiting requests are admitted in arrival order while the step stays within
    `max_tokens` tokens and `max_seqs` sequences; a request's prefill makes its first token, and it
    leaves once it has made all of them. Returns per step (decoding sequences, prompt lengths
    prefilled...)."""
    waiting = []  # (prompt, new tokens) in arrival order
    running = []  # new tokens each running sequence has still to make
    choices = range(p["min_prompt"], p["max_prompt"] + 1, p["multiple"])

    def arrive(count):
        for _ in range(count):
            waiting.append((rng.choice(choices), rng.randrange(p["min_new"], p["max_new"] + 1)))

    arrive(p["initial"])
    schedule = []
    for _ in range(steps):
        arrive(rng.choice(p["arrivals"]))
        decodes = len(running)
        budget = p["max_tokens"] - decodes
        prefills = []
        while waiting and decodes + len(prefills) < p["max_seqs"] and waiting[0][0] <= budget:
            prompt, new = waiting.pop(0)
            budget -= prompt
            prefills.append(prompt)
            running.append(new)  # this step's prefill makes its first token (counted below)
        schedule.append((decodes, *prefills))
        running = [left - 1 for left in running if left > 1]
    return schedule


def detection_schedule(rng, steps, p):
    """The batches of a detection training loop with multi-scale training, as torchvision's and
    detectron2's recipes run it: each step one shorter side that the model resizes its images to
    (`min_sides`), then `batch` images of their own height and width (multiples of `multiple` in
    [`min_image`, `max_image`]) with their own number of annotated objects (1 to `max_objects`).
    Returns per step (resize side, height, width, objects, height, width, objects, ...)."""
    sides = range(p["min_image"], p["max_image"] + 1, p["multiple"])
    schedule = []
    for _ in range(steps):
        step = [rng.choice(p["min_sides"])]
        for _ in range(p["batch"]):
            step += [rng.choice(sides), rng.choice(sides), rng.randint(1, p["max_objects"])]
        schedule.append(tuple(step))
    return schedule


def bucket_schedule(rng, steps, p):
    """The batches of an image-generation training loop with aspect-ratio bucketing, as Stable
    Diffusion's fine-tuning scripts run it on images of many sizes: each step one bucket, an image
    area (a square of one of `sides`) and an aspect ratio (one of `aspects`, width over height), its
    sides rounded to multiples of `multiple`, and as many images as fit `pixel_budget` (at least
    one). Returns per step (batch, height, width)."""
    schedule = []
    for _ in range(steps):
        side, aspect = rng.choice(p["sides"]), rng.choice(p["aspects"])
        width = max(p["multiple"], round(side * aspect ** 0.5 / p["multiple"]) * p["multiple"])
        height = max(p["multiple"], round(side / aspect ** 0.5 / p["multiple"]) * p["multiple"])
        schedule.append((max(1, p["pixel_budget"] // (width * height)), height, width))
    return schedule


def mesh_schedule(rng, steps, p):
    """The batches of a mesh-based simulator's training loop (MeshGraphNets-style): each step as many
    meshes as fit `node_budget` nodes (at least one), each a grid of its own rows and columns
    (`min_side` to `max_side` each, any count), as a dataset of simulations of different
    resolutions gives them. Returns per step (rows, columns, rows, columns, ...)."""
    schedule = []
    for _ in range(steps):
        step, nodes = [], 0
        while True:
            rows, columns = rng.randint(p["min_side"], p["max_side"]), rng.randint(p["min_side"], p["max_side"])
            if step and nodes + rows * columns > p["node_budget"]:
                break
            step += [rows, columns]
            nodes += rows * columns
        schedule.append(tuple(step))
    return schedule


def shapes_digest(shapes):
    """A short hash of a shape schedule: equal digests mean the same shapes in the same order."""
    return hashlib.sha256(repr([tuple(s) for s in shapes]).encode()).hexdigest()[:16]


_TOKENS_16K = {"token_budget": 16384, "min_len": 256, "max_len": 4096, "multiple": 64}

WORKLOADS = {w.name: w for w in (
    Workload("gpt-vary", "GPT ~148M, AdamW, bf16 autocast, new sequence length each step, 16k tokens",
             80, 10, (), "tokens", {"size": GPT_BIG, **_TOKENS_16K}),
    Workload("gpt-small-vary", "GPT ~6M (CPU-bound), new sequence length each step, 4k tokens",
             80, 10, (), "tokens",
             {"size": GPT_SMALL, "token_budget": 4096, "min_len": 128, "max_len": 2048, "multiple": 64}),
    Workload("gpt-fixed", "GPT ~148M, fixed shape 16 x 1024", 80, 10, (), "fixed",
             {"size": GPT_BIG, "batch": 16, "seqlen": 1024}),
    Workload("hf-llama-train", "transformers Llama ~207M from a config, new sequence length each step",
             80, 10, ("transformers",), "tokens", {"size": LLAMA, **_TOKENS_16K}),
    Workload("hf-llama-generate", "transformers Llama ~207M, bf16, generate with sampling, "
             "varying batch and prompt", 12, 2, ("transformers",), "generate",
             {"size": LLAMA, "batches": (1, 2, 4, 8, 16, 32), "min_prompt": 32, "max_prompt": 512,
              "multiple": 32, "new_tokens": 64}),
    Workload("timm-vit-train", "timm ViT-B/16 (vit_base_patch16_224), bf16 autocast, batch varying each step",
             80, 10, ("timm",), "batch", {"min_batch": 32, "max_batch": 256, "multiple": 16}),
    Workload("hf-mixtral-train", "transformers Mixtral (8 experts, top 2) ~290M from a config, new sequence "
             "length each step", 80, 10, ("transformers",), "tokens", {"size": MIXTRAL, **_TOKENS_16K}),
    Workload("hf-t5-train", "transformers T5 ~223M (t5-base's shape) from a config, bf16 autocast, new source "
             "and target lengths each step, 16k source tokens", 80, 10, ("transformers",), "seq2seq",
             {"size": T5_BASE, **_TOKENS_16K, "max_len": 2048, "min_target": 64, "max_target": 1024}),
    Workload("gpt-ckpt-accum", "GPT ~148M with activation checkpointing on every block and 4 micro-batches "
             "of 8k tokens accumulated per step, each a new sequence length", 80, 10, (), "accumulate",
             {"size": GPT_BIG, **_TOKENS_16K, "token_budget": 8192, "micro": 4}),
    Workload("hf-llama-ckpt-accum", "transformers Llama ~207M with its gradient checkpointing on and 4 "
             "micro-batches of 8k tokens accumulated per step, each a new sequence length", 80, 10,
             ("transformers",), "accumulate", {"size": LLAMA, **_TOKENS_16K, "token_budget": 8192, "micro": 4}),
    Workload("hf-llama-rl", "transformers Llama ~207M in a reinforcement-learning loop: each step samples "
             "completions with generate (new batch, prompt and completion lengths), then a policy-gradient "
             "update on them", 40, 5, ("transformers",), "rollout",
             {"size": LLAMA, "token_budget": 16384, "min_prompt": 64, "max_prompt": 768, "min_new": 32,
              "max_new": 160, "multiple": 32, "history_entries": 12_000_000}),
    Workload("gpt-offload", "GPT ~148M, activations of 1 MiB or more offloaded to pinned host memory on a copy "
             "stream in the forward pass (record_stream) and brought back for the backward pass, new sequence "
             "length each step, 8k tokens", 80, 10, (), "tokens",
             {"size": GPT_BIG, **_TOKENS_16K, "token_budget": 8192}),
    Workload("gpt-compile", "GPT ~148M compiled by torch.compile (Inductor, dynamic shapes), AdamW, bf16 "
             "autocast, new sequence length each step, 16k tokens", 80, 10, (), "tokens",
             {"size": GPT_BIG, **_TOKENS_16K}),
    Workload("hf-bert-mlm-fp16", "transformers BERT ~110M (bert-base's shape) from a config, masked-language "
             "modelling under fp16 autocast with a GradScaler and gradient clipping, each step's batch padded to "
             "its longest sequence (attention mask), a new padded length each step, 16k tokens", 80, 10,
             ("transformers",), "tokens",
             {"size": BERT_BASE, "token_budget": 16384, "min_len": 32, "max_len": 512, "multiple": 8}),
    Workload("hf-llama-serve", "transformers Llama ~207M, bf16, served as vLLM serves: a profile run at the "
             "step's token budget, the KV cache sized from the free memory left (90% of the device), then "
             "continuously batched engine steps (prefills and decodes, a new token count each step)", 400, 20,
             ("transformers",), "serve",
             {"size": LLAMA, "gpu_memory_utilization": 0.9, "block_size": 16, "max_tokens": 4096, "max_seqs": 128,
              "initial": 32, "arrivals": (0, 0, 0, 0, 0, 0, 1, 2), "min_prompt": 32, "max_prompt": 2048,
              "multiple": 16, "min_new": 16, "max_new": 384}),
    Workload("hf-wav2vec2-ctc", "transformers wav2vec 2.0 base (~95M) from a config, CTC fine-tuning on raw "
             "16 kHz audio, bf16 autocast, each step's batch padded to a new length of 2-16 s, 160 s of audio "
             "a step", 80, 10, ("transformers",), "tokens",
             {"token_budget": 160 * 16000, "min_len": 2 * 16000, "max_len": 16 * 16000, "multiple": 4000,
              "vocab": 32, "labels_per_second": 12}),
    Workload("tv-maskrcnn-train", "torchvision Mask R-CNN (ResNet-50 FPN) from its constructor, bf16 autocast, "
             "multi-scale training: each step a new resize side and 4 images of their own size with their own "
             "number of objects (boxes and masks)", 80, 10, ("torchvision",), "detection",
             {"batch": 4, "min_sides": tuple(range(480, 801, 32)), "max_side": 1333, "min_image": 384,
              "max_image": 1024, "multiple": 32, "max_objects": 40, "classes": 91}),
    Workload("peft-llama-lora", "transformers Llama ~0.85B from a config, frozen in bf16, fine-tuned through "
             "peft's LoRA adapters (rank 16 on every projection) with gradient checkpointing, bf16 autocast, new "
             "sequence length each step, 16k tokens", 80, 10, ("transformers", "peft"), "tokens",
             {"size": LLAMA_1B, **_TOKENS_16K, "rank": 16}),
    Workload("pyg-meshgraphnet", "a MeshGraphNets-style simulator on PyTorch Geometric's MessagePassing "
             "(encoder, 10 edge-and-node blocks, decoder), bf16 autocast, each step a new set of meshes of "
             "their own resolution within 100k nodes, about 6 edges a node", 80, 10, ("torch_geometric",),
             "meshes", {"size": MESH_GRAPH_NET, "node_budget": 100_000, "min_side": 60, "max_side": 240}),
    Workload("sd-unet-buckets", "a Stable-Diffusion-style latent U-Net (~223M, latent_diffusion.py) trained as "
             "diffusers' text-to-image script trains one: each step's images through the frozen VAE encoder and "
             "their captions through a frozen CLIP-sized text encoder (transformers, from a config), both in "
             "bf16, then the U-Net's noise-prediction loss under bf16 autocast; aspect-ratio buckets of "
             "512-1024 px images, a new bucket each step, the batch fitted to 6 images of 768 px", 80, 10,
             ("transformers",), "buckets",
             {"size": LATENT_DIFFUSION, "sides": (512, 640, 768, 896, 1024),
              "aspects": (0.5, 0.6, 0.75, 1.0, 1.33, 1.67, 2.0), "multiple": 64, "pixel_budget": 6 * 768 * 768}),
    Workload("timm-resnet-multiscale", "timm ResNet-50, bf16 autocast, channels-last, a new image size "
             "each step (160-448 px), batch fitted to 64 images of 224 px", 80, 10, ("timm",), "multiscale",
             {"min_side": 160, "max_side": 448, "multiple": 32, "pixel_budget": 64 * 224 * 224}),
)}

# Those whose traces record_traces.py records by default: the training loops of 80 steps or more.
# (traces/hf_llama_generate.csv.xz, 12 rounds of generation, was recorded with --workloads;
# traces/hf_llama_rl.csv.xz, 40 steps, with --workloads hf-llama-rl: its generation makes 7.4M
# history entries, so its params raise record_traces.py's bound, history_entries;
# traces/hf_llama_serve.csv.gz, the server's 400 engine steps, with --workloads hf-llama-serve on an
# H100: its KV cache is sized from the device it runs on. The largest traces are kept as .csv.xz,
# recompressed from what record_traces.py writes (`zcat T.csv.gz | xz -9`): far smaller than gzip,
# so that the repository stays small enough to be copied whole to a GPU machine.)
RECORDED = ("gpt-vary", "gpt-small-vary", "hf-llama-train", "timm-vit-train", "hf-mixtral-train",
            "timm-resnet-multiscale", "hf-t5-train", "gpt-ckpt-accum", "hf-llama-ckpt-accum", "gpt-compile",
            "tv-maskrcnn-train", "hf-wav2vec2-ctc", "peft-llama-lora", "pyg-meshgraphnet", "sd-unet-buckets")


def parse_names(text, known, what):
    """A comma-separated list of names, each one of `known` (order kept, repeats dropped)."""
    names = []
    for name in (n.strip() for n in text.split(",")):
        if not name:
            continue
        if name not in known:
            raise ValueError(f"unknown {what} {name!r} (known: {', '.join(known)})")
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError(f"no {what} given")
    return names


def child_environment(base, allocator, python_root, record=None):
    """The environment of a child running one workload under `allocator`: everything in `base`
    (the NCCL / multicast settings, TIDEPOOL_LIBRARY, ...) passes through, except inherited
    allocator settings, which the benchmark sets itself, and a simulated tidepool device.
    TIDEPOOL_RECORD (tidepool's recording of every allocation and free) reaches tidepool runs only:
    `record` if given, else the inherited one; a `tidepool+record` run needs one of them."""
    if allocator not in KNOWN_ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}")
    env = {k: v for k, v in base.items()
           if k not in ALLOC_CONF_VARIABLES and k not in ("TIDEPOOL_DEVICE", "TIDEPOOL_RECORD")
           and not k.startswith("TIDEPOOL_SIM")}
    if uses_tidepool(allocator) and (record or base.get("TIDEPOOL_RECORD")):
        env["TIDEPOOL_RECORD"] = record or base["TIDEPOOL_RECORD"]
    if allocator == RECORDING and "TIDEPOOL_RECORD" not in env:
        raise ValueError(f"allocator {RECORDING!r} needs a file to record to")
    if allocator == PLUGGABLE_ASYNC and not env.get(PLUGGABLE_ASYNC_VARIABLE):
        raise ValueError(f"allocator {PLUGGABLE_ASYNC!r} needs {PLUGGABLE_ASYNC_VARIABLE}: the path of "
                         "libtidepool_bench_pluggable_async.so (built in bench/gpu)")
    conf = alloc_conf(allocator)
    if conf is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    paths = [python_root] + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p and p != python_root]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    return env
