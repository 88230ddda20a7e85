"""A paged KV cache: keys and values in fixed-size blocks from one pool (chapter 28; vLLM's
PagedAttention, Kwon et al. 2023).

A contiguous cache gives each sequence one buffer as long as the longest it might become: a
batch of rows reserves ``rows x (longest prompt + max new tokens)`` slots, and every short prompt
or early stop leaves its share empty. A paged cache cuts memory into blocks of ``block_size``
positions, like an operating system's pages:

* a **pool** of ``num_blocks`` blocks per layer, one tensor (H_kv, num_blocks * block_size, d) for
  the keys and one for the values (slot s of a head's row holds one position);
* a **block table** per sequence: its i-th block holds positions ``i * block_size ..`` (the
  position of slot s of logical block b is ``b * block_size + s``), so a sequence's blocks can lie
  anywhere in the pool;
* **allocation** of a block only when a sequence's next token needs it (at most one block per
  sequence is partly empty: the waste is below ``block_size`` positions per sequence), and
  **freeing** its blocks back to the pool the moment it finishes;
* optional **prefix sharing**: :meth:`PagedKVCache.fork` gives a new sequence the same blocks as
  another (a common prompt computed once, each block's reference count raised); a shared block is
  copied before a sequence writes into it (**copy-on-write**), so sharing never changes an output.

Attention here *gathers* each row's blocks into a padded (B, H_kv, W, d) view through one index
tensor, then runs the ordinary attention with the ragged mask (:mod:`.ragged`): the readable
version. The heads lead the pool's shape so that a gathered (H_kv, B, W, d) view is contiguous:
attention's products then read it as it is, without copying it again.
vLLM's kernel reads the blocks in place instead of copying them; the memory held is the
same, and the outputs equal the contiguous cache's (tests/test_paged_cache.py).
"""
from __future__ import annotations

import torch

from .._checks import check_active_rows, check_block_pool, check_int, check_sequence_id
from .ragged import RaggedCache

__all__ = ["PagedKVCache", "blocks_needed", "pool_slots"]


def blocks_needed(length: int, block_size: int) -> int:
    """Blocks that ``length`` positions occupy: ``ceil(length / block_size)``."""
    return -(-length // block_size)


def pool_slots(tables: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """Where positions live in the pool: ``tables`` (B, n) block numbers, ``positions`` (B, L) ->
    (B, L) pool slots, ``tables[i, p // block_size] * block_size + p % block_size`` (the block
    table's one job: the logical block p // block_size, then the offset inside it)."""
    check_int("block_size", block_size)
    return tables.gather(1, positions // block_size) * block_size + positions % block_size  # (B, L)


class PagedKVCache(RaggedCache):
    """Keys and values of many sequences in blocks of ``block_size`` positions from a pool of
    ``num_blocks`` (per layer; the pool's tensors are made at the first write, when the heads and
    widths are known).

    Sequences are named by any hashable id: :meth:`add_sequence`, :meth:`fork`, :meth:`free`;
    :meth:`select` says which of them fill the rows of the next forward pass, in order. Then
    ``model(tokens (B, L), cache=paged)`` works as with any cache (:mod:`.ragged`)."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int = 16):
        super().__init__(num_layers)
        check_block_pool(num_blocks, block_size)
        self.num_blocks, self.block_size = num_blocks, block_size
        self.keys: list[torch.Tensor | None] = [None] * num_layers  # (H_kv, num_blocks * block_size, d) pools
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.free_blocks = list(range(num_blocks - 1, -1, -1))  # a stack: block 0 is handed out first
        self.refs = [0] * num_blocks  # sequences holding each block
        self.tables: dict = {}  # sequence -> its block table (list of block numbers)
        self.seq_lengths: dict = {}  # sequence -> cached positions
        self.rows: list = []  # the sequences of the next forward pass, one per row
        self.peak_blocks = 0
        self._slots = self._gather = None

    # --- the pool -------------------------------------------------------------------------------
    def _allocate(self) -> int:
        if not self.free_blocks:
            raise RuntimeError(f"the pool's {self.num_blocks} blocks are all in use: free a sequence first")
        block = self.free_blocks.pop()
        self.refs[block] = 1
        self.peak_blocks = max(self.peak_blocks, self.blocks_in_use())
        return block

    def _release(self, block: int) -> None:
        self.refs[block] -= 1
        if self.refs[block] == 0:
            self.free_blocks.append(block)

    def blocks_in_use(self) -> int:
        return self.num_blocks - len(self.free_blocks)

    def block_bytes(self) -> int:
        """Bytes of one block, keys and values, every layer (0 before the first write)."""
        if self.keys[0] is None:
            return 0
        per_slot = sum((k.shape[0] * k.shape[2] + v.shape[0] * v.shape[2]) * k.element_size()
                       for k, v in zip(self.keys, self.values))
        return per_slot * self.block_size

    def nbytes(self) -> int:
        """Bytes of the blocks in use (what the sequences hold, partly filled last blocks included)."""
        return self.blocks_in_use() * self.block_bytes()

    # --- sequences ------------------------------------------------------------------------------
    def add_sequence(self, seq) -> None:
        """A new, empty sequence (no blocks until its first token)."""
        if seq in self.tables:
            raise ValueError(f"seq: the cache already holds a sequence {seq!r}")
        self.tables[seq], self.seq_lengths[seq] = [], 0

    def fork(self, parent, child) -> None:
        """A new sequence ``child`` sharing every block of ``parent`` (its prompt computed once):
        reference counts rise, and the first write into a shared block copies it first."""
        check_sequence_id(parent, self.tables)
        self.add_sequence(child)
        self.tables[child] = list(self.tables[parent])
        self.seq_lengths[child] = self.seq_lengths[parent]
        for block in self.tables[child]:
            self.refs[block] += 1

    def free(self, seq) -> None:
        """Forget a sequence: its blocks go back to the pool (a shared one when its last holder goes)."""
        check_sequence_id(seq, self.tables)
        for block in self.tables.pop(seq):
            self._release(block)
        del self.seq_lengths[seq]
        self.rows = [r for r in self.rows if r != seq]

    def select(self, rows) -> None:
        """The sequences of the next forward pass, one per row of its (B, L) tokens, in that order."""
        if self._step is not None:
            raise ValueError("rows: a step is under way; select the rows between forward passes")
        self.rows = check_active_rows(rows, self.tables)

    # --- the ragged protocol --------------------------------------------------------------------
    def row_lengths(self) -> torch.Tensor:
        return torch.tensor([self.seq_lengths[s] for s in self.rows], dtype=torch.long)

    def _set_row_lengths(self, lengths: torch.Tensor) -> None:
        for seq, n in zip(self.rows, lengths.tolist()):
            self.seq_lengths[seq] = n
            table = self.tables[seq]
            while len(table) > blocks_needed(n, self.block_size):  # blocks past the new end go back
                self._release(table.pop())

    def _begin(self, L: int) -> None:
        """Make room for L new positions per row: allocate missing blocks, copy shared blocks that
        will be written (copy-on-write), and build this step's write and read slot indices."""
        bs = self.block_size
        for seq in self.rows:
            self.make_room(seq, L)
        positions = self.write_slots(L)  # (B, L)
        tables = self._table_tensor(blocks_needed(self.length + L, bs))  # (B, nb)
        self._slots = pool_slots(tables, positions, bs)  # (B, L) pool slots to write
        every = torch.arange(self.length + L).expand(len(self.rows), -1)  # (B, W + L) every position
        self._gather = pool_slots(tables, every, bs)  # (B, W + L) pool slots to read

    def make_room(self, seq, n: int) -> None:
        """Blocks for ``n`` more positions of ``seq``: missing ones allocated, shared ones that will
        be written copied first (copy-on-write). Raises if the pool runs out."""
        bs, length, table = self.block_size, self.seq_lengths[seq], self.tables[seq]
        for b in range(length // bs, blocks_needed(length + n, bs)):
            if b == len(table):
                table.append(self._allocate())
            elif self.refs[table[b]] > 1:  # shared with another sequence: copy before writing
                old, table[b] = table[b], self._allocate()
                for pool in (*self.keys, *self.values):
                    if pool is not None:
                        pool[:, table[b] * bs:(table[b] + 1) * bs] = pool[:, old * bs:(old + 1) * bs]
                self._release(old)

    def slots(self, seq, start: int, end: int, pad: bool = False) -> torch.Tensor:
        """(end - start,) pool slots of ``seq``'s positions start .. end - 1 (its blocks must hold
        them; with ``pad``, positions past its blocks read slots of block 0: padding, never attended)."""
        table = torch.tensor(self.tables[seq], dtype=torch.long)
        need = blocks_needed(end, self.block_size)
        if pad and len(table) < need:
            table = torch.cat([table, table.new_zeros(need - len(table))])
        return pool_slots(table[None], torch.arange(start, end)[None], self.block_size)[0]

    def pool(self, layer: int, heads: int, head_dim: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``layer``'s key and value pools, (H_kv, num_blocks * block_size, d) each, made at
        first use with ``like``'s dtype and device (the flattened step writes into them directly)."""
        if self.keys[layer] is None:
            self.keys[layer] = like.new_zeros(heads, self.num_blocks * self.block_size, head_dim)
            self.values[layer] = like.new_zeros(heads, self.num_blocks * self.block_size, head_dim)
        return self.keys[layer], self.values[layer]

    def _table_tensor(self, width: int) -> torch.Tensor:
        """(B, width) block tables of the rows, padded with block 0 (read, never attended to)."""
        out = torch.zeros(len(self.rows), max(width, 1), dtype=torch.long)
        for i, seq in enumerate(self.rows):
            table = self.tables[seq][:width]
            out[i, :len(table)] = torch.tensor(table, dtype=torch.long)
        return out

    def _write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        B, H, L, d = k.shape
        keys, values = self.pool(layer, H, d, k)
        slots = self._slots.reshape(-1).to(k.device)  # (B * L,)
        keys.index_copy_(1, slots, k.transpose(0, 1).reshape(H, B * L, d))  # (B, H, L, d) -> (H, B * L, d)
        values.index_copy_(1, slots, v.transpose(0, 1).reshape(H, B * L, d))

    def _read(self, layer: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        index = self._gather.to(self.keys[layer].device)  # (B, W + L)
        B, W = index.shape
        k, v = (pool.index_select(1, index.reshape(-1)).view(pool.shape[0], B, W, pool.shape[2]).transpose(0, 1)
                for pool in (self.keys[layer], self.values[layer]))  # (H, B * W, d) -> (B, H, W, d)
        return k, v

    def __repr__(self) -> str:
        return (f"PagedKVCache(layers={self.num_layers}, sequences={len(self.tables)}, "
                f"blocks {self.blocks_in_use()}/{self.num_blocks} of {self.block_size} positions)")
