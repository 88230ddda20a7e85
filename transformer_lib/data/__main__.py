"""Rebuild book_prose.txt: python -m transformer_lib.data [chapters_dir]"""
import sys

from . import CORPUS_PATH, build_corpus

corpus = build_corpus(sys.argv[1] if len(sys.argv) > 1 else "chapters")
CORPUS_PATH.write_text(corpus, encoding="utf-8")
print(f"wrote {CORPUS_PATH} ({len(corpus):,} characters, {len(corpus.encode()):,} bytes)")
