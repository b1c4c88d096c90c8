"""The workloads of the GPU training benchmark, on torch and the libraries of the GPU machine:
a decoder-only transformer in plain torch (GPT; also with activation checkpointing and gradient
accumulation, with its activations offloaded to host memory on a copy stream, and compiled by
torch.compile with dynamic shapes), transformers' Llama (training, generation, both in one
reinforcement-learning loop, and served as vLLM serves it: a KV cache sized from the free memory,
continuously batched steps), Mixtral, T5, BERT (masked-language modelling in fp16 with a
GradScaler) and wav2vec 2.0 (CTC on raw audio) built from configs, Llama fine-tuned through peft's
LoRA adapters, timm's ViT-B/16 and ResNet-50, torchvision's Mask R-CNN (multi-scale detection
training), a MeshGraphNets-style simulator on PyTorch Geometric (meshgraphnet.py) and a
Stable-Diffusion-style latent U-Net trained behind its frozen VAE encoder and a transformers CLIP
text encoder (latent_diffusion.py), all with random weights (no downloads).
train_bench.py times them under each allocator; record_traces.py records their allocations. Sizes
and shape schedules are in catalog.py.

A workload is built by build(spec, shapes, seed) and runs one step per step(i); run_steps() times
each step to a torch.cuda.synchronize(). Weights are built on the CPU from a fixed seed and then
moved to the GPU, so every allocator starts from the same model.
"""

import atexit
import os
import shutil
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn

AUTOCAST = torch.bfloat16


def step_seed(seed, step):
    """The seed of step `step`'s data in a run seeded `seed`: the same data under every allocator,
    and a different draw for every step and run seed."""
    return seed * 100003 + step


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention (scaled_dot_product_attention) and an MLP."""

    def __init__(self, width, heads, mlp_ratio):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, mlp_ratio * width)
        self.fc2 = nn.Linear(mlp_ratio * width, width)

    def forward(self, x):
        batch, length, width = x.shape
        qkv = self.qkv(self.ln1(x)).view(batch, length, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (batch, heads, length, head width)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(batch, length, width))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    """Token and position embeddings, blocks, final LayerNorm, LM head tied to the token embedding."""

    def __init__(self, size):
        super().__init__()
        self.tokens = nn.Embedding(size.vocab, size.width)
        self.positions = nn.Embedding(size.max_len, size.width)
        self.blocks = nn.ModuleList(Block(size.width, size.heads, size.mlp_ratio) for _ in range(size.layers))
        self.ln_f = nn.LayerNorm(size.width)
        nn.init.normal_(self.tokens.weight, std=0.02)
        nn.init.normal_(self.positions.weight, std=0.02)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.tokens.weight)


def _parameter_count(model):
    return sum(p.numel() for p in model.parameters())


class _Training:
    """AdamW under bf16 autocast; subclasses give the model and one step's loss."""

    def __init__(self, model, shapes):
        self.model = model.cuda().train()
        self.shapes = shapes
        self.params = _parameter_count(self.model)
        # Only what trains: all of a model's weights, but for a frozen base under adapters (LoRA).
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.1)
        self.loss = None

    def step(self, i):
        # Kept for loops whose data is seeded by the step, the same under every allocator.
        self.step_index = i
        with torch.autocast("cuda", dtype=AUTOCAST):
            loss = self.loss_of(*self.shapes[i])
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.loss = loss.detach()

    def info(self):
        return {"params": self.params, "last_loss": float(self.loss) if self.loss is not None else None}


class GPTTraining(_Training):
    def __init__(self, size, shapes):
        super().__init__(GPT(size), shapes)
        self.vocab = size.vocab

    def loss_of(self, batch, length):
        tokens = torch.randint(0, self.vocab, (batch, length + 1), device="cuda")
        logits = self.model(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, self.vocab), tokens[:, 1:].reshape(-1))


class GPTOffloadTraining(GPTTraining):
    """The GPT with its activations offloaded to host memory, as CPU activation offloading does
    (DeepSpeed's, Megatron's): in the forward pass each saved tensor of `threshold` bytes or more is
    copied to pinned host memory on a copy stream and dropped on the GPU, its memory recorded on the
    copy stream (Tensor.record_stream) so that nothing reuses it while the copy runs; the backward
    pass copies it back. Those blocks are free only once the copy stream's work is done, so how
    soon an allocator takes them back shows in what it holds."""

    threshold = 1 << 20

    def __init__(self, size, shapes):
        super().__init__(size, shapes)
        self.copies = torch.cuda.Stream()

    def _pack(self, tensor):
        if not tensor.is_cuda or isinstance(tensor, nn.Parameter) or \
                tensor.untyped_storage().nbytes() < self.threshold:
            return tensor
        self.copies.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.copies):
            host = torch.empty(tensor.size(), dtype=tensor.dtype, pin_memory=True)
            host.copy_(tensor, non_blocking=True)
        tensor.record_stream(self.copies)
        return host

    def _unpack(self, packed):
        if packed.is_cuda:
            return packed
        torch.cuda.current_stream().wait_stream(self.copies)
        return packed.to("cuda", non_blocking=True)

    def step(self, i):
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            super().step(i)


class GPTCompiledTraining(GPTTraining):
    """The GPT compiled by torch.compile (Inductor, dynamic shapes: one graph for any sequence length
    and batch), the way much new training code runs: Inductor fuses elementwise work and reuses
    buffers inside its graph, so the allocator sees another pattern of requests than eager mode's.
    Each process compiles from empty Inductor and Triton caches of its own (removed at exit), so
    every allocator's first steps pay the same compilation."""

    def __init__(self, size, shapes):
        for variable in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
            os.environ[variable] = tempfile.mkdtemp(prefix=f"tidepool-bench-{variable.lower()}-")
            atexit.register(shutil.rmtree, os.environ[variable], ignore_errors=True)
        super().__init__(size, shapes)
        self.compiled = torch.compile(self.model, dynamic=True)

    def loss_of(self, batch, length):
        tokens = torch.randint(0, self.vocab, (batch, length + 1), device="cuda")
        logits = self.compiled(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, self.vocab), tokens[:, 1:].reshape(-1))


class _AccumulatedTraining(_Training):
    """A step of several micro-batches (the schedule's flattened (batch, length) pairs), each one's
    loss scaled and backpropagated before the next, gradients accumulated, then one optimizer step."""

    def step(self, i):
        micro = self.shapes[i]
        count = len(micro) // 2
        for batch, length in zip(micro[0::2], micro[1::2]):
            with torch.autocast("cuda", dtype=AUTOCAST):
                loss = self.loss_of(batch, length) / count
            loss.backward()
            self.loss = loss.detach()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class GPTCheckpointAccumulate(_Training):
    """The GPT with every block under activation checkpointing (recomputed in the backward pass) and
    gradients accumulated over the micro-batches of a step, each of its own sequence length: the
    shape of memory in most large-model training (a few activations kept per block, recomputation
    allocating and freeing a block's worth at a time, gradients living across micro-batches).

    Its step is the loop recorded in traces/gpt_ckpt_accum.csv.xz, locals and all: `tokens` and
    `logits` keep each micro-batch's tokens and logits alive until the next micro-batch replaces
    them (its logits after its forward pass), and the last ones until the optimizer has stepped.
    Written as _AccumulatedTraining's step (logits freed with the loss function's frame, before the
    backward pass) it is another loop, with a peak 0.48 GiB lower and most frees in another order
    (docs/RESULTS.md section 0, "The aliases' stop")."""

    def __init__(self, size, shapes):
        super().__init__(GPT(size), shapes)
        self.vocab = size.vocab

    def _forward(self, tokens):
        from torch.utils.checkpoint import checkpoint

        model = self.model
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = model.tokens(tokens) + model.positions(positions)
        for block in model.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return F.linear(model.ln_f(x), model.tokens.weight)

    def step(self, i):
        micro = self.shapes[i]
        count = len(micro) // 2
        for batch, length in zip(micro[0::2], micro[1::2]):
            tokens = torch.randint(0, self.vocab, (batch, length + 1), device="cuda")
            with torch.autocast("cuda", dtype=AUTOCAST):
                logits = self._forward(tokens[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, self.vocab), tokens[:, 1:].reshape(-1)) / count
            loss.backward()
            self.loss = loss.detach()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def t5_model(size):
    """transformers' T5ForConditionalGeneration with random weights, from a config (no download)."""
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=size.vocab_size, d_model=size.d_model, d_kv=size.d_kv, d_ff=size.d_ff,
                      num_layers=size.num_layers, num_decoder_layers=size.num_decoder_layers,
                      num_heads=size.num_heads, decoder_start_token_id=0, pad_token_id=0)
    return T5ForConditionalGeneration(config)


class T5Training(_Training):
    """An encoder-decoder trained on random tokens: source and target lengths change independently."""

    def __init__(self, size, shapes):
        super().__init__(t5_model(size), shapes)
        self.vocab = size.vocab_size

    def loss_of(self, batch, source, target):
        inputs = torch.randint(1, self.vocab, (batch, source), device="cuda")
        labels = torch.randint(1, self.vocab, (batch, target), device="cuda")
        return self.model(input_ids=inputs, labels=labels, use_cache=False).loss


def llama_model(size):
    """transformers' LlamaForCausalLM with random weights, from a config (no download), SDPA attention."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=size.vocab_size, hidden_size=size.hidden_size,
                         intermediate_size=size.intermediate_size, num_hidden_layers=size.num_hidden_layers,
                         num_attention_heads=size.num_attention_heads,
                         num_key_value_heads=size.num_key_value_heads,
                         max_position_embeddings=size.max_position_embeddings, attn_implementation="sdpa")
    return LlamaForCausalLM(config)


def mixtral_model(size):
    """transformers' MixtralForCausalLM with random weights, from a config (no download), SDPA attention."""
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(vocab_size=size.vocab_size, hidden_size=size.hidden_size,
                           intermediate_size=size.intermediate_size, num_hidden_layers=size.num_hidden_layers,
                           num_attention_heads=size.num_attention_heads,
                           num_key_value_heads=size.num_key_value_heads,
                           num_local_experts=size.num_local_experts,
                           num_experts_per_tok=size.num_experts_per_tok,
                           max_position_embeddings=size.max_position_embeddings, attn_implementation="sdpa")
    return MixtralForCausalLM(config)


def causal_lm_loss(model, vocab, batch, length):
    """A transformers causal language model's loss on random tokens (labels = inputs: the model
    shifts them itself; no KV cache in training)."""
    tokens = torch.randint(0, vocab, (batch, length), device="cuda")
    return model(input_ids=tokens, labels=tokens, use_cache=False).loss


class CausalLMTraining(_Training):
    """A transformers causal language model (Llama, Mixtral) trained on random tokens."""

    def __init__(self, model, size, shapes):
        super().__init__(model, shapes)
        self.vocab = size.vocab_size

    def loss_of(self, batch, length):
        return causal_lm_loss(self.model, self.vocab, batch, length)


class LlamaCheckpointAccumulate(_AccumulatedTraining):
    """transformers' Llama with its own gradient checkpointing (`gradient_checkpointing_enable`, as
    the Trainer's `gradient_checkpointing=True` sets it) and micro-batches accumulated per step."""

    def __init__(self, size, shapes):
        model = llama_model(size)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        super().__init__(model, shapes)
        self.vocab = size.vocab_size

    def loss_of(self, batch, length):
        return causal_lm_loss(self.model, self.vocab, batch, length)


class LlamaLoRATraining(_Training):
    """Parameter-efficient fine-tuning as peft's and most fine-tuning recipes run it: transformers'
    Llama frozen in bf16, peft's LoRA adapters (in float32, peft's default) on every attention and
    MLP projection with dropout on their inputs, transformers' gradient checkpointing on, AdamW over
    the adapters alone. Unlike full training: no optimizer state or gradients beside the frozen
    weights, so the step's activations, recomputed a layer at a time, and the logits are nearly all
    that changes size."""

    def __init__(self, size, shapes, rank):
        from peft import LoraConfig, get_peft_model

        model = llama_model(size).to(torch.bfloat16)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        adapters = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.05, task_type="CAUSAL_LM",
                              target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                              "down_proj"])
        super().__init__(get_peft_model(model, adapters), shapes)
        self.vocab = size.vocab_size
        self.trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def loss_of(self, batch, length):
        return causal_lm_loss(self.model, self.vocab, batch, length)

    def info(self):
        return {**super().info(), "trainable_params": self.trainable}


class LlamaGeneration:
    """model.generate with sampling, in bf16: a new batch size and prompt length each round, and
    exactly `new_tokens` new tokens (min_new_tokens keeps EOS from ending a round early)."""

    def __init__(self, size, shapes, seed):
        self.model = llama_model(size).to(device="cuda", dtype=torch.bfloat16).eval()
        self.shapes = shapes
        self.seed = seed
        self.vocab = size.vocab_size
        self.params = _parameter_count(self.model)
        self.generated = 0

    def step(self, i):
        batch, prompt, new_tokens = self.shapes[i]
        torch.manual_seed(step_seed(self.seed, i))  # the same samples under every allocator
        tokens = torch.randint(3, self.vocab, (batch, prompt), device="cuda")
        out = self.model.generate(tokens, attention_mask=torch.ones_like(tokens), do_sample=True,
                                  max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0)
        self.generated += (out.shape[1] - prompt) * batch

    def info(self):
        return {"params": self.params, "generated_tokens": self.generated}


class LlamaServing(LlamaGeneration):
    """A server's engine loop, as vLLM runs one, on transformers' Llama in bf16 (no vLLM on the GPU
    machine): what the allocator sees is vLLM's pattern, not its kernels.

    Startup follows vLLM's worker (determine_num_available_blocks): empty the cache and reset the
    peaks, a profile run at the step's token budget (`max_tokens` over `max_seqs` sequences, the
    last token of each sampled), then the KV cache sized from what is left: utilization x the
    device's memory, less the profile's peak in use and whatever the device holds beyond what
    PyTorch has allocated once the cache is emptied (an allocator that keeps memory after
    empty_cache() leaves the server less KV cache), one tensor per layer of blocks of `block_size`
    tokens. Each engine step (catalog.serve_schedule) runs the model on its tokens packed as one
    sequence (decoding sequences one token each, then the prompts prefilled whole), writes every
    layer's key and value projections of those tokens into the cache at the next free slots (a ring
    over the cache), and samples one token per sequence from the logits of its last position, which
    come back to the host as vLLM's do. The attention runs over the step's own tokens (transformers
    has no paged attention kernel), and the positions are each token's index in the step."""

    def __init__(self, size, shapes, params, seed):
        super().__init__(size, shapes, seed)  # the model in bf16, as generation has it
        self.cursor = 0
        p = params
        kv_heads = size.num_key_value_heads
        head_dim = size.hidden_size // size.num_attention_heads
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        per_sequence = p["max_tokens"] // p["max_seqs"]
        self._run(torch.zeros(1, per_sequence * p["max_seqs"], dtype=torch.long, device="cuda"),
                  [per_sequence * (k + 1) - 1 for k in range(p["max_seqs"])])
        torch.cuda.synchronize()
        peak = torch.cuda.memory_stats()["allocated_bytes.all.peak"]
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        non_torch = (total - free) - torch.cuda.memory_stats()["allocated_bytes.all.current"]
        self.profile_peak = peak
        self.non_torch_bytes = non_torch
        available = int(total * p["gpu_memory_utilization"]) - peak - max(non_torch, 0)
        block_bytes = 2 * p["block_size"] * kv_heads * head_dim * 2 * size.num_hidden_layers  # K and V, bf16
        self.kv_blocks = available // block_bytes
        if self.kv_blocks <= 0:
            raise RuntimeError(f"no room for a KV cache: {available} bytes left after the profile run")
        self.kv = [torch.empty(2, self.kv_blocks, p["block_size"], kv_heads, head_dim, dtype=torch.bfloat16,
                               device="cuda") for _ in range(size.num_hidden_layers)]
        self.kv_cache_bytes = sum(t.numel() * t.element_size() for t in self.kv)
        self.slots = None
        for layer, decoder in enumerate(self.model.model.layers):
            for half, projection in enumerate((decoder.self_attn.k_proj, decoder.self_attn.v_proj)):
                projection.register_forward_hook(self._writer(self.kv[layer][half].view(-1, kv_heads * head_dim)))

    def _writer(self, cache):
        def write(module, inputs, output):
            if self.slots is not None:
                cache.index_copy_(0, self.slots, output[0])
        return write

    @torch.inference_mode()
    def _run(self, tokens, last_positions):
        """The model on `tokens` ([1, T]); one token sampled from each of `last_positions`."""
        positions = torch.arange(tokens.shape[1], device="cuda").unsqueeze(0)
        hidden = self.model.model(input_ids=tokens, position_ids=positions, use_cache=False).last_hidden_state
        logits = self.model.lm_head(hidden[0, torch.tensor(last_positions, device="cuda")]).float()
        return torch.multinomial(torch.softmax(logits, dim=-1), 1).squeeze(1).tolist()

    def step(self, i):
        decodes, *prompts = self.shapes[i]
        count = decodes + sum(prompts)
        if count == 0:
            return
        torch.manual_seed(step_seed(self.seed, i))  # the same tokens under every allocator
        tokens = torch.randint(3, self.vocab, (1, count), device="cuda")
        last = list(range(decodes))
        end = decodes
        for prompt in prompts:
            end += prompt
            last.append(end - 1)
        capacity = self.kv[0].shape[1] * self.kv[0].shape[2]
        self.slots = (torch.arange(count, device="cuda") + self.cursor) % capacity
        self.cursor = (self.cursor + count) % capacity
        try:
            self.generated += len(self._run(tokens, last))
        finally:
            self.slots = None

    def info(self):
        return {**super().info(), "kv_blocks": self.kv_blocks, "kv_cache_bytes": self.kv_cache_bytes,
                "profile_peak_in_use_bytes": self.profile_peak, "non_torch_bytes_after_profile": self.non_torch_bytes}


class LlamaRolloutTraining(_Training):
    """One process that samples and trains, as reinforcement-learning trainers of language models do
    (GRPO; PPO without a critic): each step samples completions of random prompts with
    model.generate (the KV cache growing a token at a time), then takes a policy-gradient step on the
    whole sequences, the completion tokens' log-probabilities weighted by each sequence's advantage
    (its reward, random here, normalized over the batch). Both halves run under the same bf16
    autocast on the one fp32 model, so the memory generation leaves behind is what training reuses."""

    def __init__(self, size, shapes, seed):
        super().__init__(llama_model(size), shapes)
        self.seed = seed
        self.vocab = size.vocab_size

    def step(self, i):
        batch, prompt, completion = self.shapes[i]
        torch.manual_seed(step_seed(self.seed, i))  # the same samples under every allocator
        prompts = torch.randint(3, self.vocab, (batch, prompt), device="cuda")
        self.model.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=AUTOCAST):
            sequences = self.model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                                            max_new_tokens=completion, min_new_tokens=completion, pad_token_id=0)
        rewards = torch.randn(batch, device="cuda")
        advantages = ((rewards - rewards.mean()) / (rewards.std() + 1e-6)).unsqueeze(1)
        self.model.train()
        with torch.autocast("cuda", dtype=AUTOCAST):
            logits = self.model(input_ids=sequences, use_cache=False).logits[:, prompt - 1:-1]
            taken = torch.log_softmax(logits.float(), dim=-1).gather(-1, sequences[:, prompt:, None]).squeeze(-1)
            loss = -(taken * advantages).mean()
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.loss = loss.detach()


def bert_model(size):
    """transformers' BertForMaskedLM with random weights, from a config (no download), SDPA attention
    where this transformers' BERT has it."""
    from transformers import BertConfig, BertForMaskedLM

    fields = dict(vocab_size=size.vocab_size, hidden_size=size.hidden_size,
                  intermediate_size=size.intermediate_size, num_hidden_layers=size.num_hidden_layers,
                  num_attention_heads=size.num_attention_heads, max_position_embeddings=size.max_position_embeddings)
    try:
        return BertForMaskedLM(BertConfig(**fields, attn_implementation="sdpa"))
    except (ValueError, ImportError):  # a transformers whose BERT has no SDPA path: its own attention
        return BertForMaskedLM(BertConfig(**fields, attn_implementation="eager"))


class BertMaskedLMTraining(_Training):
    """Masked-language modelling as BERT pre-training and fine-tuning scripts run it: fp16 autocast
    with a GradScaler (the loss scaled, gradients unscaled and clipped, a step skipped on overflow),
    batches padded to their longest sequence with an attention mask (each sequence's own length drawn
    from half the padded length up), 15% of the real tokens masked and predicted. Unlike the other
    loops: fp16 rather than bf16, the scaler's and the clipping's work on every gradient, and a
    padding mask per step."""

    mask_token = 103  # [MASK] in BERT's vocabulary

    def __init__(self, size, shapes, seed):
        super().__init__(bert_model(size), shapes)
        self.vocab = size.vocab_size
        self.seed = seed
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, i):
        batch, length = self.shapes[i]
        generator = torch.Generator().manual_seed(step_seed(self.seed, i))  # the same batch under every allocator
        lengths = torch.randint(length // 2, length + 1, (batch,), generator=generator)
        lengths[0] = length
        positions = torch.arange(length)
        attention_mask = (positions[None, :] < lengths[:, None]).long()
        tokens = torch.randint(1000, self.vocab, (batch, length), generator=generator) * attention_mask
        chosen = (torch.rand(batch, length, generator=generator) < 0.15) & attention_mask.bool()
        labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
        inputs = torch.where(chosen, torch.full_like(tokens, self.mask_token), tokens)
        inputs, attention_mask, labels = (t.cuda(non_blocking=True) for t in (inputs, attention_mask, labels))
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(input_ids=inputs, attention_mask=attention_mask, labels=labels).loss
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.loss = loss.detach()


class ViTTraining(_Training):
    def __init__(self, shapes):
        import timm

        super().__init__(timm.create_model("vit_base_patch16_224", pretrained=False), shapes)
        self.classes = self.model.num_classes

    def loss_of(self, batch):
        images = torch.randn(batch, 3, 224, 224, device="cuda")
        labels = torch.randint(0, self.classes, (batch,), device="cuda")
        return F.cross_entropy(self.model(images), labels)


class ResNetMultiscaleTraining(_Training):
    def __init__(self, shapes):
        import timm

        super().__init__(timm.create_model("resnet50", pretrained=False).to(memory_format=torch.channels_last),
                         shapes)
        self.classes = self.model.num_classes

    def loss_of(self, batch, side):
        images = torch.randn(batch, 3, side, side, device="cuda").to(memory_format=torch.channels_last)
        labels = torch.randint(0, self.classes, (batch,), device="cuda")
        return F.cross_entropy(self.model(images), labels)


class Wav2Vec2CTCTraining(_Training):
    """Speech recognition fine-tuning as transformers' CTC example runs it: wav2vec 2.0 base (a
    convolutional feature encoder over raw 16 kHz audio, then a transformer; SpecAugment's time masks
    on), random weights, a CTC head over a 32-symbol vocabulary. Each step a batch padded to a new
    length (catalog "tokens": batch x samples within a budget of samples), each utterance's own length
    from half the padded length up (zeros after it) and its own transcript length. Unlike the text
    loops: the feature encoder's activations run to hundreds of thousands of frames per utterance
    before the transformer sees 50 a second, and the CTC loss works in float32."""

    def __init__(self, params, shapes, seed):
        from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

        fields = dict(vocab_size=params["vocab"], ctc_loss_reduction="mean", pad_token_id=0)
        try:
            model = Wav2Vec2ForCTC(Wav2Vec2Config(**fields, attn_implementation="sdpa"))
        except (ValueError, ImportError):  # a transformers whose wav2vec 2.0 has no SDPA path
            model = Wav2Vec2ForCTC(Wav2Vec2Config(**fields, attn_implementation="eager"))
        super().__init__(model, shapes)
        self.vocab = params["vocab"]
        self.labels_per_second = params["labels_per_second"]
        self.seed = seed

    def loss_of(self, batch, samples):
        # The same utterances under every allocator: seeded by the step.
        generator = torch.Generator().manual_seed(step_seed(self.seed, self.step_index))
        lengths = torch.randint(samples // 2, samples + 1, (batch,), generator=generator)
        lengths[0] = samples
        audio = torch.randn(batch, samples, generator=generator)
        audio *= (torch.arange(samples)[None, :] < lengths[:, None])
        label_lengths = (lengths * self.labels_per_second // 16000).clamp(min=1)
        labels = torch.randint(1, self.vocab, (batch, int(label_lengths.max())), generator=generator)
        labels[torch.arange(labels.shape[1])[None, :] >= label_lengths[:, None]] = -100
        return self.model(input_values=audio.cuda(non_blocking=True), labels=labels.cuda(non_blocking=True)).loss


class MaskRCNNTraining(_Training):
    """Instance segmentation as torchvision's detection recipe trains it, multi-scale: torchvision's
    Mask R-CNN (ResNet-50 FPN, random weights, trainable batch norm: no pretrained backbone), each
    step resizing its images to a new shorter side (the model's transform, capped at `max_side`),
    4 images of their own height and width, each with its own number of objects, their boxes and
    masks (filled boxes) and labels. Unlike the other loops: a batch of images of different sizes
    padded to one tensor, proposals and detections whose counts follow the data, per-object mask
    targets, and many small tensors in every step."""

    def __init__(self, params, shapes, seed):
        from torchvision.models.detection import maskrcnn_resnet50_fpn

        model = maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=params["classes"],
                                      min_size=params["min_sides"][0], max_size=params["max_side"])
        super().__init__(model, shapes)
        self.classes = params["classes"]
        self.seed = seed

    def _batch(self, i, images):
        """The step's images (on the GPU) and their targets: the same under every allocator."""
        generator = torch.Generator().manual_seed(step_seed(self.seed, i))
        pixels = torch.Generator(device="cuda").manual_seed(step_seed(self.seed, i))
        inputs, targets = [], []
        for height, width, objects in zip(images[0::3], images[1::3], images[2::3]):
            inputs.append(torch.rand(3, height, width, device="cuda", generator=pixels))
            extent = torch.tensor([width, height], dtype=torch.float32)
            corner = torch.rand(objects, 2, generator=generator) * (extent - 32)
            size = 16 + torch.rand(objects, 2, generator=generator) * (extent - corner - 16)
            boxes = torch.cat([corner, corner + size], 1).cuda()
            xs = torch.arange(width, device="cuda")[None, None, :]
            ys = torch.arange(height, device="cuda")[None, :, None]
            b = boxes[:, :, None, None]
            masks = ((xs >= b[:, 0]) & (xs < b[:, 2]) & (ys >= b[:, 1]) & (ys < b[:, 3])).to(torch.uint8)
            labels = torch.randint(1, self.classes, (objects,), generator=generator).cuda()
            targets.append({"boxes": boxes, "labels": labels, "masks": masks})
        return inputs, targets

    def loss_of(self, side, *images):
        # Making the batch under autocast changes nothing: none of its calls is an autocast op.
        self.model.transform.min_size = (side,)
        inputs, targets = self._batch(self.step_index, images)
        return sum(self.model(inputs, targets).values())


class MeshGraphNetTraining(_Training):
    """A learned mesh-based simulator trained as MeshGraphNets is (meshgraphnet.py: PyG's
    MessagePassing and Batch), a next-step loss over every node of the step's meshes. Unlike the
    other loops: per-edge activations (about 6 edges a node) whose row counts follow the step's
    meshes node for node, gathers and scatter-sums over the edge index, and the batch collated on
    the host and copied over every step."""

    def __init__(self, size, shapes, seed):
        import meshgraphnet

        self.meshes = meshgraphnet
        super().__init__(meshgraphnet.MeshGraphNet(size), shapes)
        self.size = size
        self.seed = seed

    def loss_of(self, *grids):
        batch = self.meshes.mesh_batch(list(zip(grids[0::2], grids[1::2])), self.size,
                                       step_seed(self.seed, self.step_index))
        return F.mse_loss(self.model(batch.x, batch.edge_index, batch.edge_attr).float(), batch.y)


class LatentDiffusionTraining(_Training):
    """Text-to-image diffusion training as diffusers' train_text_to_image script runs it, with
    aspect-ratio buckets: each step's images (catalog "buckets": batch x height x width) are encoded
    by the frozen VAE encoder to latents at 1/8 of the side, sampled and scaled, their captions
    (token ids) by the frozen text encoder; noise is added at a random timestep of the scaled-linear
    schedule and the U-Net learns to predict it (mean squared error in float32). The frozen models
    run in bf16 under no_grad, as the script casts them. Unlike the other loops: the VAE's
    full-resolution activations, 0.8-1.7 GiB each (autocast runs GroupNorm in float32) and freed as
    soon as made, before the U-Net's forward; convolutions whose inputs are concatenated skip connections; and a new image
    area and aspect each step."""

    def __init__(self, size, shapes, seed):
        import latent_diffusion
        from transformers import CLIPTextConfig, CLIPTextModel

        model = nn.Module()
        model.unet = latent_diffusion.UNet(size)
        model.vae_encoder = latent_diffusion.VAEEncoder(size).requires_grad_(False)
        model.text_encoder = CLIPTextModel(CLIPTextConfig(
            hidden_size=size.context_dim, intermediate_size=4 * size.context_dim, num_hidden_layers=size.text_layers,
            num_attention_heads=size.text_heads, max_position_embeddings=size.text_tokens,
            vocab_size=size.text_vocab)).requires_grad_(False)
        super().__init__(model, shapes)
        self.model.vae_encoder.eval().to(AUTOCAST)
        self.model.text_encoder.eval().to(AUTOCAST)
        self.size = size
        self.seed = seed
        # Stable Diffusion's scaled-linear noise schedule over 1000 timesteps.
        betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=torch.float64) ** 2
        self.alphas_cumprod = torch.cumprod(1 - betas, 0).float().cuda()

    def loss_of(self, batch, height, width):
        # The same images, captions, noise and timesteps under every allocator: seeded by the step.
        generator = torch.Generator(device="cuda").manual_seed(step_seed(self.seed, self.step_index))
        images = torch.rand(batch, 3, height, width, device="cuda", generator=generator, dtype=AUTOCAST) * 2 - 1
        captions = torch.randint(0, self.size.text_vocab, (batch, self.size.text_tokens), device="cuda",
                                 generator=generator)
        with torch.no_grad():
            mean, log_variance = self.model.vae_encoder(images)
            noise = torch.randn(mean.shape, device="cuda", generator=generator, dtype=mean.dtype)
            latents = (mean + torch.exp(0.5 * log_variance.clamp(-30, 20)) * noise).float() * 0.18215
            context = self.model.text_encoder(input_ids=captions).last_hidden_state
        noise = torch.randn(latents.shape, device="cuda", generator=generator)
        timesteps = torch.randint(0, len(self.alphas_cumprod), (batch,), device="cuda", generator=generator)
        alpha = self.alphas_cumprod[timesteps][:, None, None, None]
        noisy = alpha.sqrt() * latents + (1 - alpha).sqrt() * noise
        return F.mse_loss(self.model.unet(noisy, timesteps, context).float(), noise)


def build(spec, shapes, seed):
    """The workload named by catalog entry `spec`, with the per-step `shapes` (spec.shapes())."""
    torch.manual_seed(seed)
    size = spec.params.get("size")
    if spec.name in ("gpt-vary", "gpt-small-vary", "gpt-fixed"):
        return GPTTraining(size, shapes)
    if spec.name == "hf-llama-train":
        return CausalLMTraining(llama_model(size), size, shapes)
    if spec.name == "hf-llama-generate":
        return LlamaGeneration(size, shapes, seed)
    if spec.name == "timm-vit-train":
        return ViTTraining(shapes)
    if spec.name == "hf-mixtral-train":
        return CausalLMTraining(mixtral_model(size), size, shapes)
    if spec.name == "timm-resnet-multiscale":
        return ResNetMultiscaleTraining(shapes)
    if spec.name == "hf-wav2vec2-ctc":
        return Wav2Vec2CTCTraining(spec.params, shapes, seed)
    if spec.name == "tv-maskrcnn-train":
        return MaskRCNNTraining(spec.params, shapes, seed)
    if spec.name == "peft-llama-lora":
        return LlamaLoRATraining(size, shapes, spec.params["rank"])
    if spec.name == "pyg-meshgraphnet":
        return MeshGraphNetTraining(size, shapes, seed)
    if spec.name == "sd-unet-buckets":
        return LatentDiffusionTraining(size, shapes, seed)
    if spec.name == "hf-t5-train":
        return T5Training(size, shapes)
    if spec.name == "hf-bert-mlm-fp16":
        return BertMaskedLMTraining(size, shapes, seed)
    if spec.name == "gpt-ckpt-accum":
        return GPTCheckpointAccumulate(size, shapes)
    if spec.name == "hf-llama-ckpt-accum":
        return LlamaCheckpointAccumulate(size, shapes)
    if spec.name == "hf-llama-serve":
        return LlamaServing(size, shapes, spec.params, seed)
    if spec.name == "hf-llama-rl":
        return LlamaRolloutTraining(size, shapes, seed)
    if spec.name == "gpt-offload":
        return GPTOffloadTraining(size, shapes)
    if spec.name == "gpt-compile":
        return GPTCompiledTraining(size, shapes)
    raise ValueError(f"no workload {spec.name!r}")


def run_steps(workload, steps, cpu_seconds=None, after_step=None):
    """Runs `steps` steps; returns each one's wall time in seconds, to a torch.cuda.synchronize().
    With a list `cpu_seconds`, appends each step's CPU time of the process (every thread, the
    synchronize's wait included): a step whose CPU time is near its wall time is bound by the host
    (Python, launches, the allocator's own work), one far below it by the GPU. `after_step(i)`, where
    given, runs after step i's times are taken (outside them): the allocator's figures step by step."""
    seconds = []
    for i in range(steps):
        start, cpu_start = time.perf_counter(), time.process_time()
        workload.step(i)
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        if cpu_seconds is not None:
            cpu_seconds.append(time.process_time() - cpu_start)
        if after_step is not None:
            after_step(i)
    return seconds
