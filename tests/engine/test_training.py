"""The default-model recipe on a tiny scale: corpus, tokenizer, examples, training, loading."""

import gzip
import json
import os
import random
import subprocess
import sys

import pytest
import torch

from redraft.engine import Engine, prompt
from redraft.engine.training import corpus, examples, tokenizer, train

from tiny import TRAIN_SHAPE as TINY_SHAPE  # the tiny_corpus fixture: conftest.py


def test_tokenizer_round_trips_code_exactly(tiny_corpus):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tiny_corpus / "tok" / "tokenizer.json"))
    for text in ["def f(x):\n\treturn x  \n", "s = 'héllo wörld ✓ 😀'\r\n", "    \n\n\t\t# trailing   ",
                 "x=1;y=2\n" * 3, "".join(chr(c) for c in range(32, 600))]:
        assert tok.decode(tok.encode(text).ids) == text
    for special in prompt.SPECIAL_TOKENS:
        assert tok.encode(special).ids == [tok.token_to_id(special)]


def test_examples_cut_the_text_at_characters(tiny_corpus):
    text = corpus.read_split(tiny_corpus, "train")[0]["text"]
    rng = random.Random(0)
    kinds = set()
    for _ in range(200):
        ex = examples.sample_example(text, rng)
        if ex is None:
            continue
        kinds.add(ex.kind)
        if ex.kind == "rename":
            assert ex.extra.startswith(prompt.HISTORY) and ex.extra.endswith(prompt.FILE_SEP)
            old = ex.extra.split("\n")[0][len(prompt.HISTORY) + 1:]
            new = ex.extra.split("\n")[1][1:]
            assert old != new
        else:
            assert ex.prefix + ex.middle + ex.suffix in text
    assert kinds == {k for k, _ in examples.KINDS}


def test_rename_rows_carry_the_engines_history_block(tiny_corpus):
    """Training sees edit history exactly as serving renders it: the extra segment of a rename
    row is prompt.render_history of the event (the line as it was, the line renamed)."""
    text = corpus.read_split(tiny_corpus, "train")[0]["text"]
    lines = text.splitlines()
    rng = random.Random(0)
    renames = [ex for ex in (examples.sample_example(text, rng) for _ in range(300))
               if ex is not None and ex.kind == "rename"]
    assert len(renames) >= 5
    for ex in renames:
        before = ex.extra[len(prompt.HISTORY):].split("\n")[0][1:]
        after = ex.extra.split("\n")[1][1:]
        assert before in lines and after != before
        assert ex.extra == prompt.render_history([(before, after)])


ROWS_DIGEST = """
import hashlib, random, sys
from redraft.engine.training import corpus, examples
h = hashlib.sha1()
for doc in corpus.read_split(sys.argv[1], "train")[:4]:
    rng = random.Random(7)
    for _ in range(200):
        ex = examples.sample_example(doc["text"], rng)
        h.update(repr(ex and (ex.kind, ex.prefix[-80:], ex.middle, ex.extra)).encode())
print(h.hexdigest())
"""


def test_the_same_seed_draws_the_same_rows_in_every_process(tiny_corpus):
    """Runs compare on fixed validation batches only if a seed draws the same rows whatever
    the process's string-hash seed (PYTHONHASHSEED varies per process by default)."""
    digests = set()
    for hash_seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        out = subprocess.run([sys.executable, "-c", ROWS_DIGEST, str(tiny_corpus)], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_diffusion_rows_mask_only_the_span(tiny_corpus):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tiny_corpus / "tok" / "tokenizer.json"))
    rows = train.Rows(corpus.read_split(tiny_corpus, "train"), tok, 128, 8, 0, diffusion=True)
    b = rows.batch(0)
    mask_id = tok.token_to_id(prompt.MASK)
    for i in range(8):
        c, s = int(b["ctx"][i]), int(b["stop"][i])
        assert b["ids"][i, c] == tok.token_to_id(prompt.FIM_MIDDLE)
        assert not bool((b["ids"][i, :c] == mask_id).any())
        assert bool((b["weight"][i, c:s - 1] > 0).any()) or not bool((b["ids"][i, c + 1:s] == mask_id).any())
        assert not bool((b["weight"][i, :c] > 0).any())
    m = train.span_mask(b["ctx"], b["stop"], 128)[:, 0]
    c, s = int(b["ctx"][0]), int(b["stop"][0])
    assert not m[0, c - 1, c]  # the context does not see the span
    assert m[0, c, s - 1] and m[0, s - 1, c]  # the span block sees itself both ways


@pytest.mark.parametrize("objective,attention", [("ar", "causal"), ("diffusion", "context_causal"),
                                                  ("diffusion", "full")])
def test_a_few_steps_lower_the_loss_and_the_result_loads(tiny_corpus, tmp_path, objective, attention):
    out = tmp_path / objective
    extra = ["--attention", attention] if objective == "diffusion" else []
    args = extra + ["--objective", objective, "--corpus", str(tiny_corpus), "--tokenizer", str(tiny_corpus / "tok"),
            "--out", str(out), "--steps", "40", "--batch", "4", "--seq", "128", "--lr", "3e-3", "--warmup", "5",
            "--eval-every", "20", "--valid-batches", "1", "--save-every", "20", "--shape", TINY_SHAPE]
    train.main(args)
    log = json.loads((out / "last" / "train_state.json").read_text())["log"]
    first = sum(e["loss"] for e in log[:5]) / 5
    last = sum(e["loss"] for e in log[-5:]) / 5
    assert last < first - 0.5, (first, last)
    assert (out / "loss.png").stat().st_size > 1000
    engine = Engine.load(out / "last", dtype="float32")
    assert engine.model_config.attention == attention
    result = engine.infill("def add(a, b):\n    return ", "\n", sampler=engine.config.sampler.with_(span=8))
    assert result.stats.forwards >= 1


def test_resume_continues_exactly(tiny_corpus, tmp_path):
    base = ["--objective", "ar", "--corpus", str(tiny_corpus), "--tokenizer", str(tiny_corpus / "tok"),
            "--batch", "2", "--seq", "64", "--warmup", "2", "--eval-every", "100", "--valid-batches", "1",
            "--save-every", "3", "--shape", TINY_SHAPE, "--steps", "6"]
    train.main(base + ["--out", str(tmp_path / "straight")])
    train.main(base + ["--out", str(tmp_path / "split"), "--until", "3"])
    import signal
    before = signal.getsignal(signal.SIGTERM)
    train.main(base + ["--out", str(tmp_path / "split"), "--resume"])
    assert signal.getsignal(signal.SIGTERM) is before  # training in-process leaves the caller's handler
    from safetensors.torch import load_file
    a = load_file(str(tmp_path / "straight" / "last" / "model.safetensors"))
    b = load_file(str(tmp_path / "split" / "last" / "model.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    log = json.loads((tmp_path / "split" / "last" / "train_state.json").read_text())["log"]
    assert [e["step"] for e in log] == list(range(1, 7))
    assert all(x["seconds"] <= y["seconds"] for x, y in zip(log, log[1:]))  # wall time adds up across stretches


def test_a_compiled_run_trains_as_the_eager_one_and_saves_the_same_checkpoint(tiny_corpus, tmp_path):
    base = ["--objective", "ar", "--corpus", str(tiny_corpus), "--tokenizer", str(tiny_corpus / "tok"),
            "--batch", "2", "--seq", "64", "--warmup", "2", "--eval-every", "3", "--valid-batches", "1",
            "--save-every", "3", "--shape", TINY_SHAPE, "--steps", "3", "--precision", "fp32"]
    train.main(base + ["--out", str(tmp_path / "eager")])
    train.main(base + ["--out", str(tmp_path / "compiled"), "--compile"])
    logs = [json.loads((tmp_path / run / "last" / "train_state.json").read_text())["log"]
            for run in ("eager", "compiled")]
    assert [e["step"] for e in logs[1]] == [1, 2, 3] and "valid" in logs[1][-1]
    for a, b in zip(*logs):
        assert abs(a["loss"] - b["loss"]) < 1e-3 * a["loss"], (a, b)
    engine = Engine.load(tmp_path / "compiled" / "last", dtype="float32")  # plain names, no compiled wrapper's
    assert engine.model_config.num_hidden_layers == 2


def test_context_next_token_loss_stays_in_the_context(tiny_corpus):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tiny_corpus / "tok" / "tokenizer.json"))
    b = train.Rows(corpus.read_split(tiny_corpus, "train"), tok, 128, 4, 0, diffusion=True, context_ar=True).batch(0)
    for i in range(4):
        c = int(b["ctx"][i])  # <|fim_middle|>
        ar = (b["ar_weight"][i] > 0).nonzero().flatten()
        assert ar.tolist() == list(range(c - 1))  # position j predicts j + 1, up to the token before <|fim_middle|>
        assert torch.equal(b["target"][i, :c - 1], b["ids"][i, 1:c])


def test_ar_to_diffusion_conversion_keeps_the_contexts_keys_and_values_exact(tiny_corpus):
    # The diffusion run starts from the AR twin's weights (--init); with the context_causal
    # pattern its context attends as the twin's did, so the keys/values a server caches for
    # the context are the twin's, and only the span block learns anything new. Bit-exact where
    # the shapes are the same (whatever the span holds); against the twin, which reads fewer
    # rows, to float tolerance: matrix kernels block and sum by shape, and AVX2-only CPUs
    # round differently from AVX-512 ones there.
    from redraft.engine.cache import KVCache
    tok = train._tok(tiny_corpus / "tok")
    shape = train.shape_for(tok, json.loads(TINY_SHAPE))
    torch.manual_seed(0)
    ar = train.build_model("ar", tok, shape).eval()
    diff = train.build_model("diffusion", tok, shape, "context_causal").eval()
    diff.load_state_dict(ar.state_dict())
    ids = torch.tensor([tok.encode("def area(shape):\n    return shape.width * shape.height\n").ids])
    T, C = ids.shape[1], ids.shape[1] - 6  # the last 6 positions play the span
    pos = torch.arange(T).expand(1, T)

    def kv(model, mask=None, causal=False, n=T, rows=ids):
        cache = KVCache(shape["num_hidden_layers"], 1, shape["num_key_value_heads"], T, shape["head_dim"],
                        torch.float32, "cpu")
        with torch.no_grad():
            model(rows[:, :n], pos[:, :n], cache=cache, causal=causal, mask=mask)
        return [k[:, :, :C] for k in cache.k], [v[:, :, :C] for v in cache.v]

    twin = kv(ar, causal=True, n=C)  # the twin reads the context alone
    mask = train.span_mask(torch.tensor([C]), torch.tensor([T]), T)[:, :, :, :T]
    served = kv(diff, mask=mask)  # the diffusion model reads context and span in one pass
    other = ids.clone()
    other[0, C:] = tok.token_to_id("<|mask|>")  # the same context, another span
    remasked = kv(diff, mask=mask, rows=other)
    assert len(twin[0]) == shape["num_hidden_layers"]
    for a, b, c in zip(twin[0] + twin[1], served[0] + served[1], remasked[0] + remasked[1]):
        assert torch.equal(b, c)  # the span never reaches the context's keys/values
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    full = kv(diff, mask=train.span_mask(torch.tensor([C]), torch.tensor([T]), T, full=True))
    assert not torch.allclose(full[0][-1], twin[0][-1], rtol=1e-3, atol=1e-4)  # a bidirectional context would not keep them


LANGUAGE_SNIPPETS = {
    "python": "class Store:\n    def __init__(self):\n        self.log = logging.getLogger(__name__)  # ✓\n",
    "typescript": "export function area<T extends Shape>(s: T): number {\n  return s.width * s.height;\n}\n",
    "javascript": "const sum = (xs) => xs.reduce((a, b) => a + b, 0);\nmodule.exports = { sum };\n",
    "go": "func (s *Server) Close() error {\n\tif s.ln == nil {\n\t\treturn nil\n\t}\n\treturn s.ln.Close()\n}\n",
    "rust": "impl<'a> Iterator for Words<'a> {\n    type Item = &'a str;\n    fn next(&mut self) -> Option<&'a str> { None }\n}\n",
    "c": "static int add(int a, int b) {\r\n\treturn a + b; /* naïve */\r\n}\r\n",
    "cpp": "template <typename T>\nstd::vector<T> twice(const std::vector<T>& v) { return v; }\n",
}


def test_a_tokenizer_trained_on_the_mix_round_trips_every_language(tiny_corpus):
    # Trained on a per-language sample as `redraft train tokenizer --sample-mb` does.
    docs = [{"lang": lang, "text": text * 20} for lang, text in LANGUAGE_SNIPPETS.items()]
    sample = tokenizer.sample_by_language(docs, 0.001)
    assert set(sample) == set(LANGUAGE_SNIPPETS) and all(sample.values())
    tok = tokenizer.train_tokenizer((t for ts in sample.values() for t in ts), vocab_size=600)
    for lang, text in LANGUAGE_SNIPPETS.items():
        ids = tok.encode(text).ids
        assert tok.decode(ids) == text, lang
        assert len(ids) < len(text.encode()), lang  # merges learned for every language


def test_ship_writes_a_loadable_model_whose_card_counts_the_warm_start(tiny_corpus, tmp_path):
    from redraft.engine.training.ship import ship
    base = ["--corpus", str(tiny_corpus), "--batch", "2", "--seq", "64", "--warmup", "2", "--eval-every", "100",
            "--valid-batches", "1", "--save-every", "100", "--shape", TINY_SHAPE,
            "--mix", '{"python": 1.0}']
    train.main(base + ["--objective", "ar", "--tokenizer", str(tiny_corpus / "tok"), "--out", str(tmp_path / "ar"),
                       "--steps", "4", "--until", "2"])
    train.main(base + ["--objective", "ar", "--tokenizer", str(tiny_corpus / "tok"), "--out", str(tmp_path / "ar"),
                       "--steps", "4", "--resume"])  # two stretches, as a long run has
    train.main(base + ["--objective", "diffusion", "--context-ar", "--init", str(tmp_path / "ar" / "last"),
                       "--out", str(tmp_path / "diffusion"), "--steps", "3"])
    dest = ship(tmp_path / "diffusion" / "last", "candidate", {"block_size": 2}, dest_root=tmp_path / "models")
    card = json.loads((dest / "card.json").read_text())
    ar_log = json.loads((tmp_path / "ar" / "last" / "train_state.json").read_text())["log"]
    assert card["init_tokens_seen"] == ar_log[-1]["tokens"] > 0
    assert card["total_tokens_seen"] == card["init_tokens_seen"] + card["tokens_seen"] > card["tokens_seen"] > 0
    assert card["init_wall_seconds"] == ar_log[-1]["seconds"]
    config = json.loads((dest / "config.json").read_text())
    assert config["redraft_languages"] == ["python"] and config["max_position_embeddings"] == 64
    engine = Engine.load(dest, dtype="float32")
    assert engine.model_config.languages == ("python",) and engine.sampler.block_size == 2
    out = engine.infill("def add(a, b):\n    return ", "\n", sampler=engine.config.sampler.with_(span=8))
    assert out.stats.forwards >= 1
    # A run restarted from a shipped model (its run's state lost) counts everything that model saw.
    train.main(base + ["--objective", "ar", "--init", str(dest), "--tokenizer", str(dest),
                       "--out", str(tmp_path / "again"), "--steps", "2"])
    again = json.loads((ship(tmp_path / "again" / "last", "again", dest_root=tmp_path / "models")
                        / "card.json").read_text())
    assert again["init_tokens_seen"] == card["total_tokens_seen"]
    assert again["total_tokens_seen"] == card["total_tokens_seen"] + again["tokens_seen"] > card["total_tokens_seen"]
    assert again["init_wall_seconds"] == round(card["init_wall_seconds"] + card["wall_seconds"], 1)
    # The shipped model it started from replaced (as shipping this run's result under its name
    # does): the run's history still counts what that model had seen when the run began.
    (dest / "card.json").write_text(json.dumps(dict(card, total_tokens_seen=1, init_wall_seconds=0.0)))
    later = json.loads((ship(tmp_path / "again" / "last", "later", dest_root=tmp_path / "models")
                        / "card.json").read_text())
    assert later["total_tokens_seen"] == again["total_tokens_seen"]
    train.main(base + ["--objective", "ar", "--init", str(dest), "--tokenizer", str(dest),
                       "--out", str(tmp_path / "again"), "--steps", "3", "--resume"])  # a later stretch
    resumed = json.loads((ship(tmp_path / "again" / "last", "resumed", dest_root=tmp_path / "models")
                          / "card.json").read_text())
    assert resumed["init_tokens_seen"] == card["total_tokens_seen"] and resumed["steps"] == 3


def test_sigterm_stops_after_the_step_and_saves(tiny_corpus, tmp_path):
    import signal
    import subprocess
    import sys
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "redraft.engine.training.train", "--objective", "ar", "--corpus", str(tiny_corpus),
           "--tokenizer", str(tiny_corpus / "tok"), "--out", str(out), "--steps", "100000", "--batch", "2",
           "--seq", "64", "--eval-every", "100000", "--valid-batches", "1", "--save-every", "100000",
           "--shape", TINY_SHAPE, "--print-every", "1"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # a few steps, then the signal
        if line.startswith('{"step": 3,'):
            break
    proc.send_signal(signal.SIGTERM)
    proc.stderr.read()
    assert proc.wait(timeout=60) == 0
    state = json.loads((out / "last" / "train_state.json").read_text())
    assert 3 <= state["step"] < 100000 and state["log"][-1]["step"] == state["step"]
