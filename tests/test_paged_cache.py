"""The paged KV cache (transformer_lib.serving.paged_cache): the same outputs as the contiguous
caches, blocks allocated as tokens arrive and returned when a sequence ends, prefix sharing with
copy-on-write, and the memory it holds against padded contiguous caches."""
from __future__ import annotations

import pytest
import torch

import transformer_lib as tl
from transformer_lib.serving import PaddedKVCache, PagedKVCache, blocks_needed

V = 53


def _model():
    torch.manual_seed(0)
    return tl.DecoderOnlyLM(V, 32, 4, 2, positional="rope", num_kv_heads=2, max_len=128).eval()


def _ids(n, seed):
    return torch.randint(0, V, (1, n), generator=torch.Generator().manual_seed(seed))


def test_paged_logits_equal_the_plain_cache_step_by_step():
    model = _model()
    ids = _ids(23, 0)
    with torch.no_grad():
        plain = model.new_cache()
        want = [model(ids[:, :7], cache=plain)] + [model(ids[:, t:t + 1], cache=plain) for t in range(7, 23)]
        paged = PagedKVCache(2, num_blocks=8, block_size=4)
        paged.add_sequence("a")
        paged.select(["a"])
        got = [model(ids[:, :7], cache=paged)] + [model(ids[:, t:t + 1], cache=paged) for t in range(7, 23)]
    torch.testing.assert_close(torch.cat(got, 1), torch.cat(want, 1), atol=1e-5, rtol=0)
    assert paged.tables["a"] and len(paged.tables["a"]) == blocks_needed(23, 4) == 6
    assert paged.blocks_in_use() == 6


def test_blocks_are_allocated_lazily_and_freed_to_the_pool():
    model = _model()
    paged = PagedKVCache(2, num_blocks=6, block_size=4)
    with torch.no_grad():
        for seq, n in (("a", 5), ("b", 3)):
            paged.add_sequence(seq)
            paged.select([seq])
            model(_ids(n, 1), cache=paged)
        assert paged.tables == {"a": [0, 1], "b": [2]}  # ceil(5/4) + ceil(3/4) blocks
        paged.select(["a", "b"])
        model(torch.tensor([[1], [2]]), cache=paged)  # a: 6 positions (block 1 has room), b: 4
        assert paged.blocks_in_use() == 3
        model(torch.tensor([[1], [2]]), cache=paged)  # b's fifth position opens a block
        assert paged.tables["b"] == [2, 3] and paged.seq_lengths == {"a": 7, "b": 5}
    paged.free("a")
    assert paged.blocks_in_use() == 2 and sorted(paged.free_blocks) == [0, 1, 4, 5]
    assert paged.nbytes() == 2 * paged.block_bytes() == 2 * 4 * 2 * 2 * 2 * 8 * 4  # blocks x positions x layers x K,V x heads x d x bytes


def test_a_full_pool_refuses_before_changing_anything():
    model = _model()
    paged = PagedKVCache(2, num_blocks=2, block_size=4)
    paged.add_sequence(0)
    paged.select([0])
    with torch.no_grad():
        model(_ids(8, 2), cache=paged)
        with pytest.raises(RuntimeError, match="blocks are all in use"):
            model(_ids(1, 3), cache=paged)
    assert paged.seq_lengths[0] == 8 and paged._step is None  # the failed step left no trace


def test_forked_sequences_share_the_prefix_and_copy_on_write():
    model = _model()
    prefix, a, b = _ids(6, 4), _ids(3, 5), _ids(4, 6)
    with torch.no_grad():
        paged = PagedKVCache(2, num_blocks=10, block_size=4)
        paged.add_sequence("system")
        paged.select(["system"])
        model(prefix, cache=paged)  # the common prompt, computed once: blocks 0, 1 (1 half full)
        paged.fork("system", "a")
        paged.fork("system", "b")
        assert paged.blocks_in_use() == 2 and paged.refs[:2] == [3, 3]
        paged.select(["a"])
        got_a = model(a, cache=paged)
        paged.select(["b"])
        got_b = model(b, cache=paged)
        # block 0 stays shared; block 1 (half full) was copied by each writer
        assert paged.tables["a"][0] == paged.tables["b"][0] == 0
        assert len({paged.tables["a"][1], paged.tables["b"][1], paged.tables["system"][1]}) == 3
        for suffix, got in ((a, got_a), (b, got_b)):
            want = model(torch.cat([prefix, suffix], 1))[:, 6:]
            torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
        paged.select(["system"])  # the shared prompt itself is unchanged by its children's writes
        torch.testing.assert_close(model(b[:, :1], cache=paged), model(torch.cat([prefix, b[:, :1]], 1))[:, 6:],
                                   atol=1e-5, rtol=0)
    for seq in ("a", "b", "system"):
        paged.free(seq)
    assert paged.blocks_in_use() == 0 and paged.refs == [0] * 10


def test_paged_holds_less_than_a_padded_batch():
    model = _model()
    lengths = [3, 30, 7, 12]
    prompts = [_ids(n, n)[0].tolist() for n in lengths]
    from transformer_lib.serving import pad_prompts
    tokens, lens = pad_prompts(prompts)
    with torch.no_grad():
        padded = PaddedKVCache(2, 4, initial_capacity=30)
        model(tokens, cache=padded)
        padded.set_lengths(lens)
        paged = PagedKVCache(2, num_blocks=40, block_size=4)
        for i in range(4):
            paged.add_sequence(i)
        paged.select([0, 1, 2, 3])
        model(tokens, cache=paged)
        paged.set_lengths(lens)  # the pads' blocks go back
    per_position = paged.block_bytes() // 4
    assert padded.nbytes() == sum(lengths) * per_position
    assert paged.blocks_in_use() == sum(blocks_needed(n, 4) for n in lengths) == 1 + 8 + 2 + 3
    assert paged.nbytes() < sum(lengths) * per_position + 4 * 3 * per_position  # under one block per row wasted
    assert padded.reserved_bytes() == 4 * 30 * per_position  # every row reserves the longest


BAD = [
    ("num_blocks", lambda: PagedKVCache(1, 0), ValueError, "num_blocks"),
    ("block_size", lambda: PagedKVCache(1, 4, block_size=0), ValueError, "block_size"),
    ("unknown seq", lambda: PagedKVCache(1, 4).free("x"), ValueError, "no sequence"),
    ("select unknown", lambda: PagedKVCache(1, 4).select(["x"]), ValueError, "no sequence"),
    ("select empty", lambda: PagedKVCache(1, 4).select([]), ValueError, "non-empty"),
    ("fork unknown", lambda: PagedKVCache(1, 4).fork("x", "y"), ValueError, "no sequence"),
]


@pytest.mark.parametrize("name,call,error,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input(name, call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_duplicate_rows_and_sequences_are_refused():
    paged = PagedKVCache(1, 4)
    paged.add_sequence(1)
    with pytest.raises(ValueError, match="already holds"):
        paged.add_sequence(1)
    with pytest.raises(ValueError, match="one row only"):
        paged.select([1, 1])
