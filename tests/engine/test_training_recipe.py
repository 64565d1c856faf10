"""The training recipe beyond plain masked diffusion: edit corruption, certainty forcing, Muon,
copy-rich rows, and a tiny model that learns to copy from them."""

import gzip
import json
import random

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from redraft.engine import prompt
from redraft.engine.training import corpus, examples, recipe, tokenizer, train

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16)
SYLLABLES = ["ba", "ko", "ri", "tu", "me", "sa", "lo", "ni", "pe", "du", "ga", "vi", "zo", "ha", "fe", "ju"]
VERBS = ["print", "len", "str"]  # reserved names: only the defined name recurs


def made_up_names(rng: random.Random, n: int) -> list[str]:
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))))
    return sorted(out)


def synthetic_file(rng: random.Random, pool: list[str], blocks: int = 12) -> str:
    """Blocks of `name = 7` then `print(name)`: each name is defined once and used right after."""
    return "".join(f"{n} = {rng.randint(0, 99)}\n{rng.choice(VERBS)}({n})\n" for n in rng.sample(pool, blocks))


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A corpus of synthetic files (400 train, 10 valid) and a BPE trained on it; returns (folder, name pool)."""
    root = tmp_path_factory.mktemp("synthetic")
    rng = random.Random(0)
    pool = made_up_names(rng, 300)
    texts = {"train": [synthetic_file(rng, pool) for _ in range(400)],
             "valid": [synthetic_file(rng, pool) for _ in range(10)]}
    for split, chunk in texts.items():
        with gzip.open(root / f"{split}.jsonl.gz", "wt") as f:
            for i, text in enumerate(chunk):
                f.write(json.dumps({"package": "synthetic", "path": f"{i}.py", "text": text}) + "\n")
    tokenizer.save_tokenizer(tokenizer.train_tokenizer(texts["train"], vocab_size=1024), root / "tok")
    return root, pool


def _tok(root) -> Tokenizer:
    return Tokenizer.from_file(str(root / "tok" / "tokenizer.json"))


def _replay(span: list[int], draft: list[int], edits: recipe.Edits, fill: int) -> None:
    """Walks span and draft together: every difference is one of the recorded edits, no more."""
    k = 0
    for j, true in enumerate(span):
        if k == len(draft):
            break
        if j in edits.dropped:
            continue
        if j in edits.shifted:
            assert draft[k] != true  # the inserted token, then the true one
            k += 1
            if k == len(draft):
                break
        assert (draft[k] != true) == (j in edits.replaced), (j, draft[k], true)
        k += 1
    assert all(t == fill for t in draft[k:])


def test_corruption_does_what_it_records():
    span, pool, fill = list(range(100, 140)) + [0] * 6, list(range(200, 260)), 0  # 40 true tokens, end, padding
    for op in ("replace", "shift", "drop"):  # each op alone, on every true token
        draft, e = recipe.corrupt_span(span, 40, pool, 1.0, random.Random(1), fill, ops=((op, 1.0),))
        assert len(draft) == len(span)
        assert (len(e.replaced), len(e.shifted), len(e.dropped)) == {"replace": (40, 0, 0), "shift": (0, 40, 0),
                                                                     "drop": (0, 0, 40)}[op]
        _replay(span, draft, e, fill)
    assert draft == span[40:] + [fill] * 40  # all dropped: the end token moves to the front
    rng, counts = random.Random(2), {"replaced": 0, "shifted": 0, "dropped": 0}
    for _ in range(300):
        draft, e = recipe.corrupt_span(span, 40, pool, 0.3, rng, fill)
        _replay(span, draft, e, fill)
        assert all(j < 40 for j in e.replaced + e.shifted + e.dropped)  # end and padding are never edited
        for k in counts:
            counts[k] += len(getattr(e, k))
    total = sum(counts.values())
    assert abs(total / (300 * 40) - 0.3) < 0.02
    assert abs(counts["replaced"] / total - 0.6) < 0.05 and abs(counts["dropped"] / total - 0.2) < 0.05


def test_edit_rows_put_the_loss_on_every_span_position(synthetic):
    root, _ = synthetic
    tok, docs = _tok(root), corpus.read_split(root, "train")
    mask_id = tok.token_to_id(prompt.MASK)
    for share in (1.0, 0.0):
        b = train.Rows(docs, tok, 96, 16, 3, diffusion=True, edit_share=share, edit_rate=0.3).batch(0)
        assert bool(b["edited"].all()) == (share == 1.0) and bool(b["edited"].any()) == (share == 1.0)
        wrong = 0
        for i in range(16):
            c, s = int(b["ctx"][i]), int(b["stop"][i])
            visible = b["ids"][i, c + 1:s] != mask_id  # token j sits at j; its loss at j - 1
            assert not bool((b["weight"][i, :c] > 0).any())
            assert torch.equal(b["masked"][i, c:s - 1], ~visible)
            if share:
                assert bool((b["weight"][i, c:s - 1] > 0).all())  # the whole span, visible or not
            else:
                assert not bool((b["weight"][i, c:s - 1][visible] > 0).any())
            wrong += int((b["ids"][i, c + 1:s] != b["target"][i, c:s - 1])[visible].sum())
        assert (wrong > 0) == (share == 1.0)


def test_block_patterns_are_what_decoding_in_blocks_sees():
    rng, cuts = random.Random(4), set()
    for _ in range(2000):
        n_true, pad = rng.randint(1, 30), rng.randint(0, 10)
        n = n_true + 1 + pad  # true tokens, the end token, padding
        t = rng.random()
        m = recipe.block_pattern(n, n_true, 2, t, rng)
        assert len(m) == n and any(m)
        cut = m.index(True) // 2 * 2  # the block holding the first mask
        assert cut <= n_true and not any(m[:cut])  # a clean beginning, never past the end token
        assert all(m[cut + 2:])  # everything after the current block is masked
        cuts.add((n_true, cut))
    assert {(9, c) for c in range(0, 10, 2)} <= cuts  # every block boundary up to the end token


def test_block_rows_mask_a_clean_beginnings_continuation(synthetic):
    root, _ = synthetic
    tok, docs = _tok(root), corpus.read_split(root, "train")
    mask_id = tok.token_to_id(prompt.MASK)
    b = train.Rows(docs, tok, 96, 16, 3, diffusion=True, edit_share=0.0, block_share=1.0).batch(0)
    plain = train.Rows(docs, tok, 96, 16, 3, diffusion=True, edit_share=0.0).batch(0)
    for i in range(16):
        c, s = int(b["ctx"][i]), int(b["stop"][i])
        m = b["masked"][i, c:s - 1].tolist()  # span token j at j, its loss (and mask flag) at j - 1
        assert any(m)
        first = m.index(True) // 2 * 2
        assert not any(m[:first]) and all(m[first + 2:])
        assert torch.equal(b["ids"][i, c + 1:s] == mask_id, b["masked"][i, c:s - 1])
        assert torch.equal(b["weight"][i, c:s - 1], b["masked"][i, c:s - 1].float())  # unweighted, masked only
    # Uniform masking (the rows without the share) leaves tokens visible after masked ones' blocks.
    late = 0
    for i in range(16):
        m = plain["masked"][i, int(plain["ctx"][i]):int(plain["stop"][i]) - 1].tolist()
        first = m.index(True) // 2 * 2 if any(m) else len(m)
        late += not all(m[first + 2:])
    assert late > 0


def test_certainty_penalty_only_where_the_prediction_is_right():
    torch.manual_seed(0)
    logits = torch.randn(8, 50) * 2
    best = logits.argmax(-1)
    target = torch.where(torch.arange(8) < 4, best, (best + 1) % 50)  # first four right, the rest wrong
    pen = recipe.certainty_penalty(logits, target)
    entropy = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    assert torch.all(pen[4:] == 0)
    assert torch.all(pen[:4] > 0) and torch.allclose(pen[:4], entropy[:4])
    x = logits.clone().requires_grad_()
    recipe.certainty_penalty(x, target).sum().backward()
    assert torch.all(x.grad[4:] == 0)  # wrong predictions get no push towards confidence
    sharper = (logits - 0.5 * x.grad)[:4]
    assert torch.all(-(sharper.softmax(-1) * sharper.log_softmax(-1)).sum(-1) < entropy[:4])
    assert torch.equal(sharper.argmax(-1), best[:4])


def test_muon_steps_are_orthogonal():
    torch.manual_seed(0)
    for shape in ((96, 32), (32, 128), (256, 768)):  # tall, wide, the model's MLP
        for dtype in (torch.float32, torch.bfloat16):
            s = torch.linalg.svdvals(recipe.orthogonalize(torch.randn(shape), dtype=dtype).float())
            assert 0.6 < float(s.min()) and float(s.max()) < 1.25, (shape, dtype, s.min(), s.max())
    p = torch.nn.Parameter(torch.randn(32, 96))
    before, grad = p.detach().clone(), torch.randn(32, 96)
    p.grad = grad
    lr = 0.01
    recipe.Muon([p], lr=lr, weight_decay=0.0).step()
    update = (before - p.detach()) / (lr * 0.2 * 96 ** 0.5)
    s = torch.linalg.svdvals(update)
    assert 0.6 < float(s.min()) and float(s.max()) < 1.25
    assert float((update * grad).sum()) > 0  # a descent direction
    model = train.build_model("diffusion", _FakeTok(), dict(train.SHAPE, vocab_size=64, **TINY))
    hidden, embed, norms = recipe.hidden_matrices(model)
    assert len(embed) == 1 and all(p.dim() == 2 for p in hidden) and all(p.dim() == 1 for p in norms)
    assert len(hidden) == 7 * 2  # q, k, v, o, gate, up, down per layer


class _FakeTok:
    def token_to_id(self, token: str) -> int:
        return prompt.SPECIAL_TOKENS.index(token)


def _args(root, out, *extra) -> list[str]:
    return ["--objective", "diffusion", "--corpus", str(root), "--tokenizer", str(root / "tok"), "--out", str(out),
            "--threads", "1", "--precision", "fp32", "--shape", json.dumps(TINY), "--valid-batches", "1",
            "--eval-every", "1000", *extra]


def test_resume_with_the_whole_recipe_reproduces_the_loss(synthetic, tmp_path):
    root, _ = synthetic
    base = ["--batch", "4", "--seq", "192", "--steps", "6", "--warmup", "2", "--save-every", "3", "--context-ar",
            "--optimizer", "muon", "--copy-share", "0.5", "--copy-anneal", "0.5", "--edit-share", "0.5",
            "--block-share", "0.5", "--certainty", "0.3", "--seq-warmup", "4"]
    train.main(_args(root, tmp_path / "straight", *base))
    train.main(_args(root, tmp_path / "split", *base, "--until", "3"))
    train.main(_args(root, tmp_path / "split", *base, "--resume"))
    logs = [json.loads((tmp_path / run / "last" / "train_state.json").read_text())["log"]
            for run in ("straight", "split")]
    assert [e["loss"] for e in logs[0]] == [e["loss"] for e in logs[1]]
    tokens = [0] + [e["tokens"] for e in logs[0]]
    assert [b - a for a, b in zip(tokens, tokens[1:])] == [4 * 128] + [4 * 192] * 5  # rows grow from 128 tokens
    a, b = (load_file(str(tmp_path / run / "last" / "model.safetensors")) for run in ("straight", "split"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    opt = load_file(str(tmp_path / "split" / "last" / "optimizer.safetensors"))
    assert any(k.startswith("0.") and k.endswith("momentum_buffer") for k in opt)  # Muon's state, no pickle
    assert any(k.startswith("1.") and k.endswith("exp_avg") for k in opt)  # AdamW's


def test_a_deadline_in_the_past_stops_at_once_and_still_saves(synthetic, tmp_path):
    root, _ = synthetic
    train.main(_args(root, tmp_path / "run", "--steps", "5", "--batch", "2", "--seq", "64",
                     "--deadline", "2000-01-01T00:00"))
    assert json.loads((tmp_path / "run" / "last" / "train_state.json").read_text())["step"] == 0
    assert train.deadline("12:05") % 3600 == 5 * 60


def test_copy_rows_show_the_answer_and_their_share_anneals(synthetic):
    root, _ = synthetic
    text = corpus.read_split(root, "train")[0]["text"]
    rng, kinds = random.Random(0), set()
    for _ in range(100):
        ex = examples.copy_example(text, rng)
        if ex is None:
            continue
        kinds.add(ex.kind)
        if ex.kind == "repeat":
            assert ex.middle in ex.prefix
        else:
            name = examples.IDENT.match(ex.middle).group()
            assert f"{name} =" in ex.prefix  # defined above
    assert kinds == {"recur", "repeat"}
    assert [recipe.share_at(s, 0.5, 100) for s in (0, 50, 100, 200)] == [0.5, 0.25, 0.0, 0.0]
    seqs = [recipe.seq_at(s, 512, 100) for s in range(0, 120, 10)]
    assert seqs[0] == 128 and seqs[-1] == 512 and seqs == sorted(seqs) and all(t % 64 == 0 for t in seqs)


def _p_first_token(model, tok, prefix: str, answer: str) -> float:
    """The model's probability of the answer's first token at the first of 6 masked span positions."""
    tid, enc = tok.token_to_id, (lambda s: tok.encode(s, add_special_tokens=False).ids)
    ids = [tid(prompt.FIM_SUFFIX)] + enc("\n") + [tid(prompt.FIM_PREFIX)] + enc(prefix) + \
        [tid(prompt.FIM_MIDDLE)] + [tid(prompt.MASK)] * 6
    first = enc(prefix + answer)[len(enc(prefix))]
    c, T = len(ids) - 7, len(ids)
    with torch.no_grad():
        hidden = model(torch.tensor([ids]), torch.arange(T)[None], causal=False,
                       mask=train.span_mask(torch.tensor([c]), torch.tensor([T]), T))
        return float(model.lm_head(hidden[0, c]).softmax(-1)[first])


def test_a_small_trained_model_copies(synthetic, tmp_path, monkeypatch):
    """2 layers, width 64, 450 steps of copy-rich rows (the cursor at a name defined above): the
    name is then predicted where it recurs — what the shipped model does not (p ≈ 0.001).
    Seeds 1-3 reach p ≈ 0.98; the phase change comes between steps 300 and 450."""
    root, pool = synthetic
    monkeypatch.setattr(examples, "COPY_KINDS", (("recur", 1.0),))
    train.main(_args(root, tmp_path / "run", "--steps", "450", "--batch", "16", "--seq", "64", "--lr", "1e-2",
                     "--warmup", "20", "--save-every", "1000", "--seed", "1", "--context-ar", "--copy-share", "1",
                     "--copy-anneal", "0", "--certainty", "0"))
    tok = _tok(root)
    model = train.build_model("diffusion", tok, train.shape_for(tok, TINY))
    model.load_state_dict(load_file(str(tmp_path / "run" / "last" / "model.safetensors")), strict=False)
    model.eval()
    rng, seen, unseen = random.Random(123), [], []
    for _ in range(20):  # files the model never saw, names from the same pool
        lines = synthetic_file(rng, pool, 6).splitlines(keepends=True)
        j = 2 * rng.randrange(len(lines) // 2) + 1  # a use line: verb(name)
        head = lines[j][:lines[j].index("(") + 1]
        name = lines[j][len(head):-2]
        seen.append(_p_first_token(model, tok, "".join(lines[:j]) + head, name))
        other = rng.choice([n for n in pool if n not in "".join(lines)])  # the definition of another name
        lines[j - 1] = lines[j - 1].replace(name, other)
        unseen.append(_p_first_token(model, tok, "".join(lines[:j]) + head, name))
    assert sum(seen) / len(seen) >= 0.5, seen
    assert sum(unseen) / len(unseen) < 0.05, unseen  # copied from the context, not guessed


def test_wsd_holds_the_peak_then_decays_and_growing_the_run_only_lengthens_the_plateau():
    lrs = [train.lr_at(s, 100, 1.0, 10, "wsd", 0.2) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == 1.0
    assert all(lr == 1.0 for lr in lrs[10:80]) and lrs[99] == pytest.approx(0.1 + 0.9 / 20)
    assert all(a > b for a, b in zip(lrs[80:], lrs[81:]))  # decays every step of the last 20%
    longer = [train.lr_at(s, 200, 1.0, 10, "wsd", 0.2) for s in range(100)]
    assert longer[:80] == lrs[:80] and all(lr == 1.0 for lr in longer[80:])  # resumed with more steps


def test_the_language_mix_sets_each_languages_share_of_the_rows():
    langs = ["python"] * 3 + ["go"] * 1 + ["rust"] * 2
    w = train.mix_weights(langs, [1.0, 2.0, 3.0, 10.0, 1.0, 1.0], {"python": 0.5, "go": 0.3, "rust": 0.2})
    share = {lang: sum(x for x, l in zip(w, langs) if l == lang) for lang in set(langs)}
    assert share == pytest.approx({"python": 0.5, "go": 0.3, "rust": 0.2})
    assert w[2] == pytest.approx(3 * w[0])  # within a language, files keep their length weights
    assert train.mix_weights(langs, [1.0] * 6, {"python": 1.0})[3:] == [0.0, 0.0, 0.0]  # left out: never drawn


def test_a_run_killed_while_saving_resumes_from_its_previous_state(synthetic, tmp_path):
    root, _ = synthetic
    base = ["--batch", "2", "--seq", "192", "--steps", "4", "--warmup", "1", "--save-every", "2"]
    train.main(_args(root, tmp_path / "run", *base, "--until", "2"))
    last = tmp_path / "run" / "last"
    last.rename(last.with_name("last.old"))  # killed between the two renames of the next save
    (tmp_path / "run" / "last.tmp").mkdir()  # with a half-written new state beside it
    train.main(_args(root, tmp_path / "run", *base, "--resume"))
    log = json.loads((last / "train_state.json").read_text())["log"]
    assert [e["step"] for e in log] == [1, 2, 3, 4] and not last.with_name("last.old").exists()
