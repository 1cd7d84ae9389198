"""Tests for sample_data.py: tokenizer, task generators, held-out keys, corpus writer, CLI."""
import json
import os
import random
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import tiktoken

import sample_data as sd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = 256  # block size of the test corpora (json_kv and vt need more than 128)


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
    text = sd.make_example("json_kv", tok, 400, random.Random(0), "eval")
    ids = text.prompt + text.answer
    assert tok2.vocab_size == tok.vocab_size
    assert tok2.decode(ids) == tok.decode(ids) and tok2.encode(tok.decode(ids)) == ids
    # corrupt / missing files name the command that regenerates them
    with pytest.raises(sd.DataError, match="python sample_data.py --out_dir="):
        sd.load_tokenizer(str(tmp_path / "nowhere"))
    (tmp_path / "tokenizer.json").write_text('{"format": "lengthgen-tokenizer", "ranks": [')
    with pytest.raises(sd.DataError, match="corrupt.*python sample_data.py"):
        sd.load_tokenizer(str(tmp_path))


def test_named_encoding_not_cached_fails_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty cache
    monkeypatch.setattr(sd, "_BUILT", {})
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, "gpt2", raising=False)
    # no network here: if anything tried to download, fail the test rather than hang
    def no_download(*args, **kwargs):
        raise AssertionError("tried to download")
    monkeypatch.setattr("requests.get", no_download)
    t0 = time.time()
    with pytest.raises(sd.TokenizerError) as e:
        sd.build_tokenizer("gpt2")
    assert time.time() - t0 < 5
    msg = str(e.value)
    assert "not cached" in msg and "lengthgen" in msg and "\n" not in msg
    with pytest.raises(sd.TokenizerError, match="unknown tokenizer 'nope'"):
        sd.build_tokenizer("nope")


def test_named_encoding_gets_compact_ids(monkeypatch, tmp_path):
    # stand in for a cached named encoding: byte-level BPE with GPT-2's pre-tokenizer (spaces stick
    # to digits there) and a few merges, under a large id offset
    r50k = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
    ranks = {bytes([i]): i for i in range(256)}
    for m in [" 1", " 2", "12", "34", " 12", " t", "he", " the", " magic", " A", "BC", "ab", "-a"]:
        ranks[m.encode()] = len(ranks)
    for i in range(5000):  # ids the tasks never use
        ranks[f"<pad{i}>".encode()] = len(ranks)
    fake = tiktoken.Encoding("fake", pat_str=r50k, mergeable_ranks=ranks, special_tokens={})
    monkeypatch.setattr(sd, "_BUILT", {})
    monkeypatch.setattr(sd, "_get_cached_encoding", lambda name: fake)
    tok = sd.build_tokenizer("r50k_base")
    assert tok.vocab_size < 300 and len(tok.raw_ids) == tok.vocab_size
    rng = random.Random(0)
    for task in sd.TASKS:
        m = sd.min_length(task, tok)
        for length in (m, m + 1, m + 13, m + 200):
            ex = sd.make_example(task, tok, length, rng, "eval")
            assert len(ex.prompt) == length and max(ex.prompt + ex.answer) < tok.vocab_size
            assert roundtrip(tok, ex.prompt + ex.answer)
            if task != "json_kv":  # GPT-2 attaches the answer's space to a leading digit
                assert all(contains(ex.prompt, v) for v in ex.values)
    tok.save(str(tmp_path / "t.json"))
    tok2 = sd.Tokenizer.load(str(tmp_path / "t.json"))
    assert tok2.raw_ids == tok.raw_ids and tok2.decode(ex.prompt) == tok.decode(ex.prompt)


# -----------------------------------------------------------------------------
# task generators

@pytest.mark.parametrize("task", list(sd.TASKS))
def test_examples_exact_length_values_and_roundtrip(tok, task):
    m = sd.min_length(task, tok)
    rng = random.Random(task)
    # every cut of the first haystack line (lines are up to ~80 tokens), and up to 64x T
    lengths = list(range(m, m + 90)) + [T, 2 * T, 8 * T, 64 * T]
    for length in [L for L in lengths if L >= m]:
        split = rng.choice(["train", "eval"])
        ex = sd.make_example(task, tok, length, rng, split)
        assert len(ex.prompt) == length
        assert len(ex.values) == {"niah_multivalue": 4, "niah_multiquery": 4, "vt": 5}.get(task, 1)
        assert ex.values == [ex.answer[s:e] for s, e in ex.value_spans]
        for v in ex.values:  # each gold value occurs in the prompt with the very same token ids
            assert v and contains(ex.prompt, v)
        # assembling in token space equals tokenizing the text, also across prompt/answer/END
        assert roundtrip(tok, ex.prompt + ex.answer + tok.encode(sd.END))
        text = tok.decode(ex.prompt)
        for key in ex.keys:  # in the context and (but for vt's chain) in the question
            assert text.count(key) >= (1 if task == "vt" else 2)
    with pytest.raises(ValueError, match=f"at least {m}"):
        sd.make_example(task, tok, m - 1, rng, "eval")


@pytest.mark.parametrize("task", list(sd.TASKS))
def test_examples_deterministic(tok, task):
    length = sd.min_length(task, tok) + 150
    a = [sd.make_example(task, tok, length, random.Random(7), "eval") for _ in range(2)]
    b = sd.make_example(task, tok, length, random.Random(8), "eval")
    assert a[0] == a[1] and a[0].prompt != b.prompt
    # a numpy Generator works too, and is just as reproducible
    c = [sd.make_example(task, tok, length, np.random.default_rng(3), "eval") for _ in range(2)]
    assert c[0] == c[1]


def test_answers_read_like_ruler(tok):
    rng = random.Random(1)
    ex = sd.make_example("niah_single", tok, 300, rng, "eval")
    text = tok.decode(ex.prompt)
    key, value = ex.keys[0], tok.decode(ex.values[0])
    assert text.startswith("A special magic number is hidden within the following text.")
    assert f"One of the special magic numbers for {key} is: {value}.\n" in text
    assert text.endswith(f"The special magic number for {key} mentioned in the provided text is")
    assert re.fullmatch(r"\d{7}", value) and tok.decode(ex.answer) == " " + value
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


# -----------------------------------------------------------------------------
# held-out keys

def test_key_split_is_disjoint_and_respected(tok):
    evals = sd.eval_word_keys()
    assert 0.05 < len(evals) / len(sd.WORD_KEYS) < 0.2
    assert evals.isdisjoint(sd.TRAIN_WORD_KEYS)
    rng = random.Random(0)
    for task in sd.TASKS:
        for split in ("train", "eval"):
            for _ in range(5):
                ex = sd.make_example(task, tok, 300, rng, split)
                assert all(sd.is_eval_key(k) == (split == "eval") for k in ex.keys)


def test_held_out_keys_never_in_corpus(tmp_path):
    sd.prepare(str(tmp_path), T, 300 * T, tasks=list(sd.TASKS), val_tokens=100 * T, progress=False)
    tok = sd.load_tokenizer(str(tmp_path))
    evals = sd.eval_word_keys()
    for split in ("train", "val"):
        text = tok.decode(np.fromfile(tmp_path / f"{split}.bin", dtype=np.uint16))
        word_keys = set(re.findall(r"(?<![\w-])([a-z]+-[a-z]+)(?![\w-])", text))
        var_names = set(re.findall(r"VAR ([A-Z]{5})\b", text))
        uuid_keys = set(re.findall(r'"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})":', text))
        assert len(word_keys) > 20 and len(var_names) > 20 and len(uuid_keys) > 20  # not vacuous
        assert not word_keys & evals
        assert not any(sd.is_eval_key(k) for k in var_names | uuid_keys)


# -----------------------------------------------------------------------------
# documents and the corpus

def test_document_mask_marks_exactly_the_answer(tok):
    rng = random.Random(0)
    for task in sd.TASKS:
        n = sd.min_doc_length(task, tok)
        for total in (n, n + 1, n + 50):
            ids, mask = sd.make_document(task, tok, total, rng)
            assert len(ids) == len(mask) == total
            on = [i for i, m in enumerate(mask) if m]
            assert on == list(range(on[0], on[-1] + 1))  # one contiguous run...
            assert ids[on[-1] + 1:] == tok.encode(sd.END)  # ...right before END
            prompt = ids[:on[0]]
            assert tok.decode(prompt).endswith((" is", " are", "they are:", "value:"))
        with pytest.raises(ValueError, match=str(n)):
            sd.make_document(task, tok, n - 1, rng)


def read_split(d, split):
    ids = np.memmap(os.path.join(d, f"{split}.bin"), dtype=np.uint16, mode="r")
    mask = np.memmap(os.path.join(d, f"{split}_mask.bin"), dtype=np.uint8, mode="r")
    return ids, mask


def test_prepare_end_to_end(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    kw = dict(tasks="niah_single:3,vt:1", seed=5, val_tokens=20 * T, progress=False)
    meta = sd.prepare(a, T, 100 * T, **kw)
    sd.prepare(b, T, 100 * T, **kw)
    for f in sorted(os.listdir(a)):  # same arguments, same bytes
        assert open(os.path.join(a, f), "rb").read() == open(os.path.join(b, f), "rb").read(), f
    assert sorted(os.listdir(a)) == sorted(["train.bin", "val.bin", "train_mask.bin", "val_mask.bin",
                                            "tokenizer.json", "meta.json"])
    assert sd.load_meta(a) == meta == json.load(open(os.path.join(a, "meta.json")))
    assert meta["tokenizer"] == "lengthgen" and meta["block_size"] == T and meta["seed"] == 5
    assert meta["tasks"] == {"niah_single": 3.0, "vt": 1.0} and meta["num_tokens"] == 100 * T
    tok = sd.load_tokenizer(a)
    assert meta["vocab_size"] == tok.vocab_size
    assert meta["train_mask"] == "train_mask.bin" and meta["train_tokens"] == 100 * T + 1

    end = tok.encode(sd.END)
    heads = (sd.NIAH_HEAD[False], sd.VT_HEAD)
    for split in ("train", "val"):
        ids, mask = read_split(a, split)
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
                assert re.fullmatch(r" \d{7}|( [A-Z]{5}){5}", answer)
                starts.append(s)
        assert len(set(starts)) > 10  # answers do not sit at a fixed position
    train_text = tok.decode(read_split(a, "train")[0])
    val_text = tok.decode(read_split(a, "val")[0])
    assert train_text[:2000] != val_text[:2000]  # val is its own seed stream
    c = str(tmp_path / "c")
    sd.prepare(c, T, 100 * T, **{**kw, "seed": 6})
    assert open(os.path.join(c, "train.bin"), "rb").read() != open(os.path.join(a, "train.bin"), "rb").read()


def test_prepare_is_atomic(tmp_path, monkeypatch):
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
            sd.prepare(out, T, 30 * T, seed=2, val_tokens=4 * T, progress=False)
        files = os.listdir(out)
        assert "meta.json" not in files and not any(f.endswith(".tmp") for f in files)
        with pytest.raises(sd.DataError, match="python sample_data.py --out_dir="):
            sd.load_meta(out)
    assert not os.path.exists(os.path.join(str(tmp_path / "fresh"), "train.bin"))


def test_load_meta_catches_bad_folders(tmp_path):
    d = str(tmp_path)
    with pytest.raises(sd.DataError, match="meta.json is missing.*python sample_data.py --out_dir="):
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
# command line

@pytest.mark.parametrize("args, message", [
    (["--tasks=niah_single,bogus"], "unknown task 'bogus'"),
    (["--block_size=40"], "block_size=40 is smaller than niah_single's shortest document"),
    (["--num_tokens=0"], "num_tokens must be positive"),
    (["--num_tokns=5"], "unknown argument --num_tokns; did you mean --num_tokens"),
    (["--block_size=abc"], "--block_size expects an integer"),
    (["out"], "expected --key=value"),
])
def test_cli_errors(tmp_path, args, message):
    with pytest.raises(SystemExit) as e:
        sd.main([f"--out_dir={tmp_path}", "--num_tokens=1000", *args])
    msg = str(e.value.code)
    assert message in msg and msg.startswith("error:") and "\n" not in msg
    assert not os.path.exists(tmp_path / "meta.json")


def test_cli_runs_and_reports_errors_without_traceback(tmp_path):
    out = str(tmp_path / "data")
    cmd = [sys.executable, os.path.join(ROOT, "sample_data.py"), f"--out_dir={out}", "--block_size=256",
           "--num_tokens=2000", "--tasks=niah_multikey,json_kv"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sd.load_meta(out)["tasks"] == {"niah_multikey": 1.0, "json_kv": 1.0}
    r = subprocess.run(cmd[:-1] + ["--tasks=nope"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["error: unknown task 'nope'; choose from " + ", ".join(sd.TASKS)]
