"""
Synthetic retrieval tasks, the offline tokenizer, and the packed training corpus.

    python sample_data.py --out_dir=data/niah --block_size=256 --num_tokens=10000000
    python sample_data.py --out_dir=data/mix --block_size=256 --tasks=niah_single,niah_multikey:2,vt

Tasks (wording follows RULER's scripts/data/synthetic and HELMET's json_kv):
    niah_single      noise haystack, one adjective-noun key, one 7-digit value
    niah_multikey    the haystack is made of distractor needles with other keys
    niah_multivalue  4 values for the queried key, scored per value
    niah_multiquery  4 keys are asked for, the answer lists their 4 values
    vt               variable tracking: 1 chain of 4 hops hidden in the noise haystack
    json_kv          HELMET's JSON key-value retrieval with UUID keys and values

Every prompt is assembled in token space from pieces tokenized once, and has exactly the
requested number of tokens. The default tokenizer ('lengthgen') is a small tiktoken BPE built
here from the task text, so nothing is downloaded; a named tiktoken encoding ('gpt2', ...) works
when its files are in tiktoken's cache, and its ids are remapped to a compact range.

Writes to out_dir: train.bin / val.bin (uint16 token ids), train_mask.bin / val_mask.bin (uint8,
1 on answer tokens), tokenizer.json and meta.json (written last: no meta.json, no dataset).
"""

import base64
import difflib
import json
import os
import random
import re
import string
import sys
import uuid
import zlib
from dataclasses import dataclass

import numpy as np
import tiktoken
import tiktoken.load
from tqdm import tqdm

VERSION = 1
DEFAULT_TOKENIZER = 'lengthgen'

# -----------------------------------------------------------------------------
# task text

# RULER's 'repeat' haystack: this line, repeated. Lines are joined by newlines.
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n"
END = "\n\n"  # closes every training document (not part of the scored answer)

# RULER's niah template. RULER turns it singular when a single value is asked for
# ('Some' -> 'A', 'are' -> 'is', 'numbers' -> 'number'); the needle itself always says 'numbers'.
NIAH_HEAD = {
    False: "A special magic number is hidden within the following text. Make sure to memorize it. "
           "I will quiz you about the number afterwards.\n",
    True: "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
          "I will quiz you about the numbers afterwards.\n",
}
NEEDLE = "One of the special magic numbers for {key} is: {value}.\n"
# question + RULER's answer prefix; the answer continues with " 1234567" (or " v1, v2, v3, v4")
NIAH_QUESTION = {
    False: "What is the special magic number for {query} mentioned in the provided text? "
           "The special magic number for {query} mentioned in the provided text is",
    True: "What are all the special magic numbers for {query} mentioned in the provided text? "
          "The special magic numbers for {query} mentioned in the provided text are",
}

# RULER's variable tracking. Its answer prefix ends in "they are: "; the trailing space moves into
# the answer (" ABCDE FGHIJ ...") because a word carries its leading space in the tokenizer.
VT_HOPS = 4
VT_HEAD = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
VT_FIRST = "VAR {var} = {value}\n"
VT_HOP = "VAR {var} = VAR {prev}\n"
VT_QUESTION = ("Question: Find all variables that are assigned the value {value} in the text above. "
               "Answer: According to the chain(s) of variable assignment in the text above, "
               f"{VT_HOPS + 1} variables are assigned the value {{value}}, they are:")

# HELMET's json_kv (prompt from lost-in-the-middle's kv_retrieval; yes, it says "below").
# One record per line; the record stream is cut in token space like the noise haystack.
JSON_HEAD = "JSON data:\n{{\n"
JSON_RECORD = ' "{key}": "{value}",\n'
JSON_QUESTION = ('}}\n\nExtract the value corresponding to the specified key in the JSON object below.'
                 '\n\nKey: "{key}"\nCorresponding value:')

TEMPLATES = (NOISE, END, *NIAH_HEAD.values(), NEEDLE, *NIAH_QUESTION.values(), VT_HEAD, VT_FIRST,
             VT_HOP, VT_QUESTION, JSON_HEAD, JSON_RECORD, JSON_QUESTION)

def parse_template(template):
    """[(literal, slot name or None, lead)]: the fixed pieces of a template. A slot takes over the
    space in front of it (" fierce-lake"), which is where the tokenizer puts it too."""
    parsed = []
    for literal, name, _, _ in string.Formatter().parse(template):
        lead = ''
        if name is not None and literal.endswith(' '):
            literal, lead = literal[:-1], ' '
        parsed.append((literal, name, lead))
    return parsed

FIXED_TEXTS = [lit for t in TEMPLATES for lit, _, _ in parse_template(t) if lit]

# Keys are adjective-noun pairs like RULER's wonderwords keys ("fierce-lake"). No word is made only
# of the letters a-f, so no key can show up inside a hex UUID.
ADJECTIVES = sorted(set("""
able active agile ancient angry brave bright brisk broad calm careful cheap chilly clean clever
cloudy cold cool crisp curly curious damp dark deep dense distant dizzy dry dusty eager early easy
elegant empty endless exotic faint fair famous fancy fast fierce filthy firm flat fluffy fond frail
free fresh friendly frozen fuzzy gentle giant glad glossy golden good graceful grand great greedy
green grumpy happy hard harsh heavy hidden hollow honest huge humble hungry icy idle jolly juicy
keen kind large late lazy light little lively lonely long loud lucky mad magic mellow mighty mild
misty modern muddy narrow neat nervous new nice noble noisy odd old orange pale patient plain
polite poor proud purple quick quiet rapid rare raw red rich rigid ripe rough round royal rusty sad
salty scary sharp shiny short shy silent silly simple sleepy slow small smart smooth soft solid
sour spicy steady steep sticky stormy strange strict strong sturdy sunny sweet swift tall tame
tender thick thin tidy tiny tough true ugly vast warm weak wet white wide wild wise witty young zany
""".split()))
NOUNS = sorted(set("""
apple arch arrow badge bank barn basket beach bell bench berry bird blade boat bone book bottle
branch bread brick bridge brook brush bucket cable cactus camel candle canyon card carpet castle
cave chair chalk cherry circle cliff clock cloud coast coin comet copper coral cotton cradle crane
crown cup desert diamond dog door dragon drum eagle engine falcon feather fence field flame flower
forest fork fountain fox garden gate ghost glacier glass globe grape hammer harbor hat hill horse
island jacket jewel kettle key kite knife ladder lake lamp lantern leaf lemon lion meadow mirror
moon mountain needle nest ocean orchard otter owl paddle palace panda paper pearl pebble pencil
pepper piano pillow planet pond puzzle quarry rabbit raven ribbon river road robot rock rope rose
saddle sail sand shadow shell ship shovel silver sky snail spider spoon star stone storm sun table
tiger tower tree tunnel valley violin wagon wall whale window wolf wood yard zebra
""".split()))
WORD_KEYS = [f"{a}-{n}" for a in ADJECTIVES for n in NOUNS]

# -----------------------------------------------------------------------------
# held-out keys: a fixed hash of the key string puts ~1 in 10 keys (adjective-noun pairs, UUIDs,
# variable names alike) in the evaluation split. Training and validation data never use them.

def is_eval_key(key):
    return zlib.crc32(key.encode()) % 10 == 0

TRAIN_WORD_KEYS = [k for k in WORD_KEYS if not is_eval_key(k)]
EVAL_WORD_KEYS = [k for k in WORD_KEYS if is_eval_key(k)]

def eval_word_keys():
    """The held-out adjective-noun keys (the only key kind small enough to list)."""
    return frozenset(EVAL_WORD_KEYS)

# -----------------------------------------------------------------------------
# tokenizer

# cl100k's pre-tokenization, except that digits split into chunks of at most 2, not 3
# ("1234567" -> "12" "34" "56" "7"): a small model copies a value token through its residual
# stream far more reliably when there are 100 such tokens rather than 1000 (in a quick trial at
# width 128, chunks of 3 were copied right ~40-60% of the time after 1000 steps, chunks of 2 learned
# faster). Words carry their leading space (" grass"); punctuation swallows following newlines.
PAT_STR = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,2}+"""
           r"""| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")

class TokenizerError(ValueError):
    pass

class DataError(ValueError):
    pass

def _lengthgen_ranks():
    """Byte-level BPE ranks: all 256 bytes, then every regex piece the tasks can produce."""
    import regex  # tiktoken's own dependency; only needed to split the text into pieces
    texts = list(FIXED_TEXTS)
    texts += [" " + a for a in ADJECTIVES] + ["-" + n for n in NOUNS]  # " fierce" "-lake"
    texts += [f"{i:02d}" for i in range(100)]  # digit chunks
    texts += [" " + c for c in string.ascii_uppercase]  # variable names: " ABCDE" -> " A" "B" ...
    hexl = "abcdef"  # letter runs of UUIDs, up to 3 letters, with and without a leading '-'
    runs = list(hexl) + [a + b for a in hexl for b in hexl] + [a + b + c for a in hexl for b in hexl for c in hexl]
    texts += runs + ["-" + r for r in runs]
    pieces = set()
    for text in texts:
        pieces.update(p.encode() for p in regex.findall(PAT_STR, text))
    pieces -= {bytes([i]) for i in range(256)}
    # shorter pieces rank first: a piece that is reached by merging (a 2-digit chunk from single
    # digits, a 3-letter hex run from a 2-letter one) always finds its parts. tiktoken looks a whole
    # regex piece up directly, so every piece listed here is one token.
    ranks = {bytes([i]): i for i in range(256)}
    for p in sorted(pieces, key=lambda b: (len(b), b)):
        ranks[p] = len(ranks)
    return ranks

def _token_len(enc, i):
    try:
        return len(enc.decode_single_token_bytes(i))
    except KeyError:  # a gap in a named encoding's ids
        return 0

class Tokenizer:
    """A tiktoken Encoding plus, for named encodings, a map to compact ids 0..vocab_size-1."""

    def __init__(self, name, enc, compact_ids=None):
        self.name = name
        self.enc = enc
        self.raw_ids = compact_ids  # compact id -> id of the named encoding (None: already compact)
        if compact_ids is None:
            self.vocab_size = enc.max_token_value + 1
            self._to_compact = None
        else:
            self.vocab_size = len(compact_ids)
            self._to_compact = {r: i for i, r in enumerate(compact_ids)}
        raw = range(self.vocab_size) if compact_ids is None else compact_ids
        self.token_lens = [_token_len(enc, r) for r in raw]  # bytes per token
        self.parts = None  # pre-tokenized task pieces, filled on first use

    def encode(self, text):
        ids = self.enc.encode_ordinary(text)
        if self._to_compact is None:
            return ids
        try:
            return [self._to_compact[i] for i in ids]
        except KeyError as e:
            raise TokenizerError(f"text {text[:40]!r} uses token {e.args[0]} of '{self.name}', which is "
                                 "outside the compact task vocabulary") from None

    def decode(self, ids):
        ids = [int(i) for i in ids]
        if self.raw_ids is not None:
            ids = [self.raw_ids[i] for i in ids]
        return self.enc.decode(ids)

    def save(self, path):
        ranks = sorted(self.enc._mergeable_ranks.items(), key=lambda kv: kv[1])
        assert [r for _, r in ranks] == list(range(len(ranks))), "ranks must be contiguous"
        obj = dict(format='lengthgen-tokenizer', version=VERSION, name=self.name,
                   vocab_size=self.vocab_size, pat_str=self.enc._pat_str,
                   special_tokens=self.enc._special_tokens, compact_ids=self.raw_ids,
                   ranks=[base64.b64encode(b).decode() for b, _ in ranks])
        _write_atomic(path, json.dumps(obj).encode())

    @classmethod
    def load(cls, path):
        with open(path) as f:
            obj = json.load(f)
        if obj.get('format') != 'lengthgen-tokenizer':
            raise ValueError("not a lengthgen tokenizer file")
        ranks = {base64.b64decode(b): i for i, b in enumerate(obj['ranks'])}
        enc = tiktoken.Encoding(obj['name'], pat_str=obj['pat_str'], mergeable_ranks=ranks,
                                special_tokens=obj['special_tokens'])
        tok = cls(obj['name'], enc, obj['compact_ids'])
        if tok.vocab_size != obj['vocab_size']:
            raise ValueError(f"vocab_size {tok.vocab_size} != stored {obj['vocab_size']}")
        return tok

_BUILT = {}

def build_tokenizer(name=DEFAULT_TOKENIZER):
    """'lengthgen' (built here, offline) or the name of a tiktoken encoding that is cached locally."""
    if name in _BUILT:
        return _BUILT[name]
    if name == DEFAULT_TOKENIZER:
        enc = tiktoken.Encoding(name, pat_str=PAT_STR, mergeable_ranks=_lengthgen_ranks(), special_tokens={})
        tok = Tokenizer(name, enc)
    else:
        enc = _get_cached_encoding(name)
        tok = Tokenizer(name, enc, _compact_ids(name, enc))
    _BUILT[name] = tok
    return tok

def _get_cached_encoding(name):
    # tiktoken downloads missing files with requests (no timeout). Data preparation is offline by
    # design, so any fetch is turned into an immediate, clear error instead.
    if name not in tiktoken.list_encoding_names():
        raise TokenizerError(f"unknown tokenizer '{name}': use '{DEFAULT_TOKENIZER}' or one of "
                             f"{', '.join(tiktoken.list_encoding_names())}")
    def offline_read_file(blobpath):
        if "://" in blobpath:
            raise TokenizerError(f"tiktoken's files for '{name}' are not cached on this machine (no download "
                                 f"is attempted); use the default offline tokenizer: --tokenizer={DEFAULT_TOKENIZER}")
        return read_file(blobpath)
    read_file = tiktoken.load.read_file
    tiktoken.load.read_file = offline_read_file
    try:
        return tiktoken.get_encoding(name)
    finally:
        tiktoken.load.read_file = read_file

def _compact_ids(name, enc):
    """The ids of a named encoding that task text can produce, sorted: compact id = position."""
    ids = set()
    for text in FIXED_TEXTS:
        ids.update(enc.encode_ordinary(text))
    for chunk in enc.encode_ordinary_batch([" " + k for k in WORD_KEYS]):
        ids.update(chunk)
    # random parts: numbers, upper-case variable names, hex UUID chunks, in any of their forms
    pattern = re.compile(rb'^[ "\-]?(?:[0-9a-f]+|[A-Z]+)$')
    for i in range(enc.max_token_value + 1):
        try:
            if pattern.match(enc.decode_single_token_bytes(i)):
                ids.add(i)
        except KeyError:
            pass
    # and whatever assembled prompts put at piece boundaries (run with the raw ids)
    raw = Tokenizer(name, enc)
    rng = random.Random(0)
    for task in TASKS:
        m, doc_m = _minimums(task, raw)
        for split in ('train', 'eval'):
            for extra in (0, 37, 301):
                ids.update(make_document(task, raw, doc_m + extra, rng, split)[0])
                ex = make_example(task, raw, m + extra, rng, split)
                ids.update(ex.prompt + ex.answer)
    if len(ids) > 65535:
        raise TokenizerError(f"'{name}' needs {len(ids)} ids for the tasks; the corpus stores uint16")
    return sorted(ids)

def load_tokenizer(data_dir):
    path = os.path.join(data_dir, 'tokenizer.json')
    hint = _prepare_hint(data_dir)
    if not os.path.isfile(path):
        raise DataError(f"{path} is missing; generate the data with: {hint}")
    try:
        tok = Tokenizer.load(path)
    except Exception as e:  # any parse problem means the same thing: regenerate
        raise DataError(f"{path} is corrupt ({type(e).__name__}: {e}); regenerate with: {hint}") from None
    meta_path = os.path.join(data_dir, 'meta.json')
    if os.path.isfile(meta_path):
        try:
            with open(meta_path) as f:
                vocab_size = json.load(f).get('vocab_size')
        except ValueError:
            vocab_size = None
        if vocab_size is not None and vocab_size != tok.vocab_size:
            raise DataError(f"tokenizer mismatch in {data_dir}: tokenizer.json has {tok.vocab_size} tokens, "
                            f"meta.json says {vocab_size}; regenerate with: {hint}")
    return tok

# -----------------------------------------------------------------------------
# pre-tokenized pieces (one cache per tokenizer)

class _Parts:
    """Token ids of template pieces, keys and the noise line, tokenized once per tokenizer."""

    def __init__(self, tok):
        self.tok = tok
        self._memo = {}
        self._templates = {}
        self.noise = self.seg(NOISE)
        self.end = self.seg(END)
        # the key with the most tokens: min_length must cover every key
        self.worst_key = max(WORD_KEYS, key=lambda k: (len(self.seg(" " + k)), k))
        self.minimums = {}  # task -> (min prompt length, min document length)

    def seg(self, text):
        ids = self._memo.get(text)
        if ids is None:
            if len(self._memo) > 200_000:  # random values would grow the memo without bound
                self._memo.clear()
            ids = self._memo[text] = self.tok.encode(text)
        return ids

    def fill(self, template, **slots):
        """Tokens of template.format(**slots), tokenized one piece at a time."""
        parsed = self._templates.get(template)
        if parsed is None:
            parsed = self._templates[template] = parse_template(template)
        out = []
        for literal, name, lead in parsed:
            if literal:
                out += self.seg(literal)
            if name is not None:
                out += self.seg(lead + slots[name])
        return out

    def clean_cut(self, ids):
        """True if these ids, read back as text, tokenize to the same ids (a cut between pieces)."""
        return self.tok.encode(self.tok.decode(ids)) == ids

def _parts(tok):
    if tok.parts is None:
        tok.parts = _Parts(tok)
    return tok.parts

# -----------------------------------------------------------------------------
# random parts. rng=None asks for the worst case (most tokens), which min_length uses.

def _word_key(P, rng, split):
    if rng is None:
        return P.worst_key
    return rng.choice(EVAL_WORD_KEYS if split == 'eval' else TRAIN_WORD_KEYS)

def _number(rng, digits):
    if rng is None:
        return str(10 ** (digits - 1))
    return str(rng.randint(10 ** (digits - 1), 10 ** digits - 1))

def _var_name(rng, split):
    if rng is None:
        return "ABCDE"
    while True:  # RULER: 5 random upper-case letters
        name = ''.join(rng.choices(string.ascii_uppercase, k=5))
        if is_eval_key(name) == (split == 'eval'):
            return name

def _uuid(rng, split=None, digit_first=False):
    if rng is None:
        return "0a0a0a0a-0a0a-4a0a-8a0a-0a0a0a0a0a0a"  # digits and letters alternate: most pieces
    while True:
        u = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if digit_first:
            # the answer is " <value>": a leading letter would merge with that space and tokenize
            # differently than after the quote in the JSON
            u = str(rng.randrange(10)) + u[1:]
        if split is None or is_eval_key(u) == (split == 'eval'):
            return u

def _distinct(draw, k, rng):
    if rng is None:
        return [draw() for _ in range(k)]
    out = []
    while len(out) < k:
        x = draw()
        if x not in out:
            out.append(x)
    return out

# -----------------------------------------------------------------------------
# tasks. A draw fixes everything but the haystack: head, needles, question (tail), answer.

@dataclass
class _Draw:
    head: list
    needles: list      # token lists (lines), inserted in this order at random line boundaries
    tail: list         # question + answer prefix
    answer: list
    value_spans: list
    line: object       # () -> token ids of the next haystack line
    keys: list         # the key strings the question is about

    def overhead(self):
        return len(self.head) + len(self.tail) + sum(len(n) for n in self.needles)

@dataclass
class Example:
    task: str
    split: str
    prompt: list       # exactly `length` token ids, ending with the answer prefix
    answer: list       # the gold continuation (not including the END marker)
    values: list       # token ids of each gold value
    value_spans: list  # (start, end) of each value inside `answer`
    keys: list         # the key strings asked about

def _answer(P, parts, sep=None):
    """Concatenate value texts (each with its leading space) into the answer; each value's span
    leaves out tokens that hold only the leading space."""
    answer, spans = [], []
    for i, text in enumerate(parts):
        if i and sep:
            answer += P.seg(sep)
        ids = P.seg(text)
        lead, skip, nbytes = len(text) - len(text.lstrip(' ')), 0, 0
        while skip < len(ids) and nbytes + P.tok.token_lens[ids[skip]] <= lead:
            nbytes += P.tok.token_lens[ids[skip]]
            skip += 1
        spans.append((len(answer) + skip, len(answer) + len(ids)))
        answer += ids
    return answer, spans

def _join_keys(keys):
    # RULER: "a, b, c, and d"
    return keys[0] if len(keys) == 1 else ', '.join(keys[:-1]) + ', and ' + keys[-1]

def _draw_niah(P, rng, split, num_k=1, num_v=1, num_q=1, needle_haystack=False):
    keys = _distinct(lambda: _word_key(P, rng, split), num_k, rng)
    needles = [(k, _number(rng, 7)) for k in keys for _ in range(num_v)]
    if rng is not None:
        rng.shuffle(needles)
    queries = keys[:num_q] if rng is None else rng.sample(keys, num_q)
    if num_v > 1:
        # several values for one key: listed in the order they appear in the text, so that the
        # teacher-forced answer is determined by the prompt
        values = [v for _, v in needles]
    else:
        values = [next(v for k, v in needles if k == q) for q in queries]
    plural = len(values) > 1
    answer, spans = _answer(P, [" " + v for v in values], sep=",")
    if needle_haystack:
        # RULER's 'needle' haystack: distractor needles whose keys share no word with the real ones
        taken = {w for k in keys for w in k.split('-')}
        def line():
            while True:
                k = _word_key(P, rng, split)
                if taken.isdisjoint(k.split('-')):
                    return P.fill(NEEDLE, key=k, value=_number(rng, 7))
    else:
        line = lambda: P.noise
    return _Draw(head=P.fill(NIAH_HEAD[plural]),
                 needles=[P.fill(NEEDLE, key=k, value=v) for k, v in needles],
                 tail=P.fill(NIAH_QUESTION[plural], query=_join_keys(queries)),
                 answer=answer, value_spans=spans, line=line, keys=queries)

def _draw_vt(P, rng, split):
    names = _distinct(lambda: _var_name(rng, split), VT_HOPS + 1, rng)
    value = _number(rng, 5)
    chain = [P.fill(VT_FIRST, var=names[0], value=value)]
    chain += [P.fill(VT_HOP, var=names[i + 1], prev=names[i]) for i in range(VT_HOPS)]
    answer, spans = _answer(P, [" " + n for n in names])
    return _Draw(head=P.fill(VT_HEAD), needles=chain, tail=P.fill(VT_QUESTION, value=value),
                 answer=answer, value_spans=spans, line=lambda: P.noise, keys=names)

def _draw_json_kv(P, rng, split):
    key, value = _uuid(rng, split), _uuid(rng, digit_first=True)
    def line():
        while True:
            k = _uuid(rng, split)
            if k != key:
                return P.fill(JSON_RECORD, key=k, value=_uuid(rng, digit_first=True))
    answer, spans = _answer(P, [" " + value])
    return _Draw(head=P.fill(JSON_HEAD), needles=[P.fill(JSON_RECORD, key=key, value=value)],
                 tail=P.fill(JSON_QUESTION, key=key), answer=answer, value_spans=spans,
                 line=line, keys=[key])

TASKS = {
    'niah_single': lambda P, rng, split: _draw_niah(P, rng, split),
    'niah_multikey': lambda P, rng, split: _draw_niah(P, rng, split, needle_haystack=True),
    'niah_multivalue': lambda P, rng, split: _draw_niah(P, rng, split, num_v=4),
    'niah_multiquery': lambda P, rng, split: _draw_niah(P, rng, split, num_k=4, num_q=4),
    'vt': _draw_vt,
    'json_kv': _draw_json_kv,
}

def _check_task(task):
    if task not in TASKS:
        raise ValueError(f"unknown task '{task}'; choose from {', '.join(TASKS)}")

def _minimums(task, tok):
    """(fewest prompt tokens, fewest document tokens) of a task, cached per tokenizer. The prompt
    minimum is the template, needles and question without haystack; a document adds the longest
    answer and END. The worst-case draw is exact for 'lengthgen'; a named encoding can merge
    random values differently, so its bound also covers a sample of real draws."""
    P = _parts(tok)
    if task not in P.minimums:
        draws = [TASKS[task](P, None, 'eval')]
        if tok.name != DEFAULT_TOKENIZER:
            rng = random.Random(0)
            draws += [TASKS[task](P, rng, split) for split in ('train', 'eval') for _ in range(200)]
        prompt = max(d.overhead() for d in draws)
        P.minimums[task] = (prompt, prompt + max(len(d.answer) for d in draws) + len(P.end))
    return P.minimums[task]

def min_length(task, tok):
    """Fewest prompt tokens the task can have: its template, needles and question (no haystack)."""
    _check_task(task)
    return _minimums(task, tok)[0]

def min_doc_length(task, tok):
    """Fewest tokens of a training document (make_document): shortest prompt + answer + END."""
    _check_task(task)
    return _minimums(task, tok)[1]

# -----------------------------------------------------------------------------
# assembling a prompt of an exact length

def _haystack(P, line, budget):
    """`budget` tokens of haystack lines. The haystack is the tail of the line stream: the first
    line may be cut, and is redrawn if the cut would not survive a decode/encode round trip."""
    lines, left, tries = [], budget, 0
    while left > 0:
        ids = line()
        if len(ids) <= left:
            lines.append(ids)
            left -= len(ids)
            continue
        part = ids[len(ids) - left:]
        if P.clean_cut(part):
            lines.insert(0, part)
            break
        tries += 1
        if tries > 1000:
            raise RuntimeError(f"cannot cut a haystack line to {left} tokens with '{P.tok.name}'")
    return lines

def _assemble(P, d, length, rng):
    lines = _haystack(P, d.line, length - d.overhead())
    # needle depth: each needle goes to a uniformly random line boundary (0 = top, len = bottom);
    # sorted boundaries keep the needles' order (vt's chain must read top to bottom)
    slots = sorted(rng.randint(0, len(lines)) for _ in d.needles)
    out, j = list(d.head), 0
    for i, ids in enumerate(lines):
        while j < len(slots) and slots[j] == i:
            out += d.needles[j]
            j += 1
        out += ids
    for ids in d.needles[j:]:
        out += ids
    out += d.tail
    assert len(out) == length, (len(out), length)
    return out

def _as_random(rng):
    if isinstance(rng, random.Random):
        return rng
    if isinstance(rng, np.random.Generator):
        return random.Random(int(rng.integers(2 ** 63)))
    if isinstance(rng, (int, str)):
        return random.Random(rng)
    raise TypeError(f"rng must be a random.Random, a numpy Generator or a seed, got {type(rng).__name__}")

def _fitting_draw(task, P, rng, split, room):
    """Draw until the non-haystack part fits in room(draw) tokens. With 'lengthgen' the first draw
    always fits when the length is at least the minimum; a named encoding can tokenize a random
    value into more tokens than min_length assumed."""
    for _ in range(100):
        d = TASKS[task](P, rng, split)
        if d.overhead() <= room(d):
            return d
    raise RuntimeError(f"{task}: could not draw an example that fits")

def make_example(task, tok, length, rng, split='eval'):
    """A prompt of exactly `length` tokens (instruction + haystack with needles + question + answer
    prefix), and its gold answer. split='eval' uses only held-out keys, 'train' never does."""
    _check_task(task)
    if split not in ('train', 'eval'):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    m = min_length(task, tok)
    if length < m:
        raise ValueError(f"{task} needs at least {m} prompt tokens (its template), got length={length}")
    P, rng = _parts(tok), _as_random(rng)
    d = _fitting_draw(task, P, rng, split, lambda d: length)
    prompt = _assemble(P, d, length, rng)
    return Example(task=task, split=split, prompt=prompt, answer=d.answer,
                   values=[d.answer[s:e] for s, e in d.value_spans], value_spans=d.value_spans, keys=d.keys)

def eval_examples(task, tok, length, n, seed=0):
    """n held-out examples; the seed stream ('eval:...') never coincides with the corpus' streams."""
    rng = random.Random(f"eval:{seed}:{task}:{length}")
    return [make_example(task, tok, length, rng, 'eval') for _ in range(n)]

def make_document(task, tok, total_len, rng, split='train'):
    """A training document of exactly total_len tokens: prompt + answer + END, and its loss mask
    (uint8 list, 1 exactly on the answer tokens: the targets the model is trained to predict)."""
    _check_task(task)
    m = min_doc_length(task, tok)
    if total_len < m:
        raise ValueError(f"{task} documents need at least {m} tokens, got total_len={total_len}")
    P, rng = _parts(tok), _as_random(rng)
    room = lambda d: total_len - len(d.answer) - len(P.end)
    d = _fitting_draw(task, P, rng, split, room)
    prompt = _assemble(P, d, room(d), rng)
    ids = prompt + d.answer + P.end
    mask = [0] * len(prompt) + [1] * len(d.answer) + [0] * len(P.end)
    return ids, mask

# -----------------------------------------------------------------------------
# the packed corpus

CHUNK_ROWS = 256  # rows generated from one seed; chunks are independent, so the bytes never
                  # depend on how the work is split

def _pack_chunk(tok, tasks, weights, block_size, n_rows, rng):
    """n_rows rows of block_size tokens, each filled with whole documents of random lengths;
    the space left at the end of a row (too short for any document) is noise filler, mask 0."""
    P = _parts(tok)
    doc_min = [min_doc_length(t, tok) for t in tasks]
    filler = (P.noise * (block_size // len(P.noise) + 1))[:block_size]
    ids = np.empty(n_rows * block_size, dtype=np.uint16)
    mask = np.zeros(n_rows * block_size, dtype=np.uint8)
    for r in range(n_rows):
        pos, left = r * block_size, block_size
        while True:
            fits = [i for i in range(len(tasks)) if doc_min[i] <= left]
            if not fits:
                break
            i = rng.choices(fits, [weights[i] for i in fits])[0]
            n = rng.randint(doc_min[i], left)
            doc, doc_mask = make_document(tasks[i], tok, n, rng, 'train')
            ids[pos:pos + n] = doc
            mask[pos:pos + n] = doc_mask
            pos, left = pos + n, left - n
        ids[pos:pos + left] = filler[:left]
    return ids, mask

def _write_split(tok, tasks, weights, block_size, n_rows, seed, split, ids_path, mask_path, progress):
    """Stream n_rows rows (+1 trailing filler token, so y = stream[i*T+1:(i+1)*T+1] exists)."""
    with open(ids_path, 'wb') as f_ids, open(mask_path, 'wb') as f_mask, \
            tqdm(total=n_rows * block_size, unit='tok', unit_scale=True, desc=split, disable=not progress) as bar:
        for c, start in enumerate(range(0, n_rows, CHUNK_ROWS)):
            rows = min(CHUNK_ROWS, n_rows - start)
            rng = random.Random(f"{seed}:{split}:{c}")
            ids, mask = _pack_chunk(tok, tasks, weights, block_size, rows, rng)
            ids.tofile(f_ids)
            mask.tofile(f_mask)
            bar.update(rows * block_size)
        np.array(_parts(tok).noise[:1], dtype=np.uint16).tofile(f_ids)
        np.zeros(1, dtype=np.uint8).tofile(f_mask)
    return n_rows * block_size + 1

def parse_tasks(tasks, task_weights=None):
    """'a,b:2' / ['a', 'b'] / {'a': 1, 'b': 2} -> (names, weights)."""
    if isinstance(tasks, str):
        tasks = [t.strip() for t in tasks.split(',') if t.strip()]
    if isinstance(tasks, dict):
        names, weights = list(tasks), [tasks[t] for t in tasks]
    else:
        names, weights = [], []
        for t in tasks:
            name, _, w = t.partition(':')
            names.append(name)
            try:
                weights.append(float(w) if w else 1.0)
            except ValueError:
                raise ValueError(f"bad task weight in '{t}' (expected name:number)") from None
    if task_weights is not None:
        if len(task_weights) != len(names):
            raise ValueError(f"{len(task_weights)} task_weights for {len(names)} tasks")
        weights = list(task_weights)
    if not names:
        raise ValueError("no tasks given")
    for t in names:
        _check_task(t)
    if len(set(names)) != len(names):
        raise ValueError(f"a task is listed twice: {names}")
    if any(not w > 0 for w in weights):
        raise ValueError(f"task weights must be positive, got {weights}")
    return names, [float(w) for w in weights]

def _write_atomic(path, data):
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:
        f.write(data)
    os.replace(tmp, path)

def prepare(out_dir, block_size, num_tokens, tasks=('niah_single',), task_weights=None, seed=1337,
            tokenizer=DEFAULT_TOKENIZER, val_tokens=None, progress=True):
    """Write the packed corpus to out_dir (see the module docstring). Same arguments, same bytes.
    meta.json is removed first and written last, so a folder with meta.json is always complete."""
    names, weights = parse_tasks(tasks, task_weights)
    if int(block_size) != block_size or int(num_tokens) != num_tokens:
        raise ValueError(f"block_size and num_tokens must be integers, got {block_size}, {num_tokens}")
    block_size, num_tokens = int(block_size), int(num_tokens)
    if num_tokens <= 0:
        raise ValueError(f"num_tokens must be positive, got {num_tokens}")
    if val_tokens is not None and val_tokens <= 0:
        raise ValueError(f"val_tokens must be positive, got {val_tokens}")
    tok = build_tokenizer(tokenizer)
    for t in names:
        m = min_doc_length(t, tok)
        if block_size < m:
            raise ValueError(f"block_size={block_size} is smaller than {t}'s shortest document ({m} tokens)")
    val_tokens = val_tokens or max(block_size, num_tokens // 50)
    rows = {'train': max(1, num_tokens // block_size), 'val': max(1, val_tokens // block_size)}

    os.makedirs(out_dir, exist_ok=True)
    final = {f: os.path.join(out_dir, f) for f in
             ('train.bin', 'train_mask.bin', 'val.bin', 'val_mask.bin', 'tokenizer.json', 'meta.json')}
    if os.path.exists(final['meta.json']):
        os.remove(final['meta.json'])  # the old data stops being valid the moment we start
    tmp = {f: p + '.tmp' for f, p in final.items()}
    try:
        n = {}
        for split in ('train', 'val'):
            n[split] = _write_split(tok, names, weights, block_size, rows[split], seed, split,
                                    tmp[f'{split}.bin'], tmp[f'{split}_mask.bin'], progress)
        tok.save(tmp['tokenizer.json'])
        for f in ('train.bin', 'train_mask.bin', 'val.bin', 'val_mask.bin', 'tokenizer.json'):
            os.replace(tmp[f], final[f])
        meta = dict(version=VERSION, tokenizer=tok.name, vocab_size=tok.vocab_size, block_size=block_size,
                    tasks=dict(zip(names, weights)), seed=seed, num_tokens=num_tokens,
                    train_tokens=n['train'], val_tokens=n['val'], dtype='uint16', mask_dtype='uint8',
                    train_bin='train.bin', val_bin='val.bin', train_mask='train_mask.bin',
                    val_mask='val_mask.bin', tokenizer_file='tokenizer.json',
                    min_length={t: min_length(t, tok) for t in names}, end_marker=END,
                    mask_note="mask[t] = 1 on answer tokens: the target stream[t] counts in the loss")
        _write_atomic(final['meta.json'], json.dumps(meta, indent=2).encode())
    except BaseException:
        for p in tmp.values():
            if os.path.exists(p):
                os.remove(p)
        raise
    return meta

def _prepare_hint(data_dir, block_size='<T>', num_tokens='<N>'):
    return f"python sample_data.py --out_dir={data_dir} --block_size={block_size} --num_tokens={num_tokens}"

def load_meta(data_dir):
    """meta.json of a complete corpus, after checking every file it names is there and whole."""
    path = os.path.join(data_dir, 'meta.json')
    hint = _prepare_hint(data_dir)
    if not os.path.isfile(path):
        raise DataError(f"no dataset in {data_dir} (meta.json is missing); generate it with: {hint}")
    try:
        with open(path) as f:
            meta = json.load(f)
        hint = _prepare_hint(data_dir, meta['block_size'], meta['num_tokens'])
        files = {meta[k]: (meta[f'{s}_tokens'] * nbytes) for s in ('train', 'val')
                 for k, nbytes in ((f'{s}_bin', 2), (f'{s}_mask', 1))}
        files[meta['tokenizer_file']] = None
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path} is corrupt ({type(e).__name__}: {e}); regenerate with: {hint}") from None
    if meta.get('version') != VERSION:
        raise DataError(f"{path} has version {meta.get('version')}, this code writes {VERSION}; regenerate with: {hint}")
    for name, size in files.items():
        p = os.path.join(data_dir, name)
        if not os.path.isfile(p):
            raise DataError(f"{p} is missing; regenerate with: {hint}")
        if size is not None and os.path.getsize(p) != size:
            raise DataError(f"{p} has {os.path.getsize(p)} bytes, expected {size} (truncated?); regenerate with: {hint}")
    return meta

# -----------------------------------------------------------------------------
# command line

def _parse_int(key, val):
    try:
        return int(val)  # also takes 10_000_000
    except ValueError:
        pass
    try:
        f = float(val)  # 1e7
        if f.is_integer():
            return int(f)
    except ValueError:
        pass
    raise SystemExit(f"error: --{key} expects an integer, got '{val}'")

def main(argv=None):
    args = dict(out_dir=None, block_size=256, num_tokens=10_000_000, tasks='niah_single', seed=1337,
                tokenizer=DEFAULT_TOKENIZER, val_tokens=None)
    ints = {'block_size', 'num_tokens', 'seed', 'val_tokens'}
    for arg in sys.argv[1:] if argv is None else argv:
        key, eq, val = arg.removeprefix('--').partition('=')
        key = key.replace('-', '_')
        if not arg.startswith('--') or not eq:
            raise SystemExit(f"error: expected --key=value, got '{arg}'")
        if key not in args:
            close = difflib.get_close_matches(key, args, n=2)
            raise SystemExit(f"error: unknown argument --{key}" +
                             (f"; did you mean {' or '.join('--' + c for c in close)}?" if close else
                              f"; valid: {', '.join('--' + k for k in args)}"))
        if key in ints:
            val = _parse_int(key, val)
        args[key] = val
    if not args['out_dir']:
        raise SystemExit("error: --out_dir=... is required, e.g. python sample_data.py --out_dir=data/niah")
    try:
        meta = prepare(**args)
    except ValueError as e:  # includes TokenizerError
        raise SystemExit(f"error: {e}") from None
    print(f"wrote {meta['train_tokens']:,} train and {meta['val_tokens']:,} val tokens to {args['out_dir']} "
          f"(vocab {meta['vocab_size']}, tasks {meta['tasks']})")

if __name__ == '__main__':
    main()
