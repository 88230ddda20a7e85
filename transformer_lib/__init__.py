"""transformer_lib: the one library every chapter of *Transformers, Interactively* imports.

Modules, one concept each:

* :mod:`.attention` scaled dot-product attention (readable + SDPA fast path)
* :mod:`.masks` boolean masks (True = may attend, causal, padding, prefix LM, ...) and conversions
  to torch's convention
* :mod:`.multihead` the one attention module: multi-head, grouped-query and multi-query attention
  (self and cross, causal, with a KV cache and hook points)
* :mod:`.norms` LayerNorm from scratch, RMSNorm, BatchNorm over tokens
* :mod:`.feedforward` the position-wise FFN (ReLU, GELU, SwiGLU)
* :mod:`.positional` sinusoidal, learned, RoPE, ALiBi
* :mod:`.layers` encoder and decoder layers, Post-LN and Pre-LN, with the hook points every block has
* :mod:`.model` encoder, decoder, Transformer, Seq2SeqTransformer, DecoderOnlyLM (the reader's GPT
  and, with Llama's switches, SmolLM2); :mod:`.config` their configurations (``ModelConfig``,
  ``Seq2SeqConfig``: every switch, one field each); :mod:`.saving` ``save_pretrained`` /
  ``from_pretrained`` (config.json + model.safetensors); :mod:`.latent_attention` DeepSeek's
  multi-head latent attention (``attention="mla"``)
* :mod:`.rnn` the recurrent baseline; :mod:`.cost` multiply-accumulate and parameter counts,
  work and depth levels
* :mod:`.tiled` exact attention tile by tile with an online softmax (FlashAttention's idea, chapter 11)
* :mod:`.sparse` sliding-window, dilated, global and BigBird attention kernels (a package: patterns,
  a readable reference kernel, blocked, flex, dilated, global tokens)
* :mod:`.kv_cache` the key/value cache; :mod:`.logit_filters` decoding strategies on one step's
  logits (greedy, temperature, top-k, top-p, repetition penalty); :mod:`.sampling` the generation
  loops every decoder shares (batch, one prompt, several strategies, beam search,
  log-probabilities; ``forward(tokens, cache=None)``, ``new_cache()``)
* :mod:`.pretrained` real weights in the library's own models: all-MiniLM-L6-v2 (:mod:`.pretrained.minilm`),
  GGUF files (:mod:`.pretrained.gguf`), Llama's config and name map (:mod:`.pretrained.llama`),
  SmolLM2 (:mod:`.pretrained.smollm2`, chapter 17)
* :mod:`.tasks` every synthetic data set; :mod:`.toy_models` the small models chapters train (one
  stem, ``.blocks``); :mod:`.probes` recording attention and activations, head scores, Jacobian dependency maps,
  gradient norms; :mod:`.circuits` logit lens, activation patching, direct logit attribution,
  ablations (chapter 24); :mod:`.induction` induction heads (chapter 23)
* :mod:`.profiling` timing and FLOP measurements; :mod:`.forests` the random-forest appendix;
  :mod:`._checks` the input checks every public call runs once; :mod:`._extensions` building the
  compiled kernels
* :mod:`.tokenization` byte-level BPE from scratch (chapter 15); :mod:`.training` the training
  loop and the language-model recipe (chapter 16); :mod:`.data` the book-prose corpus and the
  small GPT checkpoint
* :mod:`.distributed` data, sharded, tensor and pipeline parallelism (chapter 18);
  :mod:`.quantization` int8/int4 weights, kernels and the fused decoding step (chapter 19);
  :mod:`.export` ONNX export for the explainer page
* :mod:`.finetune` a classifier on a pretrained encoder (chapter 20); :mod:`.lora` LoRA adapters and
  :mod:`.instruct` instruction tuning (chapter 21); :mod:`.preference` DPO (chapter 22)
* :mod:`.device`, :mod:`.plotting` (every figure shown with a description: its alt text), :mod:`.widgets`,
  :mod:`.exercises`; ``python -m transformer_lib`` (:mod:`.__main__`)

The book's machinery (chapter pipeline, student copies, slides, progress, book build) is the
separate package ``bookkit``; nothing here imports it.
"""
__version__ = "1.0.0"

from .attention import attention_fast, scaled_dot_product_attention
from .config import ModelConfig, Seq2SeqConfig
from .cost import block_macs, cost_table, count_parameters, transformer_parameters
from .device import cpu_threads, get_device, seed_everything
from .feedforward import FeedForward
from .kv_cache import KVCache, cache_bytes_per_token
from .layers import DecoderLayer, TransformerBlock
from .masks import (causal_mask, combine_masks, dilated_mask, from_torch_mha_mask, global_tokens_mask,
                    key_padding_to_mask, padding_mask, prefix_lm_mask, sliding_window_mask, to_torch_mha_mask)
from .model import Decoder, DecoderOnlyLM, Encoder, Seq2SeqTransformer, Transformer
from .multihead import MultiHeadAttention
from .norms import LayerNorm, RMSNorm, TokenBatchNorm
from .positional import (LearnedPositionalEmbedding, RotaryEmbedding, SinusoidalPositionalEncoding,
                         alibi_bias, alibi_slopes, apply_rotary, sinusoidal_encoding)
from .rnn import ElmanRNN, torch_rnn
from .saving import from_pretrained, save_pretrained
from .sparse import dilated_attention, sliding_window_attention
from .tiled import tiled_attention
