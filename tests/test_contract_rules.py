"""Issue 23: every declared rule is enforced. For each entry point, each argument and each rule of
``generator.runtime.contract`` (the declaration the README's input-contract tables are printed
from), the rule's own ``bad`` gives one input that breaks it; the public entry point must refuse
that input with an error that names the argument. The inputs are derived from the declaration, so
an argument declared without a rule, a rule without a refused input, or a rule the entry point
does not enforce (a new argument passed to the kernels unchecked) fails here.

Nothing launches: the refused calls raise before any kernel (launches are stubbed, so a call that
is not refused returns instead of raising and the test says which rule let it through). A few
limits are too large to reach with a small tensor (int32 offsets, the dropout counter); their rules
lower the limit (``spec.assumptions``) for the call instead.

The value rules (``checks.VALUES``: the elements of ``cache_seqlens``, the page ids, ``key_lengths``,
...) refuse their input only with the opt-in checks (``contract.checking_values``: a host sync per
call); by default a call never reads a value on the host and goes on with each value clamped into its
range on the device (the rule's ``clamp``). So each value rule is tested twice: refused, naming the
argument, with the opt-in; and by default, not refused, with no host sync, and giving bit for bit the
result of the call with the clamped value (which the rule accepts): the documented result, every
read inside the tensors the valid call reads. A rule kept by the clamps of the entry point its path
runs (the paged varlen path: flash_attention_with_kvcache's) is compared with the call that clamp
documents (``KEPT_FURTHER_DOWN``); a rule no clamp can keep says so (``kept``).
"""

from __future__ import annotations

import re

import pytest
import torch

import generated
from attention_cases import to_device
from benchmarks import host
from generator.runtime import contract
from generator.runtime.checks import PEERS, VALUES
from spec import assumptions
from spec.masks import prefix_lm

I32 = torch.int32
D = 16


def _randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _dense():
    base = dict(q=_randn(2, 2, 8, D), k=_randn(2, 1, 12, D, seed=1), v=_randn(2, 1, 12, D, seed=2), causal=False,
                alignment="top_left", window=(2, 3), key_lengths=torch.tensor([12, 7]),
                mask=torch.ones(2, 1, 8, 12, dtype=torch.bool), scale=0.5, return_lse=False, block=(64, 64),
                tma="auto", softcap=5.0, alibi_slopes=torch.rand(2, 2), sinks=torch.zeros(2), mask_mod=None,
                mask_args=None, dropout_p=0.1, return_dropout_mask=False, score_mod=None, score_args=None)
    base.update(q_descale=None, k_descale=None, v_descale=None, out_dtype=None)
    return [base, {**base, "mask_mod": prefix_lm, "mask_args": {"prefix": 3}, "dropout_p": 0.0},
            {**base, **_fp8_qkv(base), "softcap": None, "alibi_slopes": None, "sinks": None, "dropout_p": 0.0}]


def _fp8_qkv(base, batch=2):
    """The FP8 forward's call on ``base``'s shapes: q, k, v in e4m3 with descales, out in fp16."""
    fp8 = {n: base[n].to(torch.float8_e4m3fn) for n in ("q", "k", "v")}
    heads = base["k"].shape[-2] if base["k"].dim() == 3 else base["k"].shape[1]
    return {**fp8, **{n: torch.rand(batch, heads, generator=torch.Generator().manual_seed(i)) + 0.5
                      for i, n in enumerate(("q_descale", "k_descale", "v_descale"))}, "out_dtype": torch.float16}


def _varlen():
    packed = dict(q=_randn(9, 2, D), k=_randn(12, 1, D, seed=1), v=_randn(12, 1, D, seed=2),
                  cu_seqlens_q=torch.tensor([0, 4, 9], dtype=I32), cu_seqlens_k=torch.tensor([0, 5, 12], dtype=I32),
                  max_seqlen_q=5, max_seqlen_k=7, causal=True, window=(2, 3), scale=0.5, return_lse=False,
                  block=(64, 64), softcap=5.0, alibi_slopes=torch.rand(2, 2), sinks=torch.zeros(2), dropout_p=0.1,
                  return_dropout_mask=False, batch_invariant=False, block_table=None, score_mod=None, score_args=None)
    paged = {**packed, "q": _randn(5, 2, D), "k": _randn(6, 16, 1, D, seed=1), "v": _randn(6, 16, 1, D, seed=2),
             "cu_seqlens_q": torch.tensor([0, 3, 5], dtype=I32), "cu_seqlens_k": torch.tensor([0, 30, 47], dtype=I32),
             "max_seqlen_q": None, "max_seqlen_k": None, "dropout_p": 0.0,
             "block_table": torch.tensor([[4, 0, 2], [1, 5, 3]], dtype=I32)}
    packed.update(q_descale=None, k_descale=None, v_descale=None, out_dtype=None)
    paged.update(q_descale=None, k_descale=None, v_descale=None, out_dtype=None)
    fp8 = {**packed, **_fp8_qkv(packed), "softcap": None, "alibi_slopes": None, "sinks": None, "dropout_p": 0.0}
    return [packed, paged, fp8]


def _kvcache():
    q = _randn(2, 2, 2, D)
    angle = torch.rand(40, 4, generator=torch.Generator().manual_seed(3))
    extras = dict(q=q, k_cache=_randn(3, 40, 1, D, seed=1), v_cache=_randn(3, 40, 1, D, seed=2),
                  cache_seqlens=torch.tensor([20, 10], dtype=I32), k=_randn(2, 3, 1, D, seed=4),
                  v=_randn(2, 3, 1, D, seed=5), rotary_cos=angle.cos(), rotary_sin=angle.sin(),
                  rotary_interleaved=False, cache_leftpad=torch.tensor([2, 0], dtype=I32),
                  cache_batch_idx=torch.tensor([2, 0], dtype=I32), block_table=None, causal=True, window=None,
                  scale=0.5, num_splits=2, return_lse=False, softcap=5.0, alibi_slopes=torch.rand(2),
                  sinks=torch.zeros(2), batch_invariant=False, score_mod=None, score_args=None)
    plain = {**extras, "k_cache": _randn(2, 40, 1, D, seed=1), "v_cache": _randn(2, 40, 1, D, seed=2), "k": None,
             "v": None, "rotary_cos": None, "rotary_sin": None, "cache_leftpad": None, "cache_batch_idx": None,
             "window": (2, 3), "num_splits": 0, "batch_invariant": True, "alibi_slopes": torch.rand(2, 2)}
    paged = {**plain, "k_cache": _randn(6, 16, 1, D, seed=1), "v_cache": _randn(6, 16, 1, D, seed=2),
             "cache_seqlens": torch.tensor([30, 17], dtype=I32),
             "block_table": torch.tensor([[4, 0, 2], [1, 5, 3]], dtype=I32), "batch_invariant": False}
    for call in (extras, plain, paged):
        call.update(q_descale=None, k_descale=None, v_descale=None, out_dtype=None)
    # an FP8 cache (issue 30): q, the caches and the appended k, v in e4m3 with (B, Hkv) descales, out in fp16
    f8 = torch.float8_e4m3fn
    fp8 = {**extras, **{n: extras[n].to(f8) for n in ("q", "k_cache", "v_cache", "k", "v")}, "rotary_cos": None,
           "rotary_sin": None, "softcap": None, "alibi_slopes": None, "sinks": None, "out_dtype": torch.float16,
           **{n: torch.rand(2, 1, generator=torch.Generator().manual_seed(i)) + 0.5
              for i, n in enumerate(("q_descale", "k_descale", "v_descale"))}}
    return [extras, plain, paged, fp8]


def _merge_state():
    return [dict(o_a=_randn(3, 4, D), lse_a=_randn(3, 4, seed=1), o_b=_randn(3, 4, D, seed=2),
                 lse_b=_randn(3, 4, seed=3))]


def _merge_states():
    return [dict(o=_randn(2, 3, 4, D), lse=_randn(2, 3, 4, seed=1))]


def _ring():
    return [dict(q=_randn(1, 2, 8, D), k=_randn(1, 1, 8, D, seed=1), v=_randn(1, 1, 8, D, seed=2), group=None,
                 causal=True, scale=0.5, layout="contiguous", return_lse=False, block=(64, 64))]


def _softmax():
    return [dict(x=_randn(3, 5, 7), dim=1, block=(64, 64))]


#: valid calls of each entry point (a rule is tried on the first one it applies to)
BASES = {"flash_attention": _dense, "flash_attention_varlen": _varlen, "flash_attention_with_kvcache": _kvcache,
         "merge_state": _merge_state, "merge_states": _merge_states, "ring_attention": _ring, "softmax": _softmax}

#: every rule one process can break (a ``PEERS`` rule needs ranks that differ: tests/test_ring.py breaks
#: each on one rank of two)
RULES = [(entry, a.name, i) for entry, args in contract.ENTRY_POINTS.items() for a in args
         for i in range(len(a.rules)) if a.rules[i].stage != PEERS]


def test_every_argument_of_every_entry_point_has_rules():
    assert set(BASES) == set(contract.ENTRY_POINTS)
    for entry, args in contract.ENTRY_POINTS.items():
        for a in args:
            assert a.rules, f"{entry}: argument {a.name} is declared without a rule that enforces it"
            for r in a.rules:
                assert r.bad is not None, f"{entry}.{a.name}: rule {r.text!r} has no refused input"


def test_the_bases_are_valid_calls(process_group):
    """The refused inputs below differ from these by one rule's change: each base passes every rule (ring_attention's
    in a one-rank process group)."""
    with contract.checking_values():
        for entry, bases in BASES.items():
            for base in bases():
                contract.enforce(entry, to_device(base))


def _refused_input(entry: str, name: str, index: int):
    """The first base of ``entry`` the rule applies to, with the rule's ``bad`` change: ``(rule, call, limits)``
    (``limits``: the assumptions lowered for the call, and ``(owner, attribute)`` set for it)."""
    arg = next(a for a in contract.ENTRY_POINTS[entry] if a.name == name)
    rule = arg.rules[index]
    for base in BASES[entry]():
        base = to_device(base)
        try:
            changes = dict(rule.bad(base, name))
        except (AttributeError, TypeError, IndexError):  # the change needs the argument this base leaves out
            continue
        limits = changes.pop("__limits__", {})
        limits.update({(owner, attribute): value for owner, attribute, value in changes.pop("__patch__", ())})
        call = {**base, **changes}
        if call[name] is None and arg.optional:
            continue
        if rule.when is not None and not rule.when(call):
            continue
        return rule, call, limits
    raise AssertionError(f"{entry}.{name}: no base call exercises the rule {rule.text!r}; add one to BASES")


@pytest.fixture(scope="module")
def process_group(tmp_path_factory):
    """A one-rank gloo group (ring_attention's rules that the op checks once it knows the group)."""
    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('ring') / 'store'}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("entry, name, index", RULES, ids=[f"{e}-{n}-{i}" for e, n, i in RULES])
def test_each_declared_rule_refuses_its_input_naming_the_argument(entry, name, index, monkeypatch, process_group):
    rule, call, limits = _refused_input(entry, name, index)
    for assumption, value in limits.items():
        if isinstance(assumption, tuple):  # the process's state (contract._patched): set for the call
            monkeypatch.setattr(*assumption, value)
            continue
        old = assumptions.ASSUMPTIONS[assumption]
        monkeypatch.setitem(assumptions.ASSUMPTIONS, assumption,
                            assumptions.Assumption(assumption, old.statement, old.enforcement, value))
    with host.stubbed_launches() as launched, torch.enable_grad():  # grad mode on: the no-gradient rules apply
        with pytest.raises((ValueError, TypeError, RuntimeError)) as raised, contract.checking_values():
            getattr(generated, entry)(**call)
    assert launched == [], (entry, name, rule.text)
    named = re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", str(raised.value))  # the name as a word
    assert named, f"{entry}: rule {rule.text!r} of {name} raised without naming it: {raised.value}"


def _capped_offsets(call):
    """cu_seqlens_k with each sequence's key count capped at its pages' capacity (max_pages·page_size)."""
    cu, capacity = call["cu_seqlens_k"], call["block_table"].shape[1] * call["k"].shape[1]
    counts = (cu[1:] - cu[:-1]).clamp(max=capacity)
    return {**call, "cu_seqlens_k": torch.cat([cu[:1], cu[:1] + counts.cumsum(0)]).to(cu.dtype)}


#: the value rules whose range a later entry point keeps (``kept``): the call they give, by the
#: documented clamp (the paged varlen path runs flash_attention_with_kvcache, which clamps)
KEPT_FURTHER_DOWN = {
    ("flash_attention_varlen", "cu_seqlens_k"): _capped_offsets,
    ("flash_attention_varlen", "block_table"):
        lambda call: {**call, "block_table": call["block_table"].clamp(0, call["k"].shape[0] - 1)},
}

VALUE_RULES = [(entry, name, i) for entry, name, i in RULES if contract.arg(entry, name).rules[i].stage == VALUES]


def _same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("entry, name, index", VALUE_RULES, ids=[f"{e}-{n}-{i}" for e, n, i in VALUE_RULES])
def test_each_value_rule_by_default_keeps_reads_in_bounds_without_a_sync(entry, name, index):
    rule, call, limits = _refused_input(entry, name, index)
    assert not limits and (rule.clamp is not None or rule.kept), (entry, name, rule.text)
    run = getattr(generated, entry)
    if entry != "flash_attention_varlen":  # varlen reads its offsets on the host by design (IN_OP)
        with host.stubbed_launches() as launched, host.HostSyncGuard(fail=True, dispatch=False):
            run(**call)
        assert launched, (entry, name)
    torch.manual_seed(0)  # the dense base draws dropout
    got = run(**call)  # the kernels run: not refused
    if rule.clamp is None and (entry, name) in KEPT_FURTHER_DOWN:  # the paged varlen path's kvcache clamps
        torch.manual_seed(0)
        _same(got, run(**KEPT_FURTHER_DOWN[entry, name](call)))
        return
    if rule.clamp is None:  # no clamp can keep it (``kept`` says what happens): the call runs, nothing refused
        assert "no clamp can" in rule.kept, (entry, name, rule.kept)
        outs = got if isinstance(got, tuple) else (got,)
        assert all(isinstance(t, torch.Tensor) for t in outs), (entry, name)
        return
    ctx = contract.enforce(entry, call, values=False)
    clamped = rule.clamp(ctx[name], ctx)
    assert not rule.flags(clamped, {**ctx, name: clamped}), f"{entry}.{name}: its clamp leaves the rule's range"
    torch.manual_seed(0)
    _same(got, run(**{**call, name: clamped}))


PEER_RULES = [(entry, name, rule) for entry, rules in contract._PEER_RULES.items() for name, rule in rules]


@pytest.mark.parametrize("entry, name, rule", PEER_RULES, ids=[f"{e}-{n}" for e, n, _ in PEER_RULES])
def test_each_rule_the_ranks_must_agree_on_refuses_its_change_naming_the_argument(entry, name, rule):
    """A ``PEERS`` rule in one process: its entry point names its process group (``contract.GROUP``), its
    fact has its declared width, and its check refuses the facts of the base call on one rank and of the
    base with the rule's ``bad`` change on another (the same comparison ``contract.enforce`` makes on
    every rank after its one all_gather; tests/test_ring.py makes it across two real ranks)."""
    assert contract.GROUP in {a.name for a in contract.ENTRY_POINTS[entry]}, entry
    base = to_device(BASES[entry]()[0])
    ctx = contract._enforce_here(entry, base, values=False)
    changed = contract._enforce_here(entry, {**base, **rule.bad(base, name)}, values=False)
    facts = [contract._fact(rule, name, c) for c in (ctx, changed)]
    rule.check(name, [facts[0], facts[0]], ctx)  # alike: accepted
    with pytest.raises(ValueError, match=rf"^{re.escape(name)} must be alike on every rank .* rank 1 passes"):
        rule.check(name, facts, ctx)
