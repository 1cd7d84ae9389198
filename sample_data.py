"""
Synthetic retrieval tasks, the offline tokenizer, and the packed training corpus.

    python sample_data.py --data_dir=data/niah --block_size=256 --num_tokens=10000000
    python sample_data.py --data_dir=data/mix --block_size=256 --tasks=niah_single,niah_multikey:2,vt

Tasks (wording follows RULER's scripts/data/synthetic and HELMET's json_kv):
    niah_single      noise haystack, one adjective-noun key, one 8-digit value
    niah_multikey    the haystack is made of distractor needles with other keys
    niah_multivalue  4 values for the queried key, scored per value
    niah_multiquery  4 keys are asked for, the answer lists their 4 values
    vt               variable tracking: 1 chain of 4 hops hidden in the noise haystack
    json_kv          HELMET's JSON key-value retrieval with UUID keys and values
    mqar             Zoology's multi-query associative recall: 4 single-token key-value pairs
                     open the document, 2 queries close it (the one task here that needs the key)
    mqar_haystack    mqar's pairs at random depths in a haystack whose lines are, with probability
                     `distractors`, pairs of other keys: their number grows with the length

Lengths count whole documents: a training document and an evaluation example of length L both
hold L tokens of prompt + answer + END, so an example at 1x block_size is as long as the longest
training document. The prompt (instruction, haystack with needles, question, answer prefix) is
assembled in token space; min_length(task, tok) is the fewest tokens a task needs (no haystack).
The tokenizer, 'lengthgen', is a small tiktoken BPE built here from the task text (offline).

Writes to data_dir: train.bin / val.bin (uint16 token ids), train_mask.bin / val_mask.bin (uint8,
mask[t] = 1 when the target stream[t] is an answer token), tokenizer.json and meta.json (written
last: no meta.json, no dataset). Same settings and data_seed, same bytes. meta.json also holds the
histogram of how far back each training answer token's value sits: `--reach=R` prints the share
beyond R tokens, the answers that a stack of sliding-window layers reaching R tokens cannot copy.
"""

from configurator import configure, items, settings_of  # first: a script's start-up (configurator.startup)

import base64
import functools
import hashlib
import json
import math
import os
import random
import shlex
import shutil
import string
import sys
import uuid
import zlib
import dataclasses
from dataclasses import dataclass

import numpy as np
import tiktoken
from tqdm import tqdm

from base import rundir

VERSION = 3         # the corpus format (meta.json, the token files); a corpus of another is refused
META = 'meta.json'  # in a corpus: its settings and checksums, written last (its tokenizer: rundir.TOKENIZER)

# -----------------------------------------------------------------------------
# command line settings: python sample_data.py --key=value ...; --help lists them
data_dir = ''                   # the corpus folder (required): train.py's data_dir
block_size = 256              # tokens per row = the longest training document
num_tokens = 10_000_000       # training tokens
tasks = 'niah_single'         # task[:weight],... e.g. niah_single,niah_multikey:2,vt
data_seed = 1337              # seeds the corpus (train.py's seed is for init and batches)
val_tokens = 0                # validation tokens; 0: max(block_size, num_tokens // 50)
min_doc_len = 0               # shortest training document in tokens; 0: each task's own minimum
distractors = 0.0             # mqar_haystack only: the chance that a haystack line is a distractor pair
reach = 0                     # report the share of training answers farther than this from their
                              # value (train.py prints it for its window layers' reach)

# -----------------------------------------------------------------------------
# task text

# RULER's 'repeat' haystack: this line, repeated. Lines are joined by newlines.
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n"
END = "\n\n"  # closes every document and example (not part of the scored answer)

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

FIXED_TEXTS = [literal for t in TEMPLATES for literal, *_ in string.Formatter().parse(t) if literal]

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

# -----------------------------------------------------------------------------
# tokenizer

# cl100k's pre-tokenization, except that digits split into chunks of at most 2, not 3
# ("1234567" -> "12" "34" "56" "7"): a small model copies a value token through its residual
# stream far more reliably when there are 100 such tokens rather than 1000 (in a quick trial at
# width 128, chunks of 3 were copied right ~40-60% of the time after 1000 steps, chunks of 2 learned
# faster). Words carry their leading space (" grass"); punctuation swallows following newlines.
PAT_STR = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,2}+"""
           r"""| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")

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

class Tokenizer:
    """A tiktoken BPE with ids 0..vocab_size-1, saved with the data and every run."""
    VERSION = 2    # tokenizer.json's layout, counted apart from the corpus format

    def __init__(self, name, ranks, pat_str=PAT_STR):
        self.name = name
        self.enc = tiktoken.Encoding(name, pat_str=pat_str, mergeable_ranks=ranks, special_tokens={})
        self.vocab_size = len(ranks)

    def encode(self, text):
        return self.enc.encode_ordinary(text)

    def decode(self, ids):
        return self.enc.decode([int(i) for i in ids])

    def save(self, path):
        ranks = sorted(self.enc._mergeable_ranks, key=self.enc._mergeable_ranks.get)
        obj = dict(format='lengthgen-tokenizer', version=self.VERSION, name=self.name,
                   vocab_size=self.vocab_size, pat_str=self.enc._pat_str,
                   ranks=[base64.b64encode(b).decode() for b in ranks])
        rundir.write_atomic(path, json.dumps(obj).encode())

    @classmethod
    def load(cls, path):
        with open(path) as f:
            obj = json.load(f)
        if obj.get('format') != 'lengthgen-tokenizer':
            raise ValueError("not a lengthgen tokenizer file")
        return cls(obj['name'], {base64.b64decode(b): i for i, b in enumerate(obj['ranks'])}, obj['pat_str'])

@functools.cache
def build_tokenizer():
    """The one tokenizer, 'lengthgen': tiktoken's Encoding over ranks built here from the task text,
    offline (tiktoken's named encodings download their files at first use)."""
    return Tokenizer('lengthgen', _lengthgen_ranks())

def load_tokenizer(data_dir):
    """The tokenizer.json of a corpus or a run dir."""
    path = os.path.join(data_dir, rundir.TOKENIZER)
    if not os.path.isfile(path):
        raise DataError(f"{path} is missing; generate the data with: {regenerate(data_dir)}")
    try:
        return Tokenizer.load(path)
    except Exception as e:  # any parse problem means the same thing: regenerate
        raise DataError(f"{path} is corrupt ({type(e).__name__}: {e}); regenerate with: "
                        f"{regenerate(data_dir)}") from None

# -----------------------------------------------------------------------------
# random parts

def _word_key(rng, split):
    return rng.choice(EVAL_WORD_KEYS if split == 'eval' else TRAIN_WORD_KEYS)

# RULER's needle values have 7 digits; ours have 8, so that every value token is a 2-digit chunk.
# With 7 the value ends in a lone digit ("12" "34" "56" "7"), and in the main run's setting 3 of 4
# seeds were at 0.1-0.2 accuracy at 1x after 2500 steps: the two we looked into copied the 2-digit
# tokens (86-100% right) and guessed the lone digit (12-22%). With 8, two seeds (no dropout) were
# at 0.50 and 0.53 after 500 steps, where 7 digits gave 0.03 and 0.00.
VALUE_DIGITS = 8

def _number(rng, digits):
    return str(rng.randint(10 ** (digits - 1), 10 ** digits - 1))

def _var_name(rng, split):
    while True:  # RULER: 5 random upper-case letters
        name = ''.join(rng.choices(string.ascii_uppercase, k=5))
        if is_eval_key(name) == (split == 'eval'):
            return name

def _uuid(rng, split=None, digit_first=False):
    while True:
        u = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if digit_first:
            # the answer is " <value>": a leading letter would merge with that space and tokenize
            # differently than after the quote in the JSON
            u = str(rng.randrange(10)) + u[1:]
        if split is None or is_eval_key(u) == (split == 'eval'):
            return u

LONGEST_UUID = "0a0a0a0a-0a0a-4a0a-8a0a-0a0a0a0a0a0a"  # one token per character, the most a UUID can have

def _distinct(draw, k):
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
    values: list
    keys: list         # the key strings the question is about
    line: object       # () -> token ids of the next haystack line
    clear: int = 0     # the fewest haystack tokens between the last needle and the tail

    def overhead(self):
        return len(self.head) + len(self.tail) + sum(len(n) for n in self.needles)

@dataclass
class Example:
    task: str
    split: str
    prompt: list       # token ids, ending with the answer prefix
    answer: list       # the gold continuation; the END marker that follows it is not part of it
    values: list       # each value's own tokens (no separator, no lone leading space), as in the prompt
    value_spans: list  # (start, end) of each value in `answer` with its separator and leading space:
                       # the scored tokens and training targets. They tile the answer (scoring every
                       # span scores every answer token), except in mqar, whose answer also holds
                       # the next queries' keys: given, not predicted
    keys: list         # the key strings asked about

def _answer(tok, texts, sep=''):
    """(answer, value_spans, values) for value texts (each with its leading space) joined by sep."""
    answer, spans, values = [], [], []
    for i, text in enumerate(texts):
        start = len(answer)
        if i:
            answer += tok.encode(sep)
        ids = tok.encode(text)
        answer += ids
        spans.append((start, len(answer)))
        values.append(ids[1:] if tok.decode(ids[:1]) == ' ' else ids)
    return answer, spans, values

def _join_keys(keys):
    # RULER: "a, b, c, and d"
    return keys[0] if len(keys) == 1 else ', '.join(keys[:-1]) + ', and ' + keys[-1]

def _draw_niah(tok, rng, split, num_k=1, num_v=1, num_q=1, needle_haystack=False):
    keys = _distinct(lambda: _word_key(rng, split), num_k)
    needles = [(k, _number(rng, VALUE_DIGITS)) for k in keys for _ in range(num_v)]
    rng.shuffle(needles)
    queries = rng.sample(keys, num_q)
    if num_v > 1:
        # several values for one key: listed in the order they appear in the text, so that the
        # teacher-forced answer is determined by the prompt
        values = [v for _, v in needles]
    else:
        values = [next(v for k, v in needles if k == q) for q in queries]
    plural = len(values) > 1
    if needle_haystack:
        # RULER's 'needle' haystack: distractor needles whose keys share no word with the real ones
        taken = {w for k in keys for w in k.split('-')}
        def line():
            while True:
                k = _word_key(rng, split)
                if taken.isdisjoint(k.split('-')):
                    return tok.encode(NEEDLE.format(key=k, value=_number(rng, VALUE_DIGITS)))
    else:
        noise = tok.encode(NOISE)
        line = lambda: noise
    return _Draw(tok.encode(NIAH_HEAD[plural]), [tok.encode(NEEDLE.format(key=k, value=v)) for k, v in needles],
                 tok.encode(NIAH_QUESTION[plural].format(query=_join_keys(queries))),
                 *_answer(tok, [" " + v for v in values], sep=","), keys=queries, line=line)

def _draw_vt(tok, rng, split):
    names = _distinct(lambda: _var_name(rng, split), VT_HOPS + 1)
    value = _number(rng, 5)
    chain = [VT_FIRST.format(var=names[0], value=value)]
    chain += [VT_HOP.format(var=names[i + 1], prev=names[i]) for i in range(VT_HOPS)]
    noise = tok.encode(NOISE)
    return _Draw(tok.encode(VT_HEAD), [tok.encode(c) for c in chain], tok.encode(VT_QUESTION.format(value=value)),
                 *_answer(tok, [" " + n for n in names]), keys=names, line=lambda: noise)

def _draw_json_kv(tok, rng, split, key=None, value=None):
    key, value = key or _uuid(rng, split), value or _uuid(rng, digit_first=True)
    def line():
        while True:
            k = _uuid(rng, split)
            if k != key:
                return tok.encode(JSON_RECORD.format(key=k, value=_uuid(rng, digit_first=True)))
    return _Draw(tok.encode(JSON_HEAD.format()), [tok.encode(JSON_RECORD.format(key=key, value=value))],
                 tok.encode(JSON_QUESTION.format(key=key)), *_answer(tok, [" " + value]), keys=[key], line=line)

# MQAR (Zoology's multi-query associative recall) with single-token keys and values: the document
# opens with MQAR_PAIRS pairs, a key token then its value token (" brave" "42"), the haystack
# follows, and the document closes with MQAR_QUERIES of those keys again, each followed by its value
# (the targets). Unlike niah_single, the answer depends on the key: the same document with the
# queried key swapped for an absent one has no right answer. Keys are the adjectives, values the
# two-digit tokens; within a document both are distinct. Keys are not held out for evaluation: a key
# token never seen in training has an untrained embedding, and in a trial (2 layers, width 64, 800
# steps) that alone took the accuracy from 0.23 on training keys to 0.01 on held-out ones, before
# any key matching was learned. The evaluation examples are fresh draws all the same (their own seed
# stream; 8 keys and 8 values in random pairs), so none can be memorized.
MQAR_PAIRS = 4      # Zoology's smallest setting (4 pairs at 64 tokens); with 8, trials stayed near chance
                    # for 2500 steps
# Fewer queries than pairs: when every key is asked, the teacher-forced answer has named all other
# values by the last query, and elimination answers it without the key. A model trained with 4 of 4
# scored 0.49 with the keys and 0.49 with them absent (the probe; elimination alone gives 0.52).
MQAR_QUERIES = 2
MQAR_KEYS = [a for a in ADJECTIVES if a != 'green']    # " green" is in the noise haystack

def _draw_mqar(tok, rng, split, distractors=None):
    keys, values = rng.sample(MQAR_KEYS, MQAR_PAIRS), rng.sample(range(100), MQAR_PAIRS)
    key_ids = [tok.encode(" " + k) for k in keys]
    value_ids = [tok.encode(f"{v:02d}") for v in values]
    pairs = [i for k, v in zip(key_ids, value_ids) for i in k + v]
    asked = rng.sample(range(MQAR_PAIRS), MQAR_QUERIES)
    # the prompt ends with the first query's key; the answer goes on with its value, then key, value ...
    answer, spans = [], []
    for j, q in enumerate(asked):
        if j:
            answer += key_ids[q]
        spans.append((len(answer), len(answer) + len(value_ids[q])))
        answer += value_ids[q]
    noise = tok.encode(NOISE)
    given = (key_ids[asked[0]], answer, spans, [value_ids[q] for q in asked])
    if distractors is None:                                  # mqar: the pairs open the document
        return _Draw(pairs, [], *given, keys=[keys[q] for q in asked], line=lambda: noise)
    # mqar_haystack: each pair is a needle (a uniformly random line boundary, as niah's), and each
    # haystack line is, with probability `distractors`, a pair of a key that is none of the document's
    # (so every asked key occurs once before its query) and a value that is none of its values (so a
    # value's only copy is its pair's); otherwise the noise sentence. Lines are i.i.d., so the count of
    # distractors grows in proportion to the length.
    other_keys = [k for k in MQAR_KEYS if k not in keys]
    other_values = [v for v in range(100) if v not in values]
    def line():
        if rng.random() < distractors:
            return tok.encode(" " + rng.choice(other_keys)) + tok.encode(f"{rng.choice(other_values):02d}")
        return noise
    return _Draw([], [k + v for k, v in zip(key_ids, value_ids)], *given, keys=[keys[q] for q in asked],
                 line=line, clear=MQAR_CLEAR)

# mqar_haystack: no pair within this many tokens of the question, beyond the reach of the short
# convolutions (2 layers x 3 positions reach 6, 4 layers 12). Without it a local layer could copy 31%
# of the training answers (documents of 40..64 tokens, distractors=0.2: 3000 drawn, distance <= 6)
MQAR_CLEAR = 12

TASKS = {
    'niah_single': lambda tok, rng, split: _draw_niah(tok, rng, split),
    'niah_multikey': lambda tok, rng, split: _draw_niah(tok, rng, split, needle_haystack=True),
    'niah_multivalue': lambda tok, rng, split: _draw_niah(tok, rng, split, num_v=4),
    'niah_multiquery': lambda tok, rng, split: _draw_niah(tok, rng, split, num_k=4, num_q=4),
    'vt': _draw_vt,
    'json_kv': _draw_json_kv,
    'mqar': _draw_mqar,
    'mqar_haystack': _draw_mqar,      # with distractors (from _draw), so never None: the haystack layout
}
DISTRACTED = ('mqar_haystack',)     # the tasks that read `distractors` (a corpus setting: meta.json keeps it)

def _draw(task, tok, rng, split, distractors=0.0):
    return TASKS[task](tok, rng, split, distractors) if task in DISTRACTED else TASKS[task](tok, rng, split)

@functools.cache
def min_length(task, tok):
    """Fewest tokens of an example or document: head, needles, question, answer and END, no
    haystack. Every key, number and variable name has a fixed number of tokens, so any draw gives
    the count; a UUID's count varies, so json_kv is measured with the longest one."""
    if task == 'json_kv':
        draw = _draw_json_kv(tok, random.Random(0), 'eval', key=LONGEST_UUID, value=LONGEST_UUID)
    else:
        draw = _draw(task, tok, random.Random(0), 'eval')
    return draw.overhead() + draw.clear + len(draw.answer) + len(tok.encode(END))

# -----------------------------------------------------------------------------
# assembling an example of an exact length

def _assemble(draw, length, rng):
    """head + haystack with needles + tail: `length` tokens. The haystack is the tail of the line
    stream, so its first line may be cut; every cut survives a decode/encode round trip (checked on
    all cuts of UUID letter runs up to 6 letters and on the other lines)."""
    lines, budget = [], length - draw.overhead()
    while budget > 0:
        ids = draw.line()
        if len(ids) > budget:
            lines.insert(0, ids[len(ids) - budget:])
            break
        lines.append(ids)
        budget -= len(ids)
    # needle depth: each needle goes to a uniformly random line boundary (0 = top, len = bottom), of
    # those with at least draw.clear haystack tokens below; sorted boundaries keep the needles' order
    # (vt's chain must read top to bottom)
    last, below = len(lines), 0
    while below < draw.clear:
        last -= 1
        below += len(lines[last])
    slots = sorted(rng.randint(0, last) for _ in draw.needles)
    for slot, needle in reversed(list(zip(slots, draw.needles))):  # from the bottom: slots stay valid
        lines.insert(slot, needle)
    out = draw.head + [i for ids in lines for i in ids] + draw.tail
    assert len(out) == length, (len(out), length)
    return out

def make_example(task, tok, length, rng, split='eval', distractors=0.0, pair_distance=None):
    """An example of exactly `length` tokens counted like a training document: prompt + answer +
    END. rng: a random.Random. split='eval' uses only held-out keys, 'train' never does.
    distractors: mqar_haystack's share of distractor lines (the corpus' setting). pair_distance (mqar
    only): the pairs moved from the document's start to end this many haystack tokens before the
    question, the haystack before them (None: at the start, as in training)."""
    assert split in ('train', 'eval'), split
    if length < min_length(task, tok) + (pair_distance or 0):
        raise ValueError(f"{task} needs at least {min_length(task, tok) + (pair_distance or 0)} tokens, got "
                         f"length={length}")
    draw = _draw(task, tok, rng, split, distractors)
    if pair_distance is not None:      # head (the pairs) + d haystack tokens join the tail: the haystack comes first
        assert task == 'mqar', task
        gap = _assemble(dataclasses.replace(draw, head=[], tail=[]), pair_distance, rng)
        draw = dataclasses.replace(draw, head=[], tail=draw.head + gap + draw.tail)
    prompt = _assemble(draw, length - len(draw.answer) - len(tok.encode(END)), rng)
    return Example(task, split, prompt, draw.answer, draw.values, draw.value_spans, draw.keys)

def eval_examples(task, tok, length, n, seed=0, distractors=0.0, pair_distance=None, stream='eval'):
    """n held-out examples; the seed stream ('eval:...') never coincides with the corpus' streams.
    distractors: as the run's corpus (mqar_haystack). pair_distance: mqar's pairs moved (make_example).
    stream: 'calibration' draws examples of the same kind from a stream of their own (an eval variant's
    calibration, which the evaluation must never see)."""
    rng = random.Random(f"{stream}:{seed}:{task}:{length}")
    return [make_example(task, tok, length, rng, 'eval', distractors, pair_distance) for _ in range(n)]

def make_document(task, tok, length, rng, split='train', distractors=0.0):
    """A training document (the tokens of make_example, END included), its loss mask (1 exactly on
    the value spans' tokens, the targets the model is trained to predict) and the example."""
    ex, end = make_example(task, tok, length, rng, split, distractors), tok.encode(END)
    mask = [0] * (len(ex.prompt) + len(ex.answer) + len(end))
    for s, e in ex.value_spans:
        mask[len(ex.prompt) + s: len(ex.prompt) + e] = [1] * (e - s)
    return ex.prompt + ex.answer + end, mask, ex

def answer_distances(ex):
    """For each value token of the answer: how many tokens back the position that predicts it sits
    from that token's copy in the prompt (its last occurrence). A layer stack whose window layers
    see d tokens back can copy a value with distance <= d without any global layer."""
    out = []
    for (s, e), value in zip(ex.value_spans, ex.values):
        n = len(value)
        src = next(i for i in range(len(ex.prompt) - n, -1, -1) if ex.prompt[i:i + n] == value)
        for j in range(n):                       # value token j is predicted at prompt + e - n + j - 1
            out.append(len(ex.prompt) + e - n + j - 1 - (src + j))
    return out

# -----------------------------------------------------------------------------
# the packed corpus

CHUNK_ROWS = 256  # rows generated from one seed; chunks are independent, so the bytes never
                  # depend on how the work is split

def _pack_chunk(tok, tasks, weights, block_size, n_rows, rng, min_doc_len=0, distances=None, distractors=0.0):
    """n_rows rows of block_size tokens, each filled with whole documents of random lengths (at
    least min_doc_len); the space left at the end of a row (too short for any document) is noise
    filler, mask 0. distances: a histogram (numpy, indexed by distance) that answer_distances of
    every document is added to."""
    shortest = [max(min_length(t, tok), min_doc_len) for t in tasks]
    noise = tok.encode(NOISE)
    filler = (noise * (block_size // len(noise) + 1))[:block_size]
    ids = np.empty(n_rows * block_size, dtype=np.uint16)
    mask = np.zeros(n_rows * block_size, dtype=np.uint8)
    for r in range(n_rows):
        pos, left = r * block_size, block_size
        while True:
            fits = [i for i in range(len(tasks)) if shortest[i] <= left]
            if not fits:
                break
            i = rng.choices(fits, [weights[i] for i in fits])[0]
            n = rng.randint(shortest[i], left)
            ids[pos:pos + n], mask[pos:pos + n], ex = make_document(tasks[i], tok, n, rng, 'train', distractors)
            if distances is not None:
                np.add.at(distances, answer_distances(ex), 1)
            pos, left = pos + n, left - n
        ids[pos:pos + left] = filler[:left]
    return ids, mask


def _write_split(tok, tasks, weights, block_size, n_rows, data_seed, split, data_dir, progress, min_doc_len=0,
                 distances=None, distractors=0.0):
    """Stream n_rows rows (+1 trailing filler token, so y = stream[i*T+1:(i+1)*T+1] exists)."""
    with open(os.path.join(data_dir, f'{split}.bin'), 'wb') as f_ids, \
            open(os.path.join(data_dir, f'{split}_mask.bin'), 'wb') as f_mask, \
            tqdm(total=n_rows * block_size, unit='tok', unit_scale=True, desc=split, disable=not progress) as bar:
        for c, start in enumerate(range(0, n_rows, CHUNK_ROWS)):
            rows = min(CHUNK_ROWS, n_rows - start)
            rng = random.Random(f"{data_seed}:{split}:{c}")
            ids, mask = _pack_chunk(tok, tasks, weights, block_size, rows, rng, min_doc_len, distances, distractors)
            ids.tofile(f_ids)
            mask.tofile(f_mask)
            bar.update(rows * block_size)
        np.array(tok.encode(NOISE)[:1], dtype=np.uint16).tofile(f_ids)
        np.zeros(1, dtype=np.uint8).tofile(f_mask)
    return n_rows * block_size + 1

def parse_tasks(tasks, key='tasks', weighted=True):
    """'niah_single,vt:2' -> (['niah_single', 'vt'], [1.0, 2.0]), or a ValueError naming the key: the
    one check of task names, for every script that takes them (weighted=False: names only)."""
    names, weights = [], []
    for item in items(key, tasks):
        name, colon, weight = item.partition(':')
        if name not in TASKS:
            raise ValueError(f"{key}={tasks!r}: unknown task '{name}'; choose from {', '.join(TASKS)}")
        if colon and not weighted:
            raise ValueError(f"{key}={tasks!r}: '{item}' has a weight; {key} takes task names only")
        try:
            weight = float(weight or 1)
        except ValueError:
            weight = math.nan
        if not 0 < weight < math.inf:
            raise ValueError(f"{key}={tasks!r}: the weight in '{item}' must be a positive number")
        names.append(name)
        weights.append(weight)
    if not names:
        raise ValueError(f"{key} is empty; choose from {', '.join(TASKS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{key}={tasks!r} lists a task twice")
    return names, weights

def prepare(data_dir, block_size, num_tokens, tasks='niah_single', data_seed=1337,
            val_tokens=0, min_doc_len=0, progress=True, distractors=0.0):
    """Write the packed corpus to data_dir (see the module docstring); -> its meta. Every argument is
    checked before anything is written (a ValueError naming the key). meta.json is removed first
    and written last, so a folder with meta.json is always complete."""
    names, weights = parse_tasks(tasks)
    tok = build_tokenizer()
    if num_tokens <= 0:
        raise ValueError(f"num_tokens={num_tokens} must be positive")
    if val_tokens < 0:
        raise ValueError(f"val_tokens={val_tokens} must be positive, or 0 for max(block_size, num_tokens // 50)")
    if min_doc_len < 0:
        raise ValueError(f"min_doc_len={min_doc_len} must be >= 0 (0 = each task's minimum)")
    check_corpus(dict(tasks=tasks, distractors=distractors, block_size=block_size, min_doc_len=min_doc_len), tok)
    if not data_dir:
        raise ValueError("data_dir is empty; name a folder, e.g. --data_dir=data/niah")
    try:
        os.makedirs(data_dir, exist_ok=True)
    except OSError as e:
        raise ValueError(f"data_dir={data_dir!r}: cannot make this folder ({e.strerror})") from None
    if not os.access(data_dir, os.W_OK):
        raise ValueError(f"data_dir={data_dir!r} is not writable")
    need, free = 3 * (num_tokens + (val_tokens or max(block_size, num_tokens // 50))), shutil.disk_usage(data_dir).free
    if need > free:                                  # 2 bytes a token id, 1 a mask byte
        raise ValueError(f"num_tokens={num_tokens:,} needs about {rundir.size_text(need)} in {data_dir} and "
                         f"{rundir.size_text(free)} are free: lower num_tokens, or free space")

    meta_path = os.path.join(data_dir, META)
    if os.path.exists(meta_path):
        os.remove(meta_path)  # the old data stops being valid the moment we start
    val_tokens = val_tokens or max(block_size, num_tokens // 50)
    distances = np.zeros(block_size + 1, dtype=np.int64)      # of the training answers' value tokens
    written = {split: _write_split(tok, names, weights, block_size, max(1, n // block_size), data_seed, split,
                                   data_dir, progress, min_doc_len, distances if split == 'train' else None,
                                   distractors)
               for split, n in (('train', num_tokens), ('val', val_tokens))}
    tok.save(os.path.join(data_dir, rundir.TOKENIZER))
    meta = dict(version=VERSION, tokenizer=tok.name, vocab_size=tok.vocab_size, block_size=block_size,
                tasks=dict(zip(names, weights)), data_seed=data_seed, num_tokens=num_tokens,
                train_tokens=written['train'], val_tokens=written['val'], min_doc_len=min_doc_len,
                **distractor_setting(distractors, names), answer_distances=distances.tolist(),
                sha256={f: file_sha256(os.path.join(data_dir, f)) for f in CHECKSUMMED})
    rundir.write_atomic(meta_path, json.dumps(meta, indent=2).encode())
    return meta

def make_corpus(cfg, then):
    """The corpus of a train.py config (cfg: its settings), generated into cfg['data_dir'] unless it
    is there: once, however many runs ask for it (a process generating it is waited for). then: how
    to go on after a disk error. train.py and ablate.py both call this."""
    meta = os.path.join(cfg['data_dir'], META)

    def generate():
        print(f"generating {cfg['data_dir']} ({cfg['tasks']}, {cfg['num_tokens']:,} tokens)")
        prepare(cfg['data_dir'], cfg['block_size'], cfg['num_tokens'], tasks=cfg['tasks'], data_seed=cfg['data_seed'],
                min_doc_len=cfg['min_doc_len'], distractors=cfg['distractors'])
    if not os.path.exists(meta):
        with rundir.writing(cfg['data_dir'], 'the corpus', then):
            rundir.make_once(cfg['data_dir'], lambda: os.path.exists(meta), generate)


CHECKSUMMED = ('train.bin', 'val.bin', 'train_mask.bin', 'val_mask.bin')   # their sha256 is in meta.json


def file_sha256(path):
    """The sha256 of a file, read in 1 MiB pieces (meta.json keeps each of CHECKSUMMED's, so a file
    of the right size but other bytes is caught before training reads it)."""
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for piece in iter(lambda: f.read(1 << 20), b''):
            h.update(piece)
    return h.hexdigest()

def regenerate(data_dir, meta=None):
    """The sample_data.py command that writes this corpus again (with its settings when meta is known)."""
    if meta is None:
        return f"python sample_data.py --data_dir={data_dir} --block_size=<T> --num_tokens=<N> --tasks=<tasks>"
    tasks = ','.join(t if w == 1 else f"{t}:{w:g}" for t, w in meta['tasks'].items())
    return (f"python sample_data.py --data_dir={data_dir} --block_size={meta['block_size']} "
            f"--num_tokens={meta['num_tokens']} --tasks={tasks} --data_seed={meta['data_seed']} "
            f"--min_doc_len={meta['min_doc_len']}" + (f" --distractors={meta['distractors']}" if 'distractors' in meta
                                                      else ""))


def load_meta(data_dir):
    """meta.json of a complete corpus, after checking that its files are there and whole."""
    path = os.path.join(data_dir, META)
    if not os.path.isfile(path):
        raise DataError(f"no dataset in {data_dir} ({META} is missing); generate it with: {regenerate(data_dir)}")
    hint = regenerate(data_dir)
    try:
        with open(path) as f:
            meta = json.load(f)
        hint = regenerate(data_dir, meta)
        sizes = {f'{split}{suffix}': meta[f'{split}_tokens'] * nbytes for split in ('train', 'val')
                 for suffix, nbytes in (('.bin', 2), ('_mask.bin', 1))}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DataError(f"{path} is corrupt ({type(e).__name__}: {e}); regenerate with: {hint}") from None
    if meta.get('version') != VERSION:
        raise DataError(f"{data_dir} holds a corpus of format {meta.get('version')}, this code reads {VERSION}: "
                        f"delete {data_dir} and rerun (train.py generates it again), or point data_dir elsewhere")
    for name, size in {**sizes, rundir.TOKENIZER: None}.items():
        p = os.path.join(data_dir, name)
        if not os.path.isfile(p):
            raise DataError(f"{p} is missing; regenerate with: {hint}")
        if size is not None and os.path.getsize(p) != size:
            raise DataError(f"{p} has {os.path.getsize(p)} bytes, expected {size} (truncated?); "
                            f"regenerate with: {hint}")
    return meta


def check_checksums(data_dir, meta):
    """Each CHECKSUMMED file against its sha256 in meta.json: a flipped bit in a token or mask file
    would otherwise train without a word."""
    sums = meta.get('sha256')
    if not isinstance(sums, dict):
        raise DataError(f"{data_dir}/{META}'s sha256 is a {type(sums).__name__}, not a table of checksums (corrupt?): "
                        f"delete {data_dir} and rerun (train.py generates it again), or regenerate with: "
                        f"{regenerate(data_dir, meta)}")
    for name in CHECKSUMMED:
        path = os.path.join(data_dir, name)
        if file_sha256(path) != sums.get(name):
            raise DataError(f"{path} does not match the checksum in {META} (corrupt?): delete {data_dir} and rerun "
                            f"(train.py generates it again), or regenerate with: {regenerate(data_dir, meta)}")


def beyond_reach(meta, reach):
    """The share of training answer tokens whose value sits more than `reach` tokens before the
    position that predicts it."""
    counts = meta['answer_distances']
    return sum(counts[reach + 1:]) / sum(counts)

def rows_with_several_documents(data_dir, block_size):
    """The share of the training rows (block_size tokens, as train.py draws them) that hold more than
    one document, counted by their END markers. A row has no document mask: a later document's
    answer can attend to an earlier one's keys and values, as one sequence of Zoology's MQAR cannot."""
    end = load_tokenizer(data_dir).encode(END)
    assert len(end) == 1, "END is one token of the corpus' tokenizer"
    ids, _ = load_split(data_dir, 'train')
    n = (len(ids) - 1) // block_size
    rows = np.asarray(ids[:n * block_size]).reshape(n, block_size)
    return float(((rows == end[0]).sum(axis=1) > 1).mean())


def load_split(data_dir, split):
    """(ids, mask) of 'train' or 'val' as read-only memmaps: uint16 token ids, uint8 loss mask."""
    return (np.memmap(os.path.join(data_dir, f'{split}.bin'), dtype=np.uint16, mode='r'),
            np.memmap(os.path.join(data_dir, f'{split}_mask.bin'), dtype=np.uint8, mode='r'))


def corpus_settings(cfg):
    """The settings of a train.py / sample_data.py config that decide its corpus, as meta.json keeps them."""
    names, weights = parse_tasks(cfg['tasks'])
    return dict(block_size=cfg['block_size'], num_tokens=cfg['num_tokens'], data_seed=cfg['data_seed'],
                min_doc_len=cfg['min_doc_len'], tasks=dict(zip(names, weights)),
                **distractor_setting(cfg['distractors'], names))


def check_distractors(distractors, tasks):
    """distractors in [0, 1), and set only for a task that reads it: a ValueError naming the key."""
    if not 0 <= distractors < 1:
        raise ValueError(f"distractors={distractors} must be in [0, 1): the chance that a haystack line is a "
                         f"distractor pair")
    if distractors and not set(tasks) & set(DISTRACTED):
        raise ValueError(f"distractors={distractors} is read by {', '.join(DISTRACTED)} only, and tasks="
                         f"{','.join(tasks)} has none: drop it, or add mqar_haystack")


def check_corpus(cfg, tok):
    """The corpus settings of a train.py run (tasks, distractors, block_size, min_doc_len), checked: a
    ValueError naming the key. -> the trained tasks' names"""
    trained, _ = parse_tasks(cfg['tasks'])
    check_distractors(cfg['distractors'], trained)
    for t in trained:
        if cfg['block_size'] < min_length(t, tok):
            raise ValueError(f"block_size={cfg['block_size']} is shorter than {t}'s shortest document "
                             f"({min_length(t, tok)} tokens)")
    if cfg['min_doc_len'] > cfg['block_size']:
        raise ValueError(f"min_doc_len={cfg['min_doc_len']} is longer than block_size={cfg['block_size']}")
    return trained


def differing_settings(meta, cfg):
    """The settings in which a corpus (its meta.json) differs from the one a config asks for: {key: (the
    corpus', the config's)}; {} when it is that corpus."""
    wanted = dict(corpus_settings(cfg), tokenizer=build_tokenizer().name)
    return {k: (meta.get(k), v) for k, v in wanted.items() if meta.get(k) != v}


def distractor_setting(distractors, tasks):
    """The corpus setting as meta.json keeps it: only for a corpus of a task that reads it, so every
    other corpus' meta.json is what it was before the setting existed."""
    return {'distractors': distractors} if set(tasks) & set(DISTRACTED) else {}


def refuse_other_settings(cfg):
    """Exit when cfg's data_dir holds a corpus of other settings: runs trained on it check it, so it
    is never overwritten. The same settings write the same bytes again (which repairs a damaged
    file, as the checksum errors advise), and a corpus without a valid meta.json is written again."""
    try:
        differ = differing_settings(load_meta(cfg['data_dir']), cfg)
    except DataError:
        return
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    if differ:
        raise SystemExit(f"{cfg['data_dir']} already holds a corpus of other settings ("
                         f"{', '.join(f'{k}={old!r}' for k, (old, _) in differ.items())}), "
                         f"which runs trained on it check against: pick another data_dir, or delete "
                         f"{cfg['data_dir']} to write it again")


def main(argv):
    cfg = configure(settings_of(globals()), argv)
    reach = cfg.pop('reach')
    if cfg['data_dir']:
        refuse_other_settings(cfg)           # a dir without a corpus (no meta.json) passes
    rundir.exit_on_signals(lambda: f"stopped while writing {cfg['data_dir']} (no {META} yet, so no run reads it); "
                                   f"rerun: {shlex.join(['python', 'sample_data.py', *argv])}")
    try:
        meta = prepare(**cfg)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    print(f"wrote {meta['train_tokens']:,} train and {meta['val_tokens']:,} val tokens to {cfg['data_dir']} "
          f"(vocab {meta['vocab_size']}, tasks {meta['tasks']})")
    print(f"{beyond_reach(meta, reach):.1%} of the training answers' value tokens sit more than {reach} tokens "
          f"before the position that predicts them; "
          f"{rows_with_several_documents(cfg['data_dir'], cfg['block_size']):.1%} of the training rows hold more "
          f"than one document")

if __name__ == '__main__':
    main(sys.argv[1:])
