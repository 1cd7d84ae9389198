"""Tests for sample_data.py: tokenizer, task generators, held-out keys, corpus writer, CLI."""
import contextlib
import hashlib
import io
import json
import os
import random
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import sample_data as sd
from configurator import configure, settings_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = 256  # block size of the test corpora (json_kv and vt need more than 128)
VALUE_COUNT = {"niah_multivalue": 4, "niah_multiquery": 4, "vt": 5, "mqar": sd.MQAR_QUERIES,
               "mqar_haystack": sd.MQAR_QUERIES}


@pytest.fixture(scope="module")
def tok():
    return sd.build_tokenizer()


def roundtrip(tok, ids):
    return tok.encode(tok.decode(ids)) == list(ids)


def contains(seq, sub):
    n = len(sub)
    return any(seq[i:i + n] == sub for i in range(len(seq) - n + 1))


# -----------------------------------------------------------------------------
# tokenizer

def test_tokenizer_is_compact_and_splits_like_cl100k(tok):
    assert 500 < tok.vocab_size < 5000
    ranks = tok.enc._mergeable_ranks
    assert sorted(ranks.values()) == list(range(tok.vocab_size))  # ids 0..vocab_size-1, no gaps
    pieces = lambda text: [tok.decode([i]) for i in tok.encode(text)]
    assert pieces("1234567") == ["12", "34", "56", "7"]
    assert pieces(" is: 1234567.") == [" is", ":", " ", "12", "34", "56", "7", "."]
    assert pieces("The grass is green.") == ["The", " grass", " is", " green", "."]
    assert pieces(" fierce-lake") == [" fierce", "-lake"]
    # every regex piece of every template is a single token
    import regex
    for text in sd.FIXED_TEXTS:
        assert len(tok.encode(text)) == len(regex.findall(sd.PAT_STR, text)), text


def test_tokenizer_save_load(tok, tmp_path):
    path = str(tmp_path / "tokenizer.json")
    tok.save(path)
    tok2 = sd.Tokenizer.load(path)
    ex = sd.make_example("json_kv", tok, 400, random.Random(0), "eval")
    ids = ex.prompt + ex.answer
    assert tok2.vocab_size == tok.vocab_size
    assert tok2.decode(ids) == tok.decode(ids) and tok2.encode(tok.decode(ids)) == ids
    # corrupt / missing files name the command that regenerates them
    with pytest.raises(sd.DataError, match="python sample_data.py --data_dir="):
        sd.load_tokenizer(str(tmp_path / "nowhere"))
    (tmp_path / "tokenizer.json").write_text('{"format": "lengthgen-tokenizer", "ranks": [')
    with pytest.raises(sd.DataError, match="corrupt.*python sample_data.py"):
        sd.load_tokenizer(str(tmp_path))


# -----------------------------------------------------------------------------
# task generators

@pytest.mark.parametrize("task", list(sd.TASKS))
def test_examples_count_like_documents(tok, task):
    """prompt + answer + END is exactly `length`, as in make_document; values sit in the prompt."""
    m = sd.min_length(task, tok)
    end = tok.encode(sd.END)
    rng = random.Random(task)
    # every cut of the first haystack line (lines are up to ~80 tokens), and up to 64x T
    for length in list(range(m, m + 90)) + [T, 2 * T, 8 * T, 64 * T]:
        ex = sd.make_example(task, tok, length, rng, rng.choice(["train", "eval"]))
        assert len(ex.prompt) + len(ex.answer) + len(end) == length
        assert len(ex.values) == len(ex.value_spans) == VALUE_COUNT.get(task, 1)
        for v in ex.values:  # each gold value occurs in the prompt with the very same token ids
            assert v and contains(ex.prompt, v)
        # assembling in token space equals tokenizing the text, also across prompt/answer/END
        assert roundtrip(tok, ex.prompt + ex.answer + end)
        text = tok.decode(ex.prompt)
        for key in ex.keys:  # in the context and (but for vt's chain and mqar's later queries) in the question
            assert text.count(key) >= (1 if task in ("vt", "mqar", "mqar_haystack") else 2)
    with pytest.raises(ValueError, match=f"at least {m}"):
        sd.make_example(task, tok, m - 1, rng, "eval")


def test_example_and_document_are_the_same_tokens(tok):
    """An eval example at 1x is a training document of block_size tokens: the same draw gives both."""
    for task in sd.TASKS:
        ex = sd.make_example(task, tok, T, random.Random(3), "train")
        ids, mask, doc_ex = sd.make_document(task, tok, T, random.Random(3), "train")
        assert ids == ex.prompt + ex.answer + tok.encode(sd.END) and len(ids) == T and doc_ex == ex
        in_spans = {len(ex.prompt) + i for s, e in ex.value_spans for i in range(s, e)}
        assert mask == [int(i in in_spans) for i in range(T)]
        if not task.startswith("mqar"):   # the spans tile the answer: the mask is the answer
            assert mask == [0] * len(ex.prompt) + [1] * len(ex.answer) + [0] * len(tok.encode(sd.END))


@pytest.mark.parametrize("task", [t for t in sd.TASKS if not t.startswith("mqar")])
def test_value_spans_tile_the_answer(tok, task):
    """Scoring every span scores every answer token: the leading space and the separators too, so
    a model that puts END (or anything else) there is wrong."""
    rng = random.Random(0)
    for _ in range(20):
        ex = sd.make_example(task, tok, 400, rng, "eval")
        starts = [s for s, _ in ex.value_spans]
        ends = [e for _, e in ex.value_spans]
        assert starts == [0] + ends[:-1] and ends[-1] == len(ex.answer)
        for i, (s, e) in enumerate(ex.value_spans):
            # the value's own tokens end its span, after its separator (",") and its leading space
            # (vt's names carry theirs in the first token: " A" "B" "C" "D" "E")
            sep = "," if i and task in ("niah_multivalue", "niah_multiquery") else ""
            space = "" if task == "vt" else " "
            assert ex.answer[s:e][-len(ex.values[i]):] == ex.values[i]
            assert tok.decode(ex.answer[s:e]) == sep + space + tok.decode(ex.values[i])


def test_min_length_is_the_shortest_document(tok):
    """The same counts as before the refactor (the corpus bytes depend on them), and a true bound:
    every draw fits at min_length; but for json_kv's UUIDs every draw has exactly that many."""
    before = {"niah_single": 77, "niah_multikey": 77, "niah_multivalue": 147, "niah_multiquery": 167,
              "vt": 160, "json_kv": 178, "mqar": 1 + 2 * (sd.MQAR_PAIRS + sd.MQAR_QUERIES),
              "mqar_haystack": 1 + 2 * (sd.MQAR_PAIRS + sd.MQAR_QUERIES) + sd.MQAR_CLEAR}
    assert {t: sd.min_length(t, tok) for t in sd.TASKS} == before
    rng, end = random.Random(0), tok.encode(sd.END)
    for task, m in before.items():
        sizes = set()
        for _ in range(300):
            draw = sd._draw(task, tok, rng, rng.choice(["train", "eval"]), 0.3)
            sizes.add(draw.overhead() + draw.clear + len(draw.answer) + len(end))
        assert max(sizes) <= m and (task == "json_kv" or sizes == {m}), (task, sizes)
    uuid_tokens = len(tok.encode(sd.LONGEST_UUID))
    assert uuid_tokens == len(sd.LONGEST_UUID)  # one token per character: no UUID has more


@pytest.mark.parametrize("task", list(sd.TASKS))
def test_examples_deterministic(tok, task):
    length = sd.min_length(task, tok) + 150
    a = [sd.make_example(task, tok, length, random.Random(7), "eval") for _ in range(2)]
    b = sd.make_example(task, tok, length, random.Random(8), "eval")
    assert a[0] == a[1] and a[0].prompt != b.prompt
    assert sd.eval_examples(task, tok, length, 3, seed=1) == sd.eval_examples(task, tok, length, 3, seed=1)


def test_answers_read_like_ruler(tok):
    rng = random.Random(1)
    ex = sd.make_example("niah_single", tok, 300, rng, "eval")
    text = tok.decode(ex.prompt)
    key, value = ex.keys[0], tok.decode(ex.values[0])
    assert text.startswith("A special magic number is hidden within the following text.")
    assert f"One of the special magic numbers for {key} is: {value}.\n" in text
    assert text.endswith(f"The special magic number for {key} mentioned in the provided text is")
    assert re.fullmatch(r"\d{8}", value) and tok.decode(ex.answer) == " " + value
    assert [len(tok.decode([t])) for t in ex.values[0]] == [2, 2, 2, 2]     # no lone digit to guess
    ex = sd.make_example("niah_multivalue", tok, 400, rng, "eval")
    values = [tok.decode(v) for v in ex.values]
    text = tok.decode(ex.prompt)
    assert tok.decode(ex.answer) == " " + ", ".join(values)
    assert sorted(values, key=text.index) == values  # listed in the order they appear
    ex = sd.make_example("niah_multiquery", tok, 400, rng, "eval")
    text = tok.decode(ex.prompt)
    assert f"for {ex.keys[0]}, {ex.keys[1]}, {ex.keys[2]}, and {ex.keys[3]} mentioned" in text
    for key, v in zip(ex.keys, ex.values):
        assert f"for {key} is: {tok.decode(v)}." in text
    ex = sd.make_example("vt", tok, 400, rng, "eval")
    text, names = tok.decode(ex.prompt), ex.keys
    value = re.search(rf"VAR {names[0]} = (\d{{5}})\n", text).group(1)
    assert all(f"VAR {names[i + 1]} = VAR {names[i]}\n" in text for i in range(4))
    assert text.endswith(f"5 variables are assigned the value {value}, they are:")
    assert tok.decode(ex.answer) == " " + " ".join(names)
    ex = sd.make_example("json_kv", tok, 400, rng, "eval")
    text = tok.decode(ex.prompt)
    value = tok.decode(ex.values[0])
    assert f' "{ex.keys[0]}": "{value}",\n' in text and text.startswith("JSON data:\n{\n")
    assert text.endswith(f'Key: "{ex.keys[0]}"\nCorresponding value:')


def test_needle_depth_is_spread_over_the_haystack(tok):
    rng = random.Random(0)
    depths = []
    for _ in range(300):
        ex = sd.make_example("niah_single", tok, 1024, rng, "eval")
        i = next(i for i in range(len(ex.prompt)) if ex.prompt[i:i + len(ex.values[0])] == ex.values[0])
        depths.append(i / 1024)
    hist = np.histogram(depths, bins=4, range=(0, 1))[0]
    assert hist.min() > 30  # every quarter of the prompt gets needles


def test_multikey_distractors_use_other_keys(tok):
    rng = random.Random(0)
    for _ in range(20):
        ex = sd.make_example("niah_multikey", tok, 600, rng, "train")
        keys = re.findall(r"numbers for ([a-z]+-[a-z]+) is", tok.decode(ex.prompt))
        assert len(keys) > 10 and keys.count(ex.keys[0]) == 1


def test_mqar_layout(tok):
    """Pairs open the document (key token, value token), the noise haystack follows, the queries
    close it: each asked key again, followed by its value; the mask marks exactly those values."""
    rng = random.Random(0)
    end = tok.encode(sd.END)
    for length in (sd.min_length("mqar", tok), 128, 1000):
        ids, mask, ex = sd.make_document("mqar", tok, length, rng)
        pairs = ids[:2 * sd.MQAR_PAIRS]
        value_of = dict(zip(pairs[0::2], pairs[1::2]))
        assert len(value_of) == sd.MQAR_PAIRS and len(set(value_of.values())) == sd.MQAR_PAIRS
        assert all(re.fullmatch(r" [a-z]+", tok.decode([k])) and re.fullmatch(r"\d\d", tok.decode([v]))
                   for k, v in value_of.items())
        queries = ids[length - len(end) - 2 * sd.MQAR_QUERIES: length - len(end)]
        assert [value_of[k] for k in queries[0::2]] == queries[1::2]      # every query's value is its pair's
        assert len(set(queries[0::2])) == sd.MQAR_QUERIES and ids[length - len(end):] == end
        targets = [i for i, m in enumerate(mask) if m]
        assert targets == list(range(length - len(end) - 2 * sd.MQAR_QUERIES + 1, length - len(end), 2))
        assert ex.prompt[-1] == queries[0] and [v[0] for v in ex.values] == queries[1::2]
        assert tok.decode(ids[2 * sd.MQAR_PAIRS:length - len(end) - 2 * sd.MQAR_QUERIES]) in sd.NOISE * (length // 10)
        assert roundtrip(tok, ids)
    # no held-out keys (an unseen key token's embedding is untrained): both splits draw from
    # MQAR_KEYS, which leaves out the one adjective of the noise haystack
    keys = {k for split in ("train", "eval") for _ in range(100)
            for k in sd.make_example("mqar", tok, 200, rng, split).keys}
    assert keys <= set(sd.MQAR_KEYS) and len(keys) > 100 and "green" not in sd.MQAR_KEYS and " green" in sd.NOISE


@pytest.mark.parametrize("distance", [0, 7, 300])
def test_mqar_pairs_moved_to_a_distance_before_the_question(tok, distance):
    """pair_distance=d (the eval's recent layout): the same 4 pairs and 2 queries, the pairs' block now ends
    exactly d haystack tokens before the first query's key, the haystack fills the front; the length, the
    answers (each asked key's value from its pair) and the scored spans are as in the default layout."""
    rng = random.Random(0)
    for length in (sd.min_length("mqar", tok) + distance, 640, 4096):
        ex = sd.make_example("mqar", tok, length, rng, "eval", pair_distance=distance)
        end = len(tok.encode(sd.END))
        assert len(ex.prompt) + len(ex.answer) + end == length
        start = len(ex.prompt) - 1 - distance - 2 * sd.MQAR_PAIRS          # the pairs' first token
        pairs = ex.prompt[start:start + 2 * sd.MQAR_PAIRS]
        value_of = dict(zip(pairs[0::2], pairs[1::2]))
        assert len(value_of) == sd.MQAR_PAIRS and all(re.fullmatch(r"\d\d", tok.decode([v])) for v in value_of.values())
        seq = ex.prompt + ex.answer
        keys = [seq[len(ex.prompt) - 1]] + ex.answer[len(ex.values[0])::2][:sd.MQAR_QUERIES - 1]
        assert [value_of[k] for k in keys] == [v[0] for v in ex.values]       # the answers: the pairs' values
        assert all(seq.count(k) == 2 for k in keys)                          # each asked key: its pair, its query
        outside = ex.prompt[:start] + ex.prompt[start + 2 * sd.MQAR_PAIRS:len(ex.prompt) - 1]
        assert not set(outside) & set(pairs) and tok.decode(outside[-distance:] if distance else []) in \
            sd.NOISE * (distance // 10 + 2)                                  # haystack between the pairs and the question
    with pytest.raises(ValueError, match="needs at least"):
        sd.make_example("mqar", tok, sd.min_length("mqar", tok) + distance - 1, rng, "eval", pair_distance=distance)


def test_answer_distances_count_back_from_the_predicting_position(tok):
    """mqar: the value token at prompt position 2i+1 is predicted by the query key's position; niah:
    each of the 4 value tokens is as far from its copy as the answer is from the needle."""
    ex = sd.make_example("mqar", tok, 200, random.Random(1), "train")
    seq = ex.prompt + ex.answer
    want = []
    for s, e in ex.value_spans:
        pos = len(ex.prompt) + s                     # the target's position; predicted at pos - 1
        src = seq.index(seq[pos])                    # its value in the pairs, the first occurrence
        assert src < 2 * sd.MQAR_PAIRS and seq[src - 1] == seq[pos - 1]   # after the same key
        want.append(pos - 1 - src)
    assert sd.answer_distances(ex) == want and min(want) > 200 - 4 * sd.MQAR_PAIRS - 3
    ex = sd.make_example("niah_single", tok, 300, random.Random(1), "train")
    d = sd.answer_distances(ex)
    assert len(d) == 4 and len(set(d)) == 1 and 0 < d[0] < 300


def test_min_doc_len_removes_the_window_shortcut(tmp_path):
    ("""The measured share of training answers beyond the local layers' reach, pinned for the
    layouts the configs use: the main run's (config/vpad.py) documents fill more than half a 64-token
    row, so every answer lies beyond its 2 short convolutions of 3 (6 tokens); without min_doc_len,
    short documents put some within it. niah_single at 128 tokens: """
     """every value sits more than 30 tokens back (window 16),
    but only 15% beyond 62 (window 32, most of it reachable through the window).""")
    import train
    with contextlib.redirect_stdout(io.StringIO()):
        cfg = configure(settings_of(vars(train)), [os.path.join(ROOT, "config", "vpad.py")])
    reach = cfg["n_layer"] * cfg["short_conv"]
    assert (cfg["tasks"] == "mqar" and cfg["nope_every"] == 1 and cfg["window"] == 0
            and 2 * cfg["min_doc_len"] > cfg["block_size"])
    meta = sd.prepare(str(tmp_path / "a"), cfg["block_size"], 200 * cfg["block_size"], tasks="mqar",
                      min_doc_len=cfg["min_doc_len"], progress=False)
    assert sd.beyond_reach(meta, reach) == 1.0
    assert sum(meta["answer_distances"]) == 200 * sd.MQAR_QUERIES       # one document per row
    meta = sd.prepare(str(tmp_path / "b"), cfg["block_size"], 200 * cfg["block_size"], tasks="mqar", progress=False)
    assert 0.85 < sd.beyond_reach(meta, reach) < 0.95
    meta = sd.prepare(str(tmp_path / "c"), 128, 200 * 128, tasks="niah_single", progress=False)
    assert sd.beyond_reach(meta, 30) == 1.0 and 0.1 < sd.beyond_reach(meta, 62) < 0.2


# -----------------------------------------------------------------------------
# held-out keys

def keys_in(text):
    """Every key in a text, queried or distractor: adjective-noun keys, VT variables, JSON keys."""
    words = set(re.findall(r"(?<![\w-])([a-z]+-[a-z]+)(?![\w-])", text)) & set(sd.WORD_KEYS)
    names = set(re.findall(r"VAR ([A-Z]{5})\b", text))
    uuids = set(re.findall(r'"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})":', text))
    return words, names, uuids


def test_eval_keys_never_in_training_data_and_only_in_eval_examples(tok, tmp_path):
    """Parses every key out of the text (not just the queried ones): none in the train or val
    corpus or in train-split examples is held out, every one in an eval example is."""
    assert 0.05 < len(sd.EVAL_WORD_KEYS) / len(sd.WORD_KEYS) < 0.2
    sd.prepare(str(tmp_path), T, 300 * T, tasks=",".join(sd.TASKS), val_tokens=100 * T, progress=False)
    ids = [sd.load_split(str(tmp_path), split)[0] for split in ("train", "val")]
    texts = {"train": [tok.decode(i) for i in ids], "eval": []}
    rng = random.Random(0)
    for task in sd.TASKS:
        for split in ("train", "eval"):
            texts[split] += [tok.decode(sd.make_example(task, tok, 600, rng, split).prompt) for _ in range(10)]
    for split, chunks in texts.items():
        found = [set().union(*kind) for kind in zip(*map(keys_in, chunks))]
        assert all(len(keys) > 20 for keys in found)  # not vacuous: distractors and all three kinds
        assert all(sd.is_eval_key(k) == (split == "eval") for keys in found for k in keys), split


def haystack_lines(tok, ex):
    """mqar_haystack's prompt read back: (the positions of its key-value pairs, the keys' tokens)."""
    keys = {tok.encode(" " + k)[0] for k in sd.MQAR_KEYS}
    at = [i for i, t in enumerate(ex.prompt[:-1]) if t in keys]
    return at, [ex.prompt[i] for i in at]


def test_mqar_haystack_layout(tok):
    """Each asked key occurs once before its query (the distractors' keys are other keys, their
    values other values), the document's 4 pairs sit anywhere but the last MQAR_CLEAR tokens, so no
    answer is within a short convolution's reach, and distractor lines are pairs too."""
    rng, q = random.Random(0), 0.3
    for length in [sd.min_length("mqar_haystack", tok)] + [64] * 50 + [1000] * 20:
        ex = sd.make_example("mqar_haystack", tok, length, rng, "train", q)
        at, keys = haystack_lines(tok, ex)
        asked = [tok.encode(" " + k)[0] for k in ex.keys]
        assert [keys.count(k) for k in asked] == [1, 1] and ex.prompt[-1] == asked[0]
        pair_values = {ex.prompt[i + 1] for i, k in zip(at, keys) if k in asked}
        assert pair_values == {v[0] for v in ex.values}
        distractor_values = [ex.prompt[i + 1] for i, k in zip(at, keys) if k not in asked]
        assert not pair_values & set(distractor_values)
        assert all(re.fullmatch(r"\d\d", tok.decode([v])) for v in distractor_values)
        assert min(sd.answer_distances(ex)) > sd.MQAR_CLEAR
        assert roundtrip(tok, ex.prompt + ex.answer)


def test_mqar_haystack_distractors_grow_with_the_length_and_pairs_sit_at_uniform_depths(tok):
    """The count of distractor pairs is the haystack's tokens over the mean line's (q x 2 tokens +
    (1 - q) x the noise line's) times q, at 8x as at 64x; without distractors there are none. The
    depth of the asked keys' pairs (their place in the part of the prompt a pair may take) is
    uniform: its quartiles sit at 1/4, 1/2, 3/4, where mqar's pairs all sit at the top."""
    noise = len(tok.encode(sd.NOISE))
    for q in (0.1, 0.3):
        rate = q / (2 * q + (1 - q) * noise)
        for length, n in ((512, 60), (4096, 12)):
            found = sum(len(haystack_lines(tok, ex)[0]) - sd.MQAR_PAIRS
                        for ex in sd.eval_examples("mqar_haystack", tok, length, n, distractors=q))
            haystack = length - sd.min_length("mqar_haystack", tok) + sd.MQAR_CLEAR
            assert abs(found / n / (rate * haystack) - 1) < 0.1, (q, length, found / n, rate * haystack)
    assert all(len(haystack_lines(tok, ex)[0]) == sd.MQAR_PAIRS
               for ex in sd.eval_examples("mqar_haystack", tok, 2048, 5, distractors=0.0))
    for task, quartiles in (("mqar_haystack", (0.25, 0.5, 0.75)), ("mqar", (0, 0, 0))):
        depths = []
        for ex in sd.eval_examples(task, tok, 1024, 400, distractors=0.2 if task == "mqar_haystack" else 0.0):
            free = len(ex.prompt) - 1 - sd.MQAR_CLEAR if task == "mqar_haystack" else len(ex.prompt)
            depths += [ex.prompt.index(tok.encode(" " + k)[0]) / free for k in ex.keys]
        got = np.quantile(depths, [0.25, 0.5, 0.75])
        assert np.allclose(got, quartiles, atol=0.04), (task, got)


def test_distractors_are_a_setting_of_the_corpus_and_only_of_mqar_haystack(tmp_path):
    """meta.json keeps it for a corpus of mqar_haystack (and the shortcut share at the short
    convolutions' reach is 0), keeps no such key for any other corpus, and a value outside [0, 1)
    or for a corpus without mqar_haystack is refused naming the key."""
    meta = sd.prepare(str(tmp_path / "h"), 64, 20000, tasks="mqar_haystack", min_doc_len=40, distractors=0.2,
                      progress=False)
    assert meta["distractors"] == 0.2 and sd.beyond_reach(meta, 6) == 1.0
    assert "--distractors=0.2" in sd.regenerate(str(tmp_path / "h"), meta)
    assert "distractors" not in sd.prepare(str(tmp_path / "m"), 64, 20000, tasks="mqar", progress=False)
    for q, tasks in ((1.0, "mqar_haystack"), (-0.1, "mqar_haystack"), (0.2, "mqar")):
        with pytest.raises(ValueError, match="distractors="):
            sd.prepare(str(tmp_path / "x"), 64, 20000, tasks=tasks, distractors=q, progress=False)
    assert not os.path.exists(tmp_path / "x" / sd.META)


# -----------------------------------------------------------------------------
# documents and the corpus

def test_document_mask_marks_exactly_the_answer(tok):
    rng = random.Random(0)
    for task in [t for t in sd.TASKS if not t.startswith("mqar")]:    # mqar's mask: test_mqar_layout
        n = sd.min_length(task, tok)
        for total in (n, n + 1, n + 50):
            ids, mask, _ = sd.make_document(task, tok, total, rng)
            assert len(ids) == len(mask) == total
            on = [i for i, m in enumerate(mask) if m]
            assert on == list(range(on[0], on[-1] + 1))  # one contiguous run...
            assert ids[on[-1] + 1:] == tok.encode(sd.END)  # ...right before END
            prompt = ids[:on[0]]
            assert tok.decode(prompt).endswith((" is", " are", "they are:", "value:"))
        with pytest.raises(ValueError, match=str(n)):
            sd.make_document(task, tok, n - 1, rng)


def test_prepare_end_to_end(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    kw = dict(tasks="niah_single:3,vt:1", data_seed=5, val_tokens=20 * T, progress=False)
    meta = sd.prepare(a, T, 100 * T, **kw)
    sd.prepare(b, T, 100 * T, **kw)
    for f in sorted(os.listdir(a)):  # same arguments, same bytes
        assert open(os.path.join(a, f), "rb").read() == open(os.path.join(b, f), "rb").read(), f
    assert sorted(os.listdir(a)) == sorted(["train.bin", "val.bin", "train_mask.bin", "val_mask.bin",
                                            "tokenizer.json", "meta.json"])
    assert sd.load_meta(a) == meta == json.load(open(os.path.join(a, "meta.json")))
    assert meta["tokenizer"] == "lengthgen" and meta["block_size"] == T and meta["data_seed"] == 5
    assert meta["tasks"] == {"niah_single": 3.0, "vt": 1.0} and meta["num_tokens"] == 100 * T
    tok = sd.load_tokenizer(a)
    assert meta["vocab_size"] == tok.vocab_size and meta["train_tokens"] == 100 * T + 1

    end = tok.encode(sd.END)
    heads = (sd.NIAH_HEAD[False], sd.VT_HEAD)
    for split in ("train", "val"):
        ids, mask = sd.load_split(a, split)
        assert len(ids) == len(mask) == meta[f"{split}_tokens"]
        assert mask[-1] == 0 and ids.max() < tok.vocab_size
        starts = []
        for r in range((len(ids) - 1) // T):
            row, m = list(ids[r * T:(r + 1) * T]), list(mask[r * T:(r + 1) * T])
            text = tok.decode(row)
            n_docs = sum(text.count(h) for h in heads)
            assert n_docs >= 1 and text.startswith(heads)  # a row starts with a document...
            runs = [i for i in range(T) if m[i] and (i == 0 or not m[i - 1])]
            assert len(runs) == n_docs  # ...holds only whole ones: each answer...
            for s in runs:
                e = s
                while e < T and m[e]:
                    e += 1
                assert row[e:e + len(end)] == end  # ...ends with END inside the same row
                answer = tok.decode(row[s:e])
                assert re.fullmatch(r" \d{8}|( [A-Z]{5}){5}", answer)
                starts.append(s)
        assert len(set(starts)) > 10  # answers do not sit at a fixed position
    train_text = tok.decode(sd.load_split(a, "train")[0])
    val_text = tok.decode(sd.load_split(a, "val")[0])
    assert train_text[:2000] != val_text[:2000]  # val is its own seed stream
    c = str(tmp_path / "c")
    sd.prepare(c, T, 100 * T, **{**kw, "data_seed": 6})
    assert open(os.path.join(c, "train.bin"), "rb").read() != open(os.path.join(a, "train.bin"), "rb").read()


def test_prepare_interrupted_leaves_no_dataset(tmp_path, monkeypatch):
    d = str(tmp_path / "d")
    sd.prepare(d, T, 30 * T, val_tokens=4 * T, progress=False)
    calls = [0]
    real = sd.make_document
    def dying(*args, **kwargs):
        calls[0] += 1
        if calls[0] > 20:
            raise KeyboardInterrupt  # an interruption halfway through the train split
        return real(*args, **kwargs)
    monkeypatch.setattr(sd, "make_document", dying)
    for out in (d, str(tmp_path / "fresh")):  # over an existing dataset, and into a new folder
        calls[0] = 0
        with pytest.raises(KeyboardInterrupt):
            sd.prepare(out, T, 30 * T, data_seed=2, val_tokens=4 * T, progress=False)
        assert "meta.json" not in os.listdir(out)
        with pytest.raises(sd.DataError, match="python sample_data.py --data_dir="):
            sd.load_meta(out)


def test_load_meta_catches_bad_folders(tmp_path):
    d = str(tmp_path)
    with pytest.raises(sd.DataError, match="meta.json is missing.*python sample_data.py --data_dir="):
        sd.load_meta(d)
    sd.prepare(d, T, 10 * T, val_tokens=2 * T, progress=False)
    sd.load_meta(d)
    with open(os.path.join(d, "val.bin"), "r+b") as f:
        f.truncate(100)
    with pytest.raises(sd.DataError, match="val.bin has 100 bytes.*--block_size=256 --num_tokens=2560"):
        sd.load_meta(d)
    with open(os.path.join(d, "meta.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(sd.DataError, match="corrupt"):
        sd.load_meta(d)


# -----------------------------------------------------------------------------
# the corpus bytes are pinned: a change to them must be deliberate and bump sample_data.VERSION

CORPUS_SHA256 = {
    (128, "niah_single,niah_multikey"): {
        "train.bin": "2bb093726b5d02cbaccdc17e2d6e1f837c4fb7079a4ecf64586a5205d50df355",
        "train_mask.bin": "35be33d5131344aa9f02a29b5d3923aad5cf8f8e738a4895470b10100fc4d009",
        "val.bin": "ed8a82164ec0db0f7a03d0292c93171849ca7bbfe04bff29960ec718cc44794d",
        "val_mask.bin": "c5fe259199e017da7dda11edbe8d6df23f95b3917c2c1772c6c927c9607dffa5",
    },
    (256, "niah_single,niah_multikey:2,niah_multivalue,niah_multiquery,vt,json_kv:0.5"): {
        "train.bin": "b867c0bbab4d5095a4731d84f6a08ce7f4051ee388bf844c67d6082ca731396e",
        "train_mask.bin": "fe247627ed4755bd1e23ff87a75dd34b72347d51e94ceb398f8606f7e9ecaac2",
        "val.bin": "a4b59d204cba0648efd58c83afe08609f46431d5d249d49fa4ca092ebc9eea4e",
        "val_mask.bin": "41944e571388614a2d03ad67eba0637762ce04330379fb8685757189a8b1d0f1",
    },
}


@pytest.mark.parametrize("block_size, tasks", list(CORPUS_SHA256))
def test_corpus_bytes_unchanged(tmp_path, block_size, tasks):
    """The default data seed (1337), 20000 tokens: the sha256 of VERSION 3's corpus."""
    assert sd.VERSION == 3, "the corpus format changed: pin the new version's digests here"
    sd.prepare(str(tmp_path), block_size, 20000, tasks=tasks, progress=False)
    for name, digest in CORPUS_SHA256[(block_size, tasks)].items():
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == digest, name


# -----------------------------------------------------------------------------
# command line

def main_here(*args):
    """sample_data.py in this process: -> its one-line refusal, or None when it ran. Its SIGINT /
    SIGTERM handlers are given back, as at the end of a process of its own."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        sd.main(list(args))
    except SystemExit as e:
        assert isinstance(e.code, str) and len(e.code.strip().splitlines()) == 1, e.code
        return e.code
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)


def snapshot(root):
    return {os.path.join(d, f): open(os.path.join(d, f), "rb").read()
            for d, _, files in os.walk(root) for f in files} | {d: None for d, _, _ in os.walk(root)}


@pytest.mark.parametrize("args, key", [
    (["--data_dir={file}"], "data_dir"),                      # an existing file
    (["--data_dir={file}/sub"], "data_dir"),                  # cannot be created
    (["--data_dir="], "data_dir"),
    (["--tasks=niah_single:inf"], "tasks"),
    (["--tasks=niah_single:0"], "tasks"),
    (["--tasks=niah_single,vt:-1"], "tasks"),
    (["--tasks=niah_single:x"], "tasks"),
    (["--tasks=niah_single,bogus"], "tasks"),
    (["--tasks=vt,vt"], "tasks"),
    (["--tasks=,"], "tasks"),
    (["--block_size=40"], "block_size"),
    (["--num_tokens=0"], "num_tokens"),
    (["--val_tokens=-1"], "val_tokens"),
    (["--tokenizer=gpt2"], "unknown key 'tokenizer'"),       # one tokenizer, built offline: no key
    (["--num_tokns=5"], "num_tokens"),                       # did you mean
    (["--block_size=abc"], "block_size"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, key):
    (tmp_path / "file").write_text("keep me")
    before = snapshot(tmp_path)
    args = [a.format(file=tmp_path / "file") for a in args]
    msg = main_here(f"--data_dir={tmp_path / 'new'}", "--num_tokens=1000", *args)
    assert msg and key in msg, msg
    assert snapshot(tmp_path) == before


def test_cli_runs_and_a_refusal_is_one_line_on_stderr(tmp_path):
    """The script end to end, in a process of its own: it writes the corpus its flags ask for, and
    what Python prints of a refusal is the line alone, no traceback."""
    out = str(tmp_path / "data")
    run = [sys.executable, os.path.join(ROOT, "sample_data.py"), f"--data_dir={out}", "--block_size=256",
           "--num_tokens=2000", "--tasks=niah_multikey,json_kv"]
    r = subprocess.run([*run, "--data_seed=3"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    # data generation loads no torch (base/rundir.py imports it only where a checkpoint or device needs it)
    r2 = subprocess.run([sys.executable, "-c", "import sys, sample_data; print('torch' in sys.modules)"],
                        capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r2.stdout.strip() == "False", r2.stderr
    meta = sd.load_meta(out)
    assert meta["tasks"] == {"niah_multikey": 1.0, "json_kv": 1.0} and meta["data_seed"] == 3
    before = snapshot(out)                  # a corpus is never overwritten: runs trained on it check it
    msg = main_here(f"--data_dir={out}", "--block_size=256", "--num_tokens=4000")
    assert 'already holds a corpus of other settings (num_tokens=2000' in msg and f'delete {out}' in msg
    assert snapshot(out) == before          # the same settings write the same bytes (the repair the checksums advise)
    assert main_here(f"--data_dir={out}", "--block_size=256", "--num_tokens=2000", "--tasks=niah_multikey,json_kv",
                     "--data_seed=3") is None and snapshot(out) == before
    r = subprocess.run([*run, "--data_seed=x"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    line, = r.stderr.strip().splitlines()
    assert "data_seed" in line


def test_ctrl_c_during_generation_is_one_line_and_leaves_no_meta(tmp_path):
    """SIGINT while the corpus is being written: exit 130 with one line that gives the command to
    rerun, no traceback, and no meta.json, so no run reads the half-written corpus. The signal goes
    when the child shows its progress bar (train.bin is open), not after a sleep."""
    out = tmp_path / "d"
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "sample_data.py"), f"--data_dir={out}",
                             "--block_size=256", "--num_tokens=50000000"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    seen = b""
    while b"train:" not in seen:                 # the bar's first draw: "train:   0%|..."
        chunk = os.read(proc.stderr.fileno(), 4096)
        assert chunk, seen.decode()[-2000:]      # it ended before writing
        seen += chunk
    proc.send_signal(signal.SIGINT)
    err = (seen + proc.communicate(timeout=60)[1]).decode()
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith("train:")]   # less the progress bar
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert len(lines) == 1 and "stopped while writing" in lines[0] and "rerun: python sample_data.py" in lines[0], err
    assert not (out / "meta.json").exists()


def test_a_corpus_larger_than_the_free_space_is_refused_before_writing(tmp_path):
    msg = main_here(f"--data_dir={tmp_path / 'big'}", "--num_tokens=2000000000000")
    assert "num_tokens=2,000,000,000,000 needs about" in msg and "GiB are free" in msg, msg
    assert not os.listdir(tmp_path / "big")


def test_a_full_disk_that_numpy_reports_without_errno_is_named_as_such(tmp_path, monkeypatch):
    """numpy's tofile on a full disk raises OSError("N requested and M written") with no errno:
    the line still says the device is full (the free space is checked), not "OSError; fix that"."""
    from base import rundir
    monkeypatch.setattr(rundir, "_free_bytes", lambda path: 0)
    with pytest.raises(SystemExit) as e:
        with rundir.writing(str(tmp_path / "d"), "the corpus", "rerun"):
            raise OSError("131072 requested and 4096 written")
    assert e.value.code == (f"cannot write the corpus to {tmp_path / 'd'}: no space left on the device; "
                            f"free some space, then rerun")


def test_rows_with_several_documents_counts_the_rows_a_later_answer_could_read_an_earlier_document_in(tmp_path):
    """min_doc_len at most half a row leaves room for a second document (no document mask separates
    them); above half, every row holds one document and then noise filler (the mqar recipe: 40 of 64)."""
    one, two = str(tmp_path / 'one'), str(tmp_path / 'two')
    sd.prepare(one, 64, 20000, tasks='mqar', min_doc_len=40, progress=False)
    sd.prepare(two, 64, 20000, tasks='mqar', min_doc_len=0, progress=False)
    assert sd.rows_with_several_documents(one, 64) == 0.0
    assert 0.5 < sd.rows_with_several_documents(two, 64) < 1.0
