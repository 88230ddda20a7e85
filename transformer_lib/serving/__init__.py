"""Serving a model to many users at once (chapter 28): batches of prompts of different lengths,
a paged KV cache, continuous batching, and a streaming HTTP endpoint.

- :mod:`.ragged`: what a cache whose rows hold different lengths tells the model (per-row offsets,
  a mask that is causal and hides padding at once);
- :mod:`.batching`: ``PaddedKVCache`` (contiguous) and ``generate_batch`` (static batching);
- :mod:`.paged_cache`: ``PagedKVCache``: a block pool, block tables, copy-on-write prefix sharing;
- :mod:`.varlen`: ``varlen_forward``, one forward pass over many sequences' new tokens laid end to
  end (decoding rows and prompt chunks together) through the paged cache;
- :mod:`.scheduler`: ``ContinuousBatcher``, which admits and retires requests at every step, each
  step one mixed forward pass (blocks allocated on demand, the newest request pre-empted and
  recomputed when the pool runs out);
- :mod:`.baselines`: ``serve_one_at_a_time`` and ``serve_static``, what continuous batching is
  measured against;
- :mod:`.packed_linear`: ``PackedLinears``, so that a step of a few rows costs close to one row's
  on a CPU (a kernel reading each weight once up to 8 rows, oneDNN-packed weights beyond; the
  batchers' ``pack_linears=True``);
- :mod:`.workload`: seeded arrivals and lengths, and the latency statistics of a run;
- :mod:`.server`: the batcher behind an OpenAI-style ``/v1/completions`` route (``make serve``).
"""
from .baselines import serve_one_at_a_time, serve_static
from .batching import CACHES, PaddedKVCache, decode_step_time, generate_batch, pad_prompts
from .packed_linear import PackedLinears
from .paged_cache import PagedKVCache, blocks_needed, pool_slots
from .ragged import RaggedCache, ragged_mask
from .scheduler import ContinuousBatcher, serve_continuous
from .varlen import varlen_forward
from .workload import Request, latency_summary, make_workload

__all__ = ["RaggedCache", "PaddedKVCache", "PagedKVCache", "generate_batch", "pad_prompts", "blocks_needed",
           "pool_slots", "ragged_mask", "decode_step_time", "ContinuousBatcher", "serve_continuous",
           "serve_one_at_a_time", "serve_static", "Request", "make_workload", "latency_summary", "CACHES",
           "PackedLinears", "varlen_forward"]
