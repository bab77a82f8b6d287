"""MoE routing (dpsim.workload.routing): shares, the busiest EP rank's load, dispatch traffic."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from dpsim.errors import ConfigError
from dpsim.workload.routing import (
    ROUTING_KINDS,
    Routing,
    expert_shares,
    inclusion_probabilities,
    parse_routing,
    rank_load,
    traffic_matrix,
)

MOE = dict(experts=64, ep=8, top_k=4)


def test_balanced_factor_tends_to_one_as_tokens_grow():
    r = parse_routing("balanced")
    factors = [rank_load(r, tokens_per_rank=t, **MOE).mean_busiest_factor for t in (16, 256, 4096, 65536)]
    assert all(f >= 1.0 for f in factors)
    assert factors == sorted(factors, reverse=True)
    assert factors[0] > 1.1 and factors[-1] < 1.01


def test_step_variation_shrinks_with_tokens():
    r = parse_routing("zipf:0.5")
    spread = [np.std(rank_load(r, tokens_per_rank=t, **MOE).step_factors) for t in (64, 4096)]
    assert spread[1] < spread[0] / 4


def test_zipf_zero_is_balanced():
    a = rank_load(parse_routing("zipf:0"), tokens_per_rank=512, **MOE)
    b = rank_load(parse_routing("balanced"), tokens_per_rank=512, **MOE)
    assert a == b
    assert np.array_equal(expert_shares(Routing(kind="zipf"), 64), expert_shares(Routing(kind="balanced"), 64))


def test_larger_zipf_exponent_larger_factor():
    factors = [rank_load(parse_routing(f"zipf:{s}"), tokens_per_rank=2048, **MOE).mean_busiest_factor
               for s in (0.0, 0.3, 0.6, 0.9, 1.2, 1.5)]
    assert np.all(np.diff(factors) > 0), factors


@pytest.mark.parametrize("text", ["balanced", "zipf:0.7", "zipf:2"])
def test_shares_sum_to_one(text):
    s = expert_shares(parse_routing(text), 256)
    assert s.shape == (256,) and abs(s.sum() - 1) < 1e-12 and (s > 0).all()


def test_histogram_round_trips(tmp_path):
    counts = [5, 0, 3, 2, 10, 1, 7, 2]
    path = tmp_path / "hist.json"
    path.write_text(json.dumps(counts))
    r = parse_routing(f"histogram:{path}")
    assert r.kind == "histogram"
    np.testing.assert_allclose(expert_shares(r, 8), np.array(counts) / sum(counts))
    # shares given as shares read the same
    path.write_text(json.dumps(list(np.array(counts) / sum(counts))))
    np.testing.assert_allclose(expert_shares(parse_routing(f"histogram:{path}"), 8), np.array(counts) / sum(counts))
    with pytest.raises(ConfigError, match="histogram has 8 experts but the model has 16"):
        expert_shares(r, 16)


def test_inclusion_matches_direct_top_k_draws():
    """The exponential-race inclusion probabilities against tokens drawn one by one (Gumbel top-k,
    i.e. sampling without replacement in proportion to the shares): the busiest rank within 3 %."""
    rng = np.random.default_rng(7)
    for s, experts, k, ep in [(0.5, 64, 4, 8), (1.2, 64, 8, 8), (0.8, 16, 2, 4)]:
        p = expert_shares(Routing(kind="zipf", zipf_s=s), experts)
        pi = inclusion_probabilities(p, k)
        assert abs(pi.sum() - k) < 1e-9 and (pi <= 1).all()
        n = 50_000
        keys = np.log(p)[None, :] - np.log(-np.log(rng.random((n, experts))))
        top = np.argpartition(-keys, k - 1, axis=1)[:, :k]
        direct = np.bincount(top.ravel(), minlength=experts) / n
        a, b = pi.reshape(ep, -1).sum(1), direct.reshape(ep, -1).sum(1)
        assert abs(a.max() / a.mean() - b.max() / b.mean()) / (b.max() / b.mean()) < 0.03


def test_top_one_inclusion_is_the_share():
    p = expert_shares(parse_routing("zipf:1.1"), 32)
    np.testing.assert_allclose(inclusion_probabilities(p, 1), p)


def test_traffic_conserves_bytes():
    tokens, bpt = 1000, 7168 * 2
    for text in ("balanced", "zipf:0.9"):
        t = traffic_matrix(parse_routing(text), tokens_per_rank=tokens, bytes_per_token=bpt, **MOE)
        assert t.shape == (8, 8)
        np.testing.assert_allclose(t.sum(axis=1), tokens * MOE["top_k"] * bpt)
        # the diagonal: the pairs whose expert is on the sending rank
        pi = inclusion_probabilities(expert_shares(parse_routing(text), 64), 4)
        np.testing.assert_allclose(np.diag(t), pi.reshape(8, -1).sum(1) * tokens * bpt)
    t = traffic_matrix(parse_routing("balanced"), tokens_per_rank=tokens, bytes_per_token=bpt, **MOE)
    np.testing.assert_allclose(t, tokens * 4 * bpt / 8)


def test_capacity_factor_drops():
    balanced = rank_load(parse_routing("balanced"), tokens_per_rank=65536, capacity_factor=1.25, **MOE)
    assert balanced.dropped_fraction == 0.0
    assert rank_load(parse_routing("balanced"), tokens_per_rank=65536, **MOE).dropped_fraction == 0.0
    skewed = rank_load(parse_routing("zipf:1.0"), tokens_per_rank=4096, capacity_factor=1.25, **MOE)
    dropless = rank_load(parse_routing("zipf:1.0"), tokens_per_rank=4096, **MOE)
    assert 0 < skewed.dropped_fraction < 1
    assert 1.0 <= skewed.mean_busiest_factor < dropless.mean_busiest_factor
    t = traffic_matrix(parse_routing("zipf:1.0"), tokens_per_rank=4096, bytes_per_token=1.0,
                       capacity_factor=1.25, **MOE)
    assert t.sum(axis=1)[0] < 4096 * 4


def test_seeds_reproduce():
    r = parse_routing("zipf:0.6")
    a = rank_load(r, tokens_per_rank=300, seed=5, **MOE)
    assert a == rank_load(r, tokens_per_rank=300, seed=5, **MOE)
    assert a != rank_load(r, tokens_per_rank=300, seed=6, **MOE)
    assert len(a.step_factors) == 64


def test_fast_at_scale():
    # A guard against an accidental blow-up (quadratic sampling), in CPU seconds so that a busy
    # shared machine's wall clock does not decide it; not a speed figure.
    import time
    r = parse_routing("zipf:0.8")
    start = time.process_time()
    rank_load(r, experts=256, ep=64, tokens_per_rank=1024, top_k=8, steps=64, seed=1)
    assert time.process_time() - start < 1.0


@pytest.mark.parametrize("text, needle", [
    ("uniform", "is not a routing"), ("zipf:", "no number"), ("zipf:-1", "finite number >= 0"),
    ("zipf:nan", "finite number >= 0"), ("histogram:/nonexistent/h.json", "cannot be read"),
    ("balanced:2", "is not a routing"), ("maxvio:", "no number"), ("maxvio:-0.1", "finite number >= 0"),
    ("maxvio:inf", "finite number >= 0"), ("gini:", "no number"), ("gini:-0.1", "finite number >= 0"),
    ("gini:1", "not below 1"), ("gini:nan", "finite number >= 0"),
])
def test_bad_routing_is_one_line(text, needle):
    with pytest.raises(ConfigError) as e:
        parse_routing(text)
    msg = str(e.value)
    assert "\n" not in msg and "--moe-routing" in msg and needle in msg and repr(text) in msg


@pytest.mark.parametrize("content", ["{}", "[]", "[1, -2]", "[0, 0]", "not json", '["a"]',
                                     "[" * 100_000, "[" + "9" * 400 + ", 1]"])
def test_bad_histogram_file(tmp_path, content):
    path = tmp_path / "h.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match="--moe-routing"):
        parse_routing(f"histogram:{path}")


def test_histogram_device_or_fifo_is_refused_unread(tmp_path):
    # /dev/zero was read whole (until memory ran out) and a FIFO blocked for ever.
    fifo = tmp_path / "h.json"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        with pytest.raises(ConfigError, match="--moe-routing: .*cannot be read .*not a regular file"):
            parse_routing(f"histogram:{path}")


def test_histogram_of_huge_or_tiny_counts_keeps_its_shares(tmp_path, recwarn):
    # Counts summing past 1.8e308 made every share inf/inf (NaN, with numpy warnings on stderr).
    for counts, expected in (([1e308, 1e308, 1e308, 0], [1 / 3, 1 / 3, 1 / 3, 0]),
                             ([1e-320, 3e-320], [0.25, 0.75])):
        path = tmp_path / "h.json"
        path.write_text(json.dumps(counts))
        np.testing.assert_allclose(parse_routing(f"histogram:{path}").shares, expected, rtol=1e-3)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_a_routing_that_serves_fewer_experts_than_top_k_names_the_flag(tmp_path):
    # zipf:1e308 underflows every share but the first; the error named the model's top_k, not --moe-routing.
    path = tmp_path / "h.json"
    path.write_text("[1, 0, 0, 0, 0, 0, 0, 0]")
    for text in ("zipf:1e308", f"histogram:{path}"):
        with pytest.raises(ConfigError, match=r"^--moe-routing: gives tokens to only 1 of the 8 experts .* fewer "
                                              r"than the 2 each token is routed to"):
            rank_load(parse_routing(text), experts=8, ep=2, tokens_per_rank=10, top_k=2)


def test_bad_layout_arguments():
    r = parse_routing("balanced")
    with pytest.raises(ConfigError, match="--ep: 3 does not divide the 64 experts"):
        rank_load(r, experts=64, ep=3, tokens_per_rank=10, top_k=2)
    with pytest.raises(ConfigError, match="top_k"):
        rank_load(r, experts=8, ep=2, tokens_per_rank=10, top_k=9)
    with pytest.raises(ConfigError, match="capacity_factor"):
        rank_load(r, experts=8, ep=2, tokens_per_rank=10, top_k=2, capacity_factor=0)
    with pytest.raises(ConfigError, match="bytes_per_token"):
        traffic_matrix(r, experts=8, ep=2, tokens_per_rank=10, top_k=2, bytes_per_token=-1)


def test_kinds_documented():
    assert set(ROUTING_KINDS) == {"balanced", "zipf", "histogram", "maxvio", "gini"}


QWEN3 = dict(experts=128, top_k=8)  # Qwen3-235B-A22B's routed experts and top-k


def test_maxvio_zero_is_balanced():
    for ep in (8, 32):
        a = rank_load(parse_routing("maxvio:0"), ep=ep, tokens_per_rank=4096, **QWEN3)
        b = rank_load(parse_routing("balanced"), ep=ep, tokens_per_rank=4096, **QWEN3)
        assert a == b


@pytest.mark.parametrize("v", [0.1, 0.52, 0.937, 3.0])
@pytest.mark.parametrize("top_k", [1, 2, 8])
def test_maxvio_sets_the_busiest_experts_load_after_the_top_k_draw(v, top_k):
    # MaxVio (arXiv:2408.15664 eq. 4) is on the loads a token's top-k picks give, not on shares.
    pi = inclusion_probabilities(expert_shares(parse_routing(f"maxvio:{v}"), 128, top_k), top_k)
    assert pi.sum() == pytest.approx(top_k)
    assert pi.max() / pi.mean() == pytest.approx(1 + v, rel=1e-9)
    assert np.allclose(pi[1:], pi[1])  # the rest equal


def test_maxvio_rank_loads_keep_every_routed_pair():
    # The dispatch moves tokens x top_k (token, expert) pairs whatever the skew.
    tokens, bpt = 4096, 2.0
    for text in ("balanced", "maxvio:0.52", "maxvio:2"):
        t = traffic_matrix(parse_routing(text), ep=32, tokens_per_rank=tokens, bytes_per_token=bpt, **QWEN3)
        np.testing.assert_allclose(t.sum(axis=1), tokens * QWEN3["top_k"] * bpt)


def test_maxvio_factor_grows_with_the_violation():
    factors = [rank_load(parse_routing(f"maxvio:{v}"), ep=32, tokens_per_rank=4096, **QWEN3).mean_busiest_factor
               for v in (0.0, 0.2, 0.52, 0.72, 0.937, 2.0)]
    assert np.all(np.diff(factors) > 0), factors


def test_maxvio_golden_rank_factor():
    # 128 experts on 32 ranks, 4 each: the hot expert's rank holds 1.52 + 3 x (128 - 1.52) / 127
    # expert-means over 4, i.e. 1.1269 x the mean rank once sampling noise has averaged out.
    r = rank_load(parse_routing("maxvio:0.52"), ep=32, tokens_per_rank=1_000_000, **QWEN3)
    assert r.mean_busiest_factor == pytest.approx((1.52 + 3 * (128 - 1.52) / 127) / 4, abs=2e-3)
    # ep 8 dilutes the hot expert over 16 experts a rank.
    r8 = rank_load(parse_routing("maxvio:0.52"), ep=8, tokens_per_rank=1_000_000, **QWEN3)
    assert r8.mean_busiest_factor == pytest.approx((1.52 + 15 * (128 - 1.52) / 127) / 16, abs=2e-3)


def test_maxvio_beyond_every_token_is_refused_in_one_line():
    with pytest.raises(ConfigError) as e:
        rank_load(parse_routing("maxvio:15"), ep=8, tokens_per_rank=10, **QWEN3)  # 16 x 8 / 128 = 1
    msg = str(e.value)
    assert "\n" not in msg and "--moe-routing" in msg and "maxvio:15" in msg and "below 15" in msg
    with pytest.raises(ConfigError, match="single expert"):
        expert_shares(parse_routing("maxvio:0.5"), 1)


# gini:G (arXiv:2605.20982): each dispatch's expert loads log-normal with Gini coefficient G.

def test_gini_zero_is_balanced():
    for ep in (8, 32):
        a = rank_load(parse_routing("gini:0"), ep=ep, tokens_per_rank=4096, **QWEN3)
        b = rank_load(parse_routing("balanced"), ep=ep, tokens_per_rank=4096, **QWEN3)
        assert a == b
    assert parse_routing("gini:0").uniform and not parse_routing("gini:0.15").uniform


def test_gini_sigma_inverts_the_log_normals_gini():
    from dpsim.workload.routing import gini_sigma
    for g in (0.0, 0.105, 0.15, 0.24, 0.9):
        assert math.erf(gini_sigma(g) / 2) == pytest.approx(g, abs=1e-12)


def test_gini_draws_have_the_asked_gini_and_keep_every_pair():
    # The sample Gini of the drawn per-expert counts is G (128 experts, many pairs); each draw's
    # counts add up to every routed (token, expert) pair, and no expert gets a token twice.
    from dpsim.workload.routing import _gini_inclusions
    rng = np.random.default_rng(3)
    for g in (0.105, 0.24, 0.6):
        pi = _gini_inclusions(g, 128, 8, 400, rng)
        np.testing.assert_allclose(pi.sum(axis=1), 8.0)
        assert pi.max() <= 1.0 + 1e-12
        x = np.sort(pi, axis=1)
        n = x.shape[1]
        ginis = ((2 * np.arange(1, n + 1) - n - 1) * x).sum(axis=1) / (n * x.sum(axis=1))
        assert ginis.mean() == pytest.approx(g, abs=0.02)


def test_gini_moves_no_bytes():
    # Every expert's expected load is the balanced one: the dispatch's traffic is balanced's.
    kw = dict(ep=8, tokens_per_rank=4096, bytes_per_token=2.0, **QWEN3)
    np.testing.assert_allclose(traffic_matrix(parse_routing("gini:0.24"), **kw),
                               traffic_matrix(parse_routing("balanced"), **kw))


@pytest.mark.parametrize("ep", [8, 32])
def test_gini_never_unloads_the_busiest_rank_and_grows_with_g(ep):
    factors = [rank_load(parse_routing(f"gini:{g}"), ep=ep, tokens_per_rank=4096, **QWEN3).mean_busiest_factor
               for g in (0.0, 0.105, 0.15, 0.24, 0.4)]
    assert factors[0] >= 1.0 and np.all(np.diff(factors) > 0), factors


def test_gini_busiest_rank_is_the_mean_of_each_dispatchs_maximum():
    # 16 experts a rank at EP 8: the busiest rank's excess is the maximum of 8 sums of 16
    # log-normal loads, about 1.42 standard deviations of a rank's sum (cv / 4) above the mean.
    from dpsim.workload.routing import gini_sigma
    s = gini_sigma(0.24)
    cv_rank = math.sqrt(math.exp(s * s) - 1) / 4
    r = rank_load(parse_routing("gini:0.24"), ep=8, tokens_per_rank=1_000_000, steps=2000, **QWEN3)
    assert r.mean_busiest_factor == pytest.approx(1 + 1.4236 * cv_rank, abs=0.02)
    # The ranks' loads averaged over dispatches are level (popularity lands on any rank).
    assert len(r.step_factors) == 2000 and min(r.step_factors) >= 1.0
