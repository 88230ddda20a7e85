"""A GGUF file's header read in one pass: its metadata as Python values, and where each tensor lies.

The layout (GGUF version 2 and 3, little-endian, as llama.cpp writes it):

    "GGUF" | version u32 | tensor count u64 | key/value count u64
    key/value pairs: key (u64 length + UTF-8) | value type u32 | value
        a value is a scalar (u8 ... f64, bool), a string (u64 length + UTF-8) or an array
        (element type u32 | count u64 | the elements one after another)
    tensor infos: name | n_dims u32 | dims u64 x n_dims (fastest first) | type u32 | offset u64
    padding to ``general.alignment`` (32 by default), then the tensors' bytes at their offsets.

Why not ``gguf.GGUFReader`` (the reference, which the tests compare against): it makes a numpy
view for every part of every field, about a million views for SmolLM2's 49,152-token vocabulary
and merges, ~6 s of CPU on each load. Reading the same strings with :func:`struct.unpack_from`
takes a few hundredths of a second. The tensors themselves stay a read-only memory map, exactly as
``GGUFReader`` gives them: a float32 (F32) array shaped like the PyTorch tensor, or a quantized
tensor's raw uint8 blocks shaped (rows ..., bytes per row).
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

__all__ = ["GGUFFile", "GGUFTensor"]

_MAGIC = b"GGUF"
# GGUF's value types (gguf.GGUFValueType) that are numbers: code -> little-endian dtype
_NUMBERS = {code: np.dtype(t) for code, t in {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4",
                                              7: "?", 10: "<u8", 11: "<i8", 12: "<f8"}.items()}
_STRING, _ARRAY = 8, 9
# element types whose arrays GGUF stores as plain numbers (F16/F32/...: one element per item)
_PLAIN = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "I16": np.int16,
          "I32": np.int32, "I64": np.int64}


class GGUFTensor(NamedTuple):
    """One tensor of the file: GGUF name, ``gguf.GGMLQuantizationType``, GGUF's dimensions
    (fastest first), and its data as a read-only view of the file (see the module docstring)."""
    name: str
    tensor_type: Any
    shape: tuple[int, ...]
    data: np.ndarray


class GGUFFile:
    """``metadata`` (key -> str, int, float, bool or list, in file order) and ``tensors`` of a
    GGUF file. A file that is not GGUF, is big-endian or ends early is a ValueError naming it."""

    def __init__(self, path: str | Path):
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
        from gguf.quants import quant_shape_to_byte_shape

        self.path = Path(path)
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        self._buf = memoryview(self._map)
        self._at = 0
        if self._bytes(4) != _MAGIC:
            raise ValueError(f"path: {self.path.name} is not a GGUF file (its first bytes are not 'GGUF')")
        version = self._scalar(4)
        if version not in (2, 3):
            raise ValueError(f"path: {self.path.name} is GGUF version {version} (big-endian or unknown); "
                             "versions 2 and 3, little-endian, are read")
        n_tensors, n_values = self._scalar(10), self._scalar(10)
        self.metadata: dict[str, Any] = {}
        for _ in range(n_values):
            key = self._string()
            self.metadata[key] = self._value(self._scalar(4))
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            dims = tuple(self._scalar(10) for _ in range(self._scalar(4)))
            infos.append((name, dims, self._scalar(4), self._scalar(10)))
        alignment = self.metadata.get("general.alignment", 32)
        start = -(-self._at // alignment) * alignment  # the header, padded to the alignment
        self.tensors: list[GGUFTensor] = []
        for name, dims, code, offset in infos:
            kind = GGMLQuantizationType(code)
            shape = tuple(reversed(dims))  # (rows ..., columns): row-major, as PyTorch holds it
            block, type_size = GGML_QUANT_SIZES[kind]
            count = int(np.prod(dims, dtype=np.int64))
            first = start + offset
            n_bytes = count * type_size if kind.name in _PLAIN else count // block * type_size
            if first + n_bytes > len(self._map):
                raise ValueError(f"path: {self.path.name} ends before the data of its tensor {name}")
            data = self._map[first:first + n_bytes]
            if kind.name in _PLAIN:
                data = data.view(_PLAIN[kind.name]).reshape(shape)
            else:  # quantized: whole blocks of bytes, one row of them per row of weights
                data = data.reshape(quant_shape_to_byte_shape(shape, kind))
            self.tensors.append(GGUFTensor(name, kind, dims, data))

    # -- reading the header, front to back ---------------------------------------------------
    def _bytes(self, n: int) -> bytes:
        if self._at + n > len(self._buf):
            raise ValueError(f"path: {self.path.name} ends inside its header (byte {self._at} of {len(self._buf)})")
        out = bytes(self._buf[self._at:self._at + n])
        self._at += n
        return out

    def _scalar(self, kind: int):
        dtype = _NUMBERS[kind]
        return np.frombuffer(self._bytes(dtype.itemsize), dtype=dtype)[0].item()  # a Python int, float or bool

    def _string(self) -> str:
        return self._bytes(self._scalar(10)).decode("utf-8")

    def _value(self, kind: int):
        if kind == _STRING:
            return self._string()
        if kind in _NUMBERS:
            return self._scalar(kind)
        if kind != _ARRAY:
            raise ValueError(f"path: {self.path.name} has a value of unknown type {kind} at byte {self._at}")
        element, count = self._scalar(4), self._scalar(10)
        if element in _NUMBERS:  # numbers: one slice of the file
            dtype = _NUMBERS[element]
            return np.frombuffer(self._bytes(count * dtype.itemsize), dtype=dtype).tolist()
        if element == _STRING:  # the vocabulary and merges: ~100,000 strings, read in one loop
            buf, at, out = self._buf, self._at, []
            try:
                for _ in range(count):
                    (n,) = struct.unpack_from("<Q", buf, at)
                    out.append(str(buf[at + 8:at + 8 + n], "utf-8"))
                    at += 8 + n
            except struct.error:
                at = len(buf) + 1
            if at > len(buf):
                raise ValueError(f"path: {self.path.name} ends inside its header (an array of {count} strings)")
            self._at = at
            return out
        return [self._value(element) for _ in range(count)]
