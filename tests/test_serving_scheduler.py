"""Continuous batching and its workload (transformer_lib.serving.scheduler, .workload): every
request's tokens equal its one-at-a-time generation whatever joined or left the batch around it,
blocks are returned, the admission policy holds its limits, and the workload is seeded and
follows its stated distributions."""
from __future__ import annotations

import pytest
import torch

import transformer_lib as tl
from transformer_lib.sampling import generate_ids
from transformer_lib.serving.baselines import serve_one_at_a_time, serve_static
from transformer_lib.serving.scheduler import ContinuousBatcher, serve_continuous
from transformer_lib.serving.workload import Request, latency_summary, make_workload, percentile

V = 89


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return tl.DecoderOnlyLM(V, 32, 4, 2, positional="rope", num_kv_heads=2, max_len=128).eval()


@pytest.fixture(scope="module")
def workload():
    return make_workload(14, rate=400.0, prompt_lengths=(2, 20), output_lengths=(1, 12), seed=3, vocab=(0, V))


def test_continuous_static_and_one_at_a_time_all_equal_generate_ids(model, workload):
    want = [generate_ids(model, r.prompt, r.max_tokens) for r in workload]
    served = {}
    for name, serve in (("continuous", lambda rs: serve_continuous(model, rs, max_batch=4, block_size=4,
                                                                   num_blocks=40, max_prefill_tokens=16)),
                        ("static", lambda rs: serve_static(model, rs, max_batch=4)),
                        ("one", lambda rs: serve_one_at_a_time(model, rs))):
        requests = [r.fresh() for r in workload]
        serve(requests)
        served[name] = [r.tokens for r in requests]
        assert all(len(r.token_times) == len(r.tokens) == r.max_tokens for r in requests)
        assert all(r.ttft >= 0 for r in requests)
    assert served["continuous"] == served["static"] == served["one"] == want


def test_sampled_requests_draw_what_generate_ids_draws_with_their_seed(model):
    requests = [Request(i, [5 + i, 7, 11 * i % V], 6, temperature=0.8, seed=10 + i) for i in range(3)]
    ContinuousBatcher(model, max_batch=3, block_size=4, num_blocks=12).run(requests)
    for r in requests:
        assert r.tokens == generate_ids(model, r.prompt, 6, temperature=0.8, seed=r.seed)


def test_the_batch_changes_every_step_and_the_pool_empties(model):
    events = []
    batcher = ContinuousBatcher(model, max_batch=2, max_prefill_tokens=100, block_size=4, num_blocks=16,
                                on_finish=lambda r: events.append(("done", r.id)))
    for i, (n, out) in enumerate(((3, 2), (5, 6), (4, 3))):
        batcher.submit(Request(i, list(range(1, n + 1)), out))
    batcher.step()  # admits 0 and 1 (max_batch 2): both prompts in one forward pass give token 1
    assert [r.id for r in batcher.running] == [0, 1] and [len(r.tokens) for r in batcher.running] == [1, 1]
    batcher.step()  # both decode token 2: request 0 is done
    assert [r.id for r in batcher.running] == [1] and [r.id for r in batcher.waiting] == [2]
    assert events == [("done", 0)]
    batcher.step()  # request 2's prompt joins the forward pass of 1's next token, mid-way
    assert sorted(r.id for r in batcher.running) == [1, 2] and [len(r.tokens) for r in batcher.running] == [3, 1]
    while batcher.busy():
        batcher.step()
    assert [e[1] for e in events] == [0, 2, 1] and batcher.cache.blocks_in_use() == 0 and batcher.reserved == 0
    # contiguous caches of exactly prompt + max_tokens here: the blocks hold at most one partly filled block more per row
    assert batcher.peak["paged_positions"] <= batcher.peak["contiguous_positions"] + 2 * 4


def test_prefill_budget_and_pool_reservations_limit_admission(model):
    batcher = ContinuousBatcher(model, max_batch=8, max_prefill_tokens=10, block_size=4, num_blocks=6,
                                allocation="reserve")
    for i in range(4):
        batcher.submit(Request(i, list(range(1, 7)), 6))  # 6 + 6 positions: 3 blocks reserved each
    batcher.step()  # budget 10: request 0's 6-token prompt whole, and a 4-token chunk of request 1's
    assert [r.id for r in batcher.running] == [0, 1] and [len(r.tokens) for r in batcher.running] == [1, 0]
    assert [batcher.cache.seq_lengths[i] for i in (0, 1)] == [6, 4]
    batcher.step()  # 0 decodes, 1's last 2 prompt tokens give its first token
    assert [len(r.tokens) for r in batcher.running] == [2, 1]
    assert [r.id for r in batcher.running] == [0, 1] and len(batcher.waiting) == 2  # the pool is promised


def test_a_prompt_longer_than_the_budget_is_prefilled_in_chunks_beside_the_decoding_rows(model):
    prompts = [list(range(1, 4)), [(7 * i) % V for i in range(1, 24)]]  # 3 and 23 tokens
    batcher = ContinuousBatcher(model, max_batch=4, max_prefill_tokens=8, block_size=4, num_blocks=32)
    requests = [Request(0, prompts[0], 8), Request(1, prompts[1], 4)]
    batcher.submit(requests[0])
    batcher.step()
    batcher.submit(requests[1])
    lengths = []
    while not requests[1].tokens:  # request 1's prompt: chunks of 8, 8, 7 while 0 decodes
        batcher.step()
        lengths.append(batcher.cache.seq_lengths[1])
    assert lengths == [8, 16, 23] and len(batcher.running[0].tokens) == 4
    while batcher.busy():
        batcher.step()
    assert [r.tokens for r in requests] == [generate_ids(model, r.prompt, r.max_tokens) for r in requests]


def test_on_demand_admits_what_fits_now_where_reserving_waits(model):
    batcher = ContinuousBatcher(model, max_batch=8, max_prefill_tokens=100, block_size=4, num_blocks=6)
    for i in range(3):
        batcher.submit(Request(i, list(range(1, 7)), 6))  # 6 + 1 positions now: 2 blocks each
    batcher.step()  # reserving 3 blocks each admits two of them; on demand, all three fit
    assert [r.id for r in batcher.running] == [0, 1, 2] and batcher.preemptions == 0


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_preempted_requests_are_recomputed_and_equal_generate_ids(model, temperature):
    # a pool of 10 blocks of 4 for four requests that end at 5 + 10 = 15 positions (4 blocks each):
    # they all start, the pool runs out mid-way, the newest are pre-empted and recomputed later
    requests = [Request(i, [3 + i, 17, 5 * i % V, 40, 2], 10, temperature=temperature, seed=20 + i) for i in range(4)]
    batcher = ContinuousBatcher(model, max_batch=4, max_prefill_tokens=100, block_size=4, num_blocks=10)
    batcher.run(requests)
    assert batcher.preemptions > 0 and batcher.cache.blocks_in_use() == 0 and not batcher._generators
    for r in requests:
        assert r.tokens == generate_ids(model, r.prompt, 10, temperature=temperature, seed=r.seed)
        assert len(r.token_times) == 10
    assert batcher.peak["paged_positions"] <= 10 * 4


def test_memory_means_and_reserve_tokens(model, workload):
    _, mem = serve_continuous(model, [r.fresh() for r in workload], max_batch=4, block_size=4, num_blocks=40,
                              reserve_tokens=12)
    assert mem["real_positions"] <= mem["paged_positions"] and mem["mean"]["real_positions"] <= mem["mean"]["paged_positions"]
    assert mem["mean"]["paged_positions"] <= mem["paged_positions"] and mem["preemptions"] == 0
    _, padded = serve_static(model, [r.fresh() for r in workload], max_batch=4, reserve_tokens=12)
    assert padded["mean"]["real_positions"] <= padded["mean"]["padded_positions"] <= padded["padded_positions"]


def test_eos_and_cancel_retire_requests(model):
    first = generate_ids(model, [1, 2, 3], 1)[0]
    batcher = ContinuousBatcher(model, block_size=4, num_blocks=16, eos_id=first)
    ended, cancelled = Request(0, [1, 2, 3], 10), Request(1, [4, 5], 10)
    batcher.submit(ended)
    batcher.submit(cancelled)
    batcher.cancel(1)
    while batcher.busy():
        batcher.step()
    assert ended.tokens == [first] and cancelled.tokens == []  # stopped at its end token; never served
    assert batcher.cache.blocks_in_use() == 0


def test_bad_input(model):
    with pytest.raises(ValueError, match="max_batch"):
        ContinuousBatcher(model, max_batch=0)
    with pytest.raises(ValueError, match="allocation"):
        ContinuousBatcher(model, allocation="greedy")
    with pytest.raises(ValueError, match="policy"):
        ContinuousBatcher(model, policy="shortest-first")
    with pytest.raises(ValueError, match="exceed the cache"):
        ContinuousBatcher(model, block_size=4, num_blocks=2).submit(Request(0, [1] * 8, 4))
    with pytest.raises(ValueError, match="rate"):
        make_workload(3, rate=0.0)
    with pytest.raises(ValueError, match="prompt_lengths"):
        make_workload(3, rate=1.0, prompt_lengths=(5, 2))
    with pytest.raises(ValueError, match="output_lengths"):
        make_workload(3, rate=1.0, output_lengths=(4,))


def test_workload_is_seeded_and_within_its_stated_ranges():
    a = make_workload(400, rate=5.0, prompt_lengths=(8, 40), output_lengths=(4, 16), seed=1)
    b = make_workload(400, rate=5.0, prompt_lengths=(8, 40), output_lengths=(4, 16), seed=1)
    assert [(r.prompt, r.max_tokens, r.arrival) for r in a] == [(r.prompt, r.max_tokens, r.arrival) for r in b]
    assert all(8 <= len(r.prompt) <= 40 and 4 <= r.max_tokens <= 16 for r in a)
    gaps = torch.tensor([y.arrival - x.arrival for x, y in zip(a, a[1:])])
    assert a[0].arrival == 0 and bool((gaps >= 0).all())
    # exponential gaps of mean 1/5 s: the sample mean of 399 lies within 4 standard errors (0.2/sqrt(399))
    assert abs(float(gaps.mean()) - 0.2) < 4 * 0.2 / 399 ** 0.5
    assert all(r.arrival == 0 for r in make_workload(5, rate=None))


def test_latency_summary_by_hand():
    r1, r2 = Request(0, [1], 3, arrival=0.0), Request(1, [1], 2, arrival=1.0)
    r1.tokens, r1.token_times = [1, 2, 3], [0.5, 0.7, 0.9]
    r2.tokens, r2.token_times = [1, 2], [1.5, 2.5]
    s = latency_summary([r1, r2], seconds=2.5)
    assert s["tokens"] == 5 and s["tokens_per_s"] == pytest.approx(2.0)
    assert s["ttft_p50_s"] == pytest.approx(0.5) and s["tpot_p50_s"] == pytest.approx((0.2 + 1.0) / 2)
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
