"""Data parallelism: every rank trains the same model on its own rows of one global batch.

The chapter-18 ladder, one function each:

* :func:`allreduce_gradients` -- data parallelism by hand: after ``backward`` every rank holds
  the gradient of *its* rows; one ``all_reduce`` (sum) divided by N gives every rank the gradient
  of the whole batch, so the N optimizers take the same step and the copies never drift apart.
* ``strategy="ddp"`` -- ``DistributedDataParallel`` does the same, but packs the gradients into
  ~25 MB buckets and starts each bucket's all-reduce as soon as backward has filled it, so
  communication overlaps the rest of backward.
* ``strategy="fsdp"`` -- FSDP2's ``fully_shard`` (ZeRO stage 3): each rank keeps only 1/N of every
  parameter, gradient and optimizer state, all-gathers a block's parameters just before it runs
  and reduce-scatters its gradients right after.

Because rank r takes rows ``[r B/N, (r + 1) B/N)`` of the *same* global batch, the mean of the N
per-rank gradients is the gradient of the global batch: the result does not depend on N (up to
float32 rounding of the different summation order). That is what the tests check.

The recipe is chapter 16's (:func:`transformer_lib.training.train_lm`'s settings) with dropout
0: dropout draws a different mask for a row depending on which rank holds it, so with dropout the
runs could only agree in distribution, not to rounding.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
from torch import nn

from .._checks import check_distributed_run
from ..data import load_corpus, load_gpt_checkpoint, split_paragraphs
from ..device import seed_everything
from ..model import DecoderOnlyLM
from ..training import (History, causal_lm_loss, decay_parameter_groups, lm_batch, make_adamw, train_loop,
                        warmup_cosine_schedule)

__all__ = ["Recipe", "STRATEGIES", "rank_rows", "allreduce_gradients", "book_tokens", "build_model",
           "wrap", "full_state_dict", "train", "state_bytes", "ddp_bucket_events", "zero1_state_bytes"]

STRATEGIES = ("hand", "ddp", "fsdp")


@dataclass(frozen=True)
class Recipe:
    """Chapter 16's small GPT and its optimizer settings (dropout 0: see the module docstring)."""
    d_model: int = 64        # width of the residual stream
    num_heads: int = 4       # 16-wide heads
    num_layers: int = 2      # two Pre-LN blocks: each is one FSDP unit
    context: int = 64        # tokens per window (= the model's max_len)
    init_std: float = 0.02   # GPT-2's initial weight scale
    lr: float = 3e-3         # peak AdamW learning rate
    warmup_steps: int = 5    # linear warm-up (at most steps - 1), then cosine decay to 10% (short runs: 5, not 50)
    weight_decay: float = 0.1  # on linear weights only (decay_parameter_groups)
    grad_clip: float = 1.0   # global gradient-norm clip, computed over all ranks' shards


def rank_rows(batch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous B/N rows of the global ``batch`` (B, L) -> (B/N, L)."""
    rows = batch.shape[0] // world_size
    return batch[rank * rows:(rank + 1) * rows]  # (B/N, L)


def allreduce_gradients(model: nn.Module) -> None:
    """Data parallelism by hand: replace every gradient by its mean over the ranks (one
    ``all_reduce`` per parameter; DDP does the same in buckets, overlapped with backward)."""
    world_size = dist.get_world_size()
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
            param.grad /= world_size


def book_tokens() -> tuple[torch.Tensor, int]:
    """The book corpus's training paragraphs encoded with chapter 16's tokenizer (the one saved
    with its checkpoint, so no rank has to train a tokenizer): ``(ids, vocab_size)``."""
    _, tokenizer, _ = load_gpt_checkpoint()
    train_text, _ = split_paragraphs(load_corpus())
    return torch.tensor(tokenizer.encode(train_text)), len(tokenizer)


def build_model(vocab_size: int, seed: int, recipe: Recipe = Recipe()) -> DecoderOnlyLM:
    """The same initial model on every rank: seeded before it is built."""
    seed_everything(seed)
    return DecoderOnlyLM(vocab_size, d_model=recipe.d_model, num_heads=recipe.num_heads,
                         num_layers=recipe.num_layers, max_len=recipe.context, dropout=0.0,
                         init_std=recipe.init_std)


def wrap(model: nn.Module, strategy: str) -> nn.Module:
    """The model as the strategy trains it: itself ('hand'), in DDP, or sharded by FSDP2
    (each block one unit, then the root, which holds the tied embedding/head)."""
    if strategy == "ddp":
        device = next(model.parameters()).device
        return nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if strategy == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        # the mesh on the model's own device: left to itself FSDP2 picks CUDA whenever a GPU
        # exists and would move a gloo run's CPU model onto it
        device = next(model.parameters()).device
        world = dist.get_world_size() if dist.is_initialized() else 1
        mesh = init_device_mesh(device.type, (world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    return model


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter as a full, plain CPU tensor, whatever the strategy (FSDP gathers its
    shards). Collective: call it on every rank; rank 0 receives the tensors, the others an
    empty dict (``cpu_offload`` keeps a second full copy off every other rank)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    if dist.is_initialized():
        state = get_model_state_dict(inner, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        state = inner.state_dict()
    return {k: v.detach().clone().cpu() for k, v in state.items()}


def _nbytes(t: torch.Tensor) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t  # a DTensor's shard on this rank, or the tensor
    return local.numel() * local.element_size()


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes this rank holds for parameters, gradients and optimizer state, measured on the
    tensors it keeps between steps (a shard's own elements; FSDP's padding of uneven shards and
    the buffers a block gathers while it runs are not counted): the numbers ZeRO divides by N."""
    params = list(model.parameters())
    out = {"params": sum(_nbytes(p) for p in params),
           "grads": sum(_nbytes(p.grad) for p in params if p.grad is not None),
           "optimizer": sum(_nbytes(v) for s in optimizer.state.values()
                            for v in s.values() if torch.is_tensor(v) and v.dim() > 0)}  # m and v, not the step count
    out["total"] = out["params"] + out["grads"] + out["optimizer"]
    out["numel"] = sum(p.numel() for p in params)  # the full (unsharded) parameter count
    return out


def train(rank: int, world_size: int, strategy: str, steps: int, global_batch: int, seed: int,
          recipe: Recipe = Recipe(), measure: bool = False) -> History:
    """Train the recipe for ``steps`` steps on this rank's rows, on the loop core
    (:func:`~transformer_lib.training.train_loop`); call it on every rank of an initialised
    process group (or with world_size 1 and no group). Returns the
    :class:`~transformer_lib.training.History`: ``loss`` (per step, the mean over the global batch,
    equal on every rank), ``state`` (the full state dict, rank 0 only, see :func:`full_state_dict`),
    ``recipe`` and, with ``measure``, this rank's :func:`state_bytes` (``bytes``) and the bytes it
    sent per step (``sent_per_step``). The model is left in eval mode.
    """
    check_distributed_run(strategy, steps, global_batch, world_size, seed)
    from .comm import bytes_sent
    ids, vocab_size = book_tokens()
    nccl = dist.is_initialized() and dist.get_backend() == "nccl"  # torchrun on GPUs: one GPU per rank
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    model = wrap(build_model(vocab_size, seed, recipe).to(device), strategy)
    optimizer = make_adamw(model.module if strategy == "ddp" else model, recipe.lr, recipe.weight_decay)
    generator = torch.Generator().manual_seed(seed)  # the same global batches on every rank
    sent, clock = [], {}

    def step_fn(step):
        batch = lm_batch(ids, global_batch, recipe.context, generator)  # (B, context), identical on all ranks
        rows = rank_rows(batch, rank, world_size).to(device)  # (B/N, context)
        clock["before"] = bytes_sent()
        return causal_lm_loss(model(rows), rows)  # mean over this rank's rows; DDP / FSDP communicate in backward

    def after_backward():
        if strategy == "hand" and world_size > 1:
            allreduce_gradients(model)

    def global_mean(loss):  # called after the update: the bytes of this step, then the global batch's mean loss
        sent.append(bytes_sent() - clock["before"])
        mean_loss = loss.detach().clone()
        if world_size > 1:
            dist.all_reduce(mean_loss)  # equal rows per rank
        return mean_loss.item() / world_size

    schedule = warmup_cosine_schedule(min(recipe.warmup_steps, steps - 1), steps)
    history = train_loop(model, optimizer, steps, step_fn, schedule=schedule, grad_clip=recipe.grad_clip,
                         after_backward=after_backward, loss_value=global_mean)
    history.update(state=full_state_dict(model), recipe=asdict(recipe))
    if measure:
        history.update(bytes=state_bytes(model, optimizer), sent_per_step=sent)
    return history


def ddp_bucket_events(rank: int, world_size: int, bucket_cap_mb: float = 0.1, seed: int = 0) -> list[str]:
    """Run on every rank: one DDP step of the recipe with small buckets, recording in order each
    bucket's all-reduce as DDP launches it (its parameters and bytes) and the moment backward
    computes the gradient of the positional embedding, the first module of the forward pass and
    so the last of the backward. Buckets launched before that moment overlap the rest of backward.
    """
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    ids, vocab_size = book_tokens()
    model = build_model(vocab_size, seed)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    events: list[str] = []

    def hook(state, bucket):
        names = [n for n, p in model.named_parameters() if any(p is q for q in bucket.parameters())]
        events.append(f"bucket {bucket.index()}: all-reduce of {bucket.buffer().numel() * 4:,} bytes "
                      f"({len(names)} tensors, {names[-1]} ... {names[0]})")
        return allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, hook)
    first_layer = next(model.pos.parameters())  # the learned position table: forward's first module
    first_layer.register_hook(lambda g: events.append("gradient of the positional embedding"))
    generator = torch.Generator().manual_seed(seed)
    for _ in range(2):  # DDP rebuilds its buckets in the order gradients arrived after the first step
        events.clear()
        rows = rank_rows(lm_batch(ids, 2 * world_size, Recipe().context, generator), rank, world_size)  # (2, context)
        causal_lm_loss(ddp(rows), rows).backward()
        events.append("backward returns")
    return events


def zero1_state_bytes(rank: int, world_size: int, seed: int = 0, recipe: Recipe = Recipe()) -> dict[str, int]:
    """Run on every rank: one DDP step of the recipe with PyTorch's ZeRO stage 1,
    ``ZeroRedundancyOptimizer`` (each rank keeps the AdamW state of its share of the parameters),
    and return this rank's :func:`state_bytes`. PyTorch assigns *whole* tensors to ranks (largest
    first, to the least-loaded rank), so one large tensor, like the tied embedding, makes the
    shares uneven: stage 1's 8 P / N is met on average, not on every rank."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    ids, vocab_size = book_tokens()
    model = build_model(vocab_size, seed, recipe)
    ddp = nn.parallel.DistributedDataParallel(model)
    decay, no_decay = decay_parameter_groups(model, recipe.weight_decay)
    optimizer = ZeroRedundancyOptimizer(decay["params"], optimizer_class=torch.optim.AdamW, lr=recipe.lr,
                                        weight_decay=decay["weight_decay"], betas=(0.9, 0.95))
    optimizer.add_param_group(no_decay)
    rows = rank_rows(lm_batch(ids, 2 * world_size, recipe.context, torch.Generator().manual_seed(seed)), rank,
                     world_size)  # (2, context)
    causal_lm_loss(ddp(rows), rows).backward()
    optimizer.step()
    return state_bytes(model, optimizer.optim)  # .optim: this rank's local AdamW and its state
