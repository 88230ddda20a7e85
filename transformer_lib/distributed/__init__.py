"""Training on many processes with ``torch.distributed`` (chapter 18, "Training on many devices").

One module per idea, in the order the chapter teaches them:

* :mod:`.launch` -- starting N ranks from Python (:func:`launch`) or joining ``torchrun``'s group;
* :mod:`.data_parallel` -- the same model on every rank, each on its rows of one global batch:
  gradients all-reduced by hand, by ``DistributedDataParallel``, or sharded by FSDP2;
* :mod:`.zero` -- memory per rank under the ZeRO stages (16 bytes per parameter, divided by N);
* :mod:`.comm` -- bytes a rank really sends, against the ring all-reduce's 2 (N - 1) / N;
* :mod:`.tensor_parallel` -- Megatron's column- then row-parallel MLP and head-parallel attention;
* :mod:`.pipeline` -- stages and micro-batches, and the bubble (p - 1) / (m + p - 1).

The command line (``python -m transformer_lib.distributed``, see :mod:`.__main__`) trains chapter
16's GPT under ``torchrun``: ``torchrun --nproc-per-node N -m transformer_lib.distributed
--strategy {ddp,fsdp} --steps S --global-batch B --seed K --save FILE``.
"""
from .comm import bytes_sent, measure_allreduce, ring_allreduce_bytes
from .data_parallel import (STRATEGIES, Recipe, allreduce_gradients, book_tokens, build_model, ddp_bucket_events,
                            full_state_dict, rank_rows, state_bytes, train, wrap, zero1_state_bytes)
from .launch import LOOPBACK_ENV, init_from_env, launch
from .pipeline import bubble_fraction, measured_bubble, pipeline_forward, pipeline_stages
from .tensor_parallel import (ColumnRowParallelMLP, HeadParallelAttention, compare_with_dense, copy_to_parallel,
                              reduce_from_parallel)
from .zero import zero_bytes_per_rank

__all__ = ["launch", "init_from_env", "LOOPBACK_ENV", "Recipe", "STRATEGIES", "rank_rows", "allreduce_gradients", "book_tokens",
           "build_model", "wrap", "full_state_dict", "train", "state_bytes", "ddp_bucket_events", "zero1_state_bytes", "zero_bytes_per_rank", "bytes_sent",
           "ring_allreduce_bytes", "measure_allreduce", "ColumnRowParallelMLP", "HeadParallelAttention",
           "copy_to_parallel", "reduce_from_parallel", "compare_with_dense", "bubble_fraction", "measured_bubble", "pipeline_stages", "pipeline_forward"]
