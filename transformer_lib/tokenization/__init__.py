"""Byte-level BPE tokenization from scratch (chapter 15).

* :mod:`.pretokenize` text to UTF-8 bytes (lone surrogates refused), GPT-2's chunk split, the
  printable byte alphabet
* :mod:`.bpe` training: count pairs, merge the most frequent, repeat (readable and fast trainers)
* :mod:`.tokenizer` :class:`BPETokenizer`: ``train(text, vocab_size)``, ``encode``, ``decode``,
  ``merges``, ``len``; a fast encoder through the ``tokenizers`` library
"""
from .bpe import best_pair, count_pairs, merge_pair, tie_rank, train_bpe, train_bpe_fast
from .pretokenize import GPT2_SPLIT_PATTERN, bytes_to_unicode, split_chunks, to_utf8, unicode_to_bytes, visible
from .tokenizer import BPETokenizer

__all__ = ["BPETokenizer", "count_pairs", "merge_pair", "best_pair", "tie_rank", "train_bpe", "train_bpe_fast",
           "GPT2_SPLIT_PATTERN", "split_chunks", "to_utf8", "bytes_to_unicode", "unicode_to_bytes", "visible"]
