"""head_confidence against full logits: odd shapes, temperatures, excluded ids, vocabulary slices.

Shapes: N rows, E hidden size, V vocabulary.
"""

from __future__ import annotations

import pytest
import torch

from tolerances import DTYPES, TIE_GAP, assert_close

pytest.importorskip("triton", reason="the kernels need triton (pip install 'redraft[gpu]')")

from redraft.kernels import launch  # noqa: E402
from redraft.kernels.head_confidence import head_confidence, head_confidence_ref  # noqa: E402

SCORES = ("prob", "margin", "exp_neg_entropy", "logp")

# N, E, V, temperature, vocab_limit, banned, slices (None: the launcher's choice)
CASES = [
    (1, 16, 7, 1.0, None, None, None),
    (3, 32, 300, 1.0, None, None, None),
    (5, 48, 1000, 0.7, 900, [5, 7, 100], 3),  # the limit cuts the last slice short
    (17, 64, 513, 1.0, None, [1, 2, 512], 5),  # one slice per tile, the last of one id
    (40, 16, 129, 2.0, 129, [0], 2),
    (130, 32, 200, 1.0, None, None, 2),  # two row blocks
]


def make(N, E, V, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, E, generator=g).to(dtype).to(device)
    weight = (torch.randn(V, E, generator=g) * 3 / E ** 0.5).to(dtype).to(device)  # logits ~ N(0, 9)
    return hidden, weight


def check(out, hidden, weight, temperature, vocab_limit, banned, dtype, what):
    ref = head_confidence_ref(hidden.double(), weight.double(), temperature, vocab_limit, banned)
    assert out.tokens.dtype == torch.int64 and out.tokens.shape == ref.tokens.shape
    # A different pick is only allowed between ids whose logits tie within TIE_GAP.
    logits = hidden.double() @ weight.double().T
    if vocab_limit is not None:
        logits[:, vocab_limit:] = float("-inf")
    if banned is not None:
        logits[:, banned] = float("-inf")
    picked = logits.gather(1, out.tokens.clamp(0, logits.shape[1] - 1)[:, None]).squeeze(1)
    assert ((out.tokens >= 0) & (out.tokens < logits.shape[1])).all(), f"{what}: token out of range"
    assert (picked >= logits.max(1).values - TIE_GAP).all(), f"{what}: not the argmax"
    for name in SCORES:
        assert getattr(out, name).dtype == torch.float32
        assert_close(getattr(out, name), getattr(ref, name), "head_confidence", dtype, f"{name} {what}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "N{}-E{}-V{}-t{}-lim{}-ban{}-s{}".format(
    *c[:5], len(c[5] or ()), c[6]))
def test_matches_full_logits(case, dtype, device, poison):
    N, E, V, temperature, vocab_limit, banned, slices = case
    hidden, weight = make(N, E, V, dtype, device)
    banned = None if banned is None else torch.tensor(banned, device=device)
    before = launch.launches["head_confidence"]
    out = head_confidence(hidden, weight, temperature, vocab_limit, banned, slices=slices)
    assert launch.launches["head_confidence"] == before + 1
    check(out, hidden, weight, temperature, vocab_limit, banned, dtype, str(case))


def test_ties_pick_the_lowest_id(device, poison):
    """Integer-valued inputs make exact ties: across tiles, across slices and inside one tile."""
    g = torch.Generator().manual_seed(1)
    hidden = torch.randint(-2, 3, (4, 16), generator=g).float()
    weight = torch.randint(-1, 2, (400, 16), generator=g).float()
    for row, ids in enumerate(((10, 200), (130, 131), (5, 140, 390), (3, 390))):
        dims = slice(4 * row, 4 * row + 4)  # each row its own direction: a logit of 100 for its ids
        hidden[row] = 0
        hidden[row, dims] = 5.0
        weight[list(ids)] = 0
        weight[list(ids), dims] = 5.0  # every other logit of the row is at most 20
    ref = head_confidence_ref(hidden.double(), weight.double())
    assert ref.tokens.tolist() == [10, 130, 5, 3]
    for slices in (1, 2, 4):
        out = head_confidence(hidden.to(device), weight.to(device), slices=slices)
        assert out.tokens.tolist() == [10, 130, 5, 3], slices
        assert_close(out.margin, torch.zeros(4), "head_confidence", torch.float32, "tied margin")
        assert_close(out.prob, ref.prob, "head_confidence", torch.float32, "tied prob")


def test_one_allowed_id_is_certain(device):
    hidden, weight = make(3, 16, 50, torch.float32, device, seed=2)
    out = head_confidence(hidden, weight, vocab_limit=1)
    assert out.tokens.tolist() == [0, 0, 0]
    for name in ("prob", "margin", "exp_neg_entropy"):
        assert_close(getattr(out, name), torch.ones(3), "head_confidence", torch.float32, name)
    assert_close(out.logp, torch.zeros(3), "head_confidence", torch.float32, "logp")


def test_score_names_and_a_limit_past_v(device):
    hidden, weight = make(2, 16, 40, torch.float32, device)
    out = head_confidence(hidden, weight)
    assert out.score("maxprob") is out.prob and out.score("margin") is out.margin
    assert out.score("entropy") is out.exp_neg_entropy
    past = head_confidence(hidden, weight, vocab_limit=1000)  # a limit past V limits nothing
    assert torch.equal(past.tokens, out.tokens) and torch.equal(past.prob, out.prob)


def test_bad_inputs_raise(device):
    hidden, weight = make(3, 16, 40, torch.float32, device)
    bad = {
        "hidden not 2-D": dict(hidden=hidden[None]),
        "hidden sizes differ": dict(hidden=hidden[:, :8]),
        "dtype mismatch": dict(hidden=hidden.half()),
        "integer dtype": dict(hidden=hidden.long(), weight=weight.long()),
        "last dim strided": dict(weight=weight.T.contiguous().T),
        "zero temperature": dict(temperature=0.0),
        "vocab_limit zero": dict(vocab_limit=0),
        "banned not integer": dict(banned=torch.tensor([1.0], device=device)),
        "banned not 1-D": dict(banned=torch.tensor([[1]], device=device)),
        "slices past the tiles": dict(slices=2),  # 40 ids make one 128-id tile
    }
    for what, change in bad.items():
        args = dict(hidden=hidden, weight=weight) | change
        with pytest.raises(ValueError):
            head_confidence(**args)
            pytest.fail(what)
