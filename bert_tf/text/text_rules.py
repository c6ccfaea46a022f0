"""The original BERT tokenizer's text rules, in one place and without TensorFlow.

google-research/bert's `FullTokenizer` is defined by a few per-character rules (what is
whitespace, a control character, punctuation, a CJK ideograph; how accents are stripped)
plus how a vocab file is read. bert_tf has two tokenizers that must give exactly its ids:

  * `bert_tf.text.tokenization.BertTokenizer`, in the TensorFlow graph: it runs these rules over
    every code point once, on the host, to build its lookup tables;
  * `WordPieceTokenizer` here, in plain Python with a per-word cache: the offline data
    tools (`data_prep`) use it because on one core it is several times faster than the
    in-graph tokenizer for a corpus, and because it needs no TensorFlow, so their worker
    processes start in a fraction of a second.

Both take the rules from this module, so they cannot drift apart ("one tokenizer"). The
module imports only the standard library: importing it (or `data_prep.corpus`) never
starts TensorFlow. Tests check both tokenizers against each other and against a copy of
the original.

>>> tok = WordPieceTokenizer(["[PAD]", "[UNK]", "hello", "world", "!", "##s"])
>>> tok.tokenize_line("Hello, WORLDs!")
[2, 1, 3, 5, 4]
>>> BasicTokenizer(do_lower_case=True).tokenize("Héllo, wörld!中文")
['hello', ',', 'world', '!', '中', '文']

`strip_accents` is separate from lower-casing, as in Hugging Face's tokenizers: None (the
default) follows `do_lower_case`, which is the original's behaviour. Lower-casing with
`strip_accents=False` keeps accents and Hangul syllables whole (NFC, see `text_mode`):

>>> BasicTokenizer(do_lower_case=True, strip_accents=False).tokenize("Héllo 한국어!")
['héllo', '한국어', '!']
>>> [len(w) for w in BasicTokenizer(do_lower_case=True).tokenize("한국어")]  # jamo
[8]
"""

from __future__ import annotations

import os
import re
import unicodedata
from array import array
from itertools import chain
from typing import Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from bert_tf.core import file_io
from bert_tf.core.constants import SPECIAL_TOKENS, UNK_TOKEN
from bert_tf.core.errors import BertTfError

MAX_INPUT_CHARS_PER_WORD = 200

__all__ = ["MAX_INPUT_CHARS_PER_WORD", "CJK_RANGES", "VocabError",
           "is_whitespace", "is_control", "is_punctuation", "is_chinese_char",
           "strip_accents", "load_vocab", "parse_vocab", "check_special_tokens",
           "infer_do_lower_case", "infer_strip_accents", "TextMode", "text_mode",
           "BasicTokenizer", "WordPieceTokenizer"]


class VocabError(BertTfError, ValueError):
    """A vocabulary file that cannot serve BERT (e.g. special tokens missing)."""


# --------------------------------------------------------------------------------------
# The original's character classes (google-research/bert tokenization.py).


def is_whitespace(char: str) -> bool:
    """Space, tab, newline, carriage return, and the "Zs" space separators.

    >>> [is_whitespace(c) for c in (" ", "\\t", "\\u3000", "\\xa0", "\\u200b", "a")]
    [True, True, True, True, False, False]
    """
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
    """Control characters, which the original drops: categories "Cc" and "Cf" only.

    Tab, newline and carriage return are whitespace, not control. Unassigned ("Cn"),
    private-use ("Co") and surrogate ("Cs") code points are kept (ports that test the
    category "C*" drop them, and so give other ids).

    >>> [is_control(c) for c in ("\\x00", "\\x7f", "\\u200b", "\\t", "\\ue000", "a")]
    [True, True, True, False, False, False]
    """
    if char in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char: str) -> bool:
    """Punctuation: every non-alphanumeric ASCII character, and Unicode categories "P*".

    So '$', '^', '`' count (they are "Sc", "Sk" in Unicode), while '€' does not.

    >>> [is_punctuation(c) for c in ("$", "^", "`", ",", "\\u3002", "\\u20ac", "a")]
    [True, True, True, True, True, False, False]
    """
    cp = ord(char)
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(char).startswith("P")


#: The original's CJK Unified / Compatibility ideograph ranges (inclusive code points).
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def is_chinese_char(cp: int) -> bool:
    """A CJK Unified / Compatibility ideograph code point (the original's ranges).

    Each such character becomes a word of its own. Hangul and kana are not included.

    >>> [is_chinese_char(ord(c)) for c in ("中", "\\U00020000", "\\uf900", "한", "の")]
    [True, True, True, False, False]
    """
    for first, last in CJK_RANGES:
        if first <= cp <= last:
            return True
    return False


def strip_accents(text: str) -> str:
    """NFD, then drop the nonspacing marks ("Mn"), as the original's uncased path.

    >>> strip_accents("Café naïve Ångström")
    'Cafe naive Angstrom'
    """
    return "".join(c for c in unicodedata.normalize("NFD", text)
                   if unicodedata.category(c) != "Mn")


class TextMode(NamedTuple):
    """What the basic tokenizer does to each word besides the original's fixed steps.

    lower: `str.lower()`; strip: NFD then drop the "Mn" marks; nfc: NFC-normalize the
    cleaned text first (before splitting and lower-casing).
    """
    lower: bool
    strip: bool
    nfc: bool


def text_mode(do_lower_case: bool, strip_accents: Optional[bool] = None) -> TextMode:
    """The steps `do_lower_case` / `strip_accents` stand for (Hugging Face's meaning).

    `strip_accents=None` follows `do_lower_case`: the original BERT (lower + strip when
    uncased, nothing when cased). `do_lower_case=True, strip_accents=False` lower-cases and
    keeps accents; then the cleaned text is NFC-normalized first, as Hugging Face's Python
    BasicTokenizer does, so that decomposed input (Hangul as conjoining jamo, "e" +
    U+0301) gives the same words as composed input; `tokenizers`' BertNormalizer skips the
    NFC, so it differs from this only on text that is not NFC already. Stripping makes
    NFC moot (NFD follows), and the cased original has none, so only this mode has it.

    >>> text_mode(True), text_mode(False)
    (TextMode(lower=True, strip=True, nfc=False), TextMode(lower=False, strip=False, nfc=False))
    >>> text_mode(True, strip_accents=False)
    TextMode(lower=True, strip=False, nfc=True)
    """
    lower = bool(do_lower_case)
    strip = lower if strip_accents is None else bool(strip_accents)
    return TextMode(lower, strip, lower and not strip)


# --------------------------------------------------------------------------------------
# Vocabulary files.



def load_vocab(path) -> List[str]:
    """Tokens of a vocab file, one per line, `line.strip()`ed; index = line number.

    Like the original, an empty line is a (never matched) token and a file's final
    newline does not start another one. A duplicated token keeps all its lines here;
    tokenization uses its last index, as the original's dict does. Local paths are read
    with `open`; a path with a scheme (gs://...) through `tf.io.gfile`.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(p, "w").write("[PAD]\\n hello \\n\\nworld\\n")
    >>> load_vocab(p)
    ['[PAD]', 'hello', '', 'world']
    """
    path = os.fspath(path)
    try:
        data = file_io.read_bytes(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"vocab file not found: {path}") from None
    return parse_vocab(data, path)


def parse_vocab(data: bytes, path: str) -> List[str]:
    """`load_vocab` of a vocab file's bytes (`path` names it in errors).

    >>> parse_vocab(b"[PAD]\\r\\na \\n", "v.txt")
    ['[PAD]', 'a']
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise VocabError(f"vocab file {path} is not UTF-8: {e}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.strip() for line in lines]


def vocab_index(tokens: Iterable[str]) -> Dict[str, int]:
    """Token -> id; a duplicated token keeps its last line, as the original's dict.

    >>> vocab_index(["a", "b", "a"])
    {'a': 2, 'b': 1}
    """
    index: Dict[str, int] = {}
    for i, token in enumerate(tokens):
        index[token] = i
    return index


def check_special_tokens(token_to_id: Mapping[str, int], path: str,
                         required: Sequence[str] = SPECIAL_TOKENS) -> None:
    """Raises `VocabError` naming the file and every one of `required` it lacks.

    >>> check_special_tokens({"[PAD]": 0, "[UNK]": 1}, "v.txt")
    Traceback (most recent call last):
    ...
    bert_tf.text.text_rules.VocabError: vocab file v.txt lacks the special token(s) [CLS], \
[SEP], [MASK]; a BERT vocab needs all of [PAD], [UNK], [CLS], [SEP], [MASK]
    """
    missing = [t for t in required if t not in token_to_id]
    if missing:
        raise VocabError(
            f"vocab file {path} lacks the special token(s) {', '.join(missing)}; "
            f"a BERT vocab needs all of {', '.join(required)}")


def _is_special(token: str) -> bool:
    return len(token) >= 2 and ((token[0] == "[" and token[-1] == "]")
                                or (token[0] == "<" and token[-1] == ">"))


def infer_do_lower_case(vocab_file) -> bool:
    """True for an uncased vocab: no token changes under lower() (special tokens aside).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(p, "w").write("[PAD]\\n[UNK]\\nhello\\n##s\\n")
    >>> infer_do_lower_case(p)
    True
    """
    for token in load_vocab(vocab_file):
        if not _is_special(token) and token != token.lower():
            return False
    return True


def infer_strip_accents(vocab_file) -> Optional[bool]:
    """False for a vocab that holds tokens accent stripping could never produce (accented
    letters, Hangul syllables: an uncased vocab learned with --nostrip_accents), else None
    (follow do_lower_case).

    Google's uncased vocabs give None (they hold jamo, never syllables), so they keep the
    original behaviour.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(p, "w").write("[PAD]\\n[UNK]\\n한국\\n##어\\n")
    >>> infer_strip_accents(p)
    False
    """
    for token in load_vocab(vocab_file):
        if not token.isascii() and not _is_special(token) and strip_accents(token) != token:
            return False
    return None


# --------------------------------------------------------------------------------------
# Host-side tokenization: the original FullTokenizer in plain Python, with caches.
#
# Natural text repeats its words, so after a short warm-up a line costs a `str.translate`,
# a `split` and one dict lookup per word.

_ASCII_WORDS = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9]")


class _CleanMap(dict):
    """`str.translate` table built on demand: drops NUL / U+FFFD / control characters, maps
    whitespace to a space, surrounds CJK ideographs with spaces (the original's text cleanup
    and Chinese-character split, one character class lookup per distinct character)."""

    def __missing__(self, cp: int):
        char = chr(cp)
        if cp == 0 or cp == 0xFFFD or is_control(char):
            out = None
        elif is_whitespace(char):
            out = " "
        elif is_chinese_char(cp):
            out = f" {char} "
        else:
            out = char
        self[cp] = out
        return out


def _split_punctuation(token: str) -> List[str]:
    if token.isascii():
        # After cleanup every non-alphanumeric ASCII character is punctuation.
        return _ASCII_WORDS.findall(token)
    pieces, current = [], []
    for char in token:
        if is_punctuation(char):
            if current:
                pieces.append("".join(current))
                current = []
            pieces.append(char)
        else:
            current.append(char)
    if current:
        pieces.append("".join(current))
    return pieces


class BasicTokenizer:
    """The original BasicTokenizer: text -> words, before WordPiece.

    Cleans the text (drops NUL, U+FFFD and control characters, whitespace -> ' '), puts
    spaces around CJK ideographs, splits on whitespace, then per token: lower case and
    strip accents when uncased, and split off punctuation. `strip_accents` (None: follow
    `do_lower_case`) separates the two as Hugging Face does (`text_mode`). Results are
    cached per whitespace token (bounded by `max_cache_entries`).

    >>> BasicTokenizer(do_lower_case=False).tokenize("Don't\\x00 stop\\u3000ÉTÉ!")
    ['Don', "'", 't', 'stop', 'ÉTÉ', '!']
    >>> BasicTokenizer(do_lower_case=True).tokenize("Don't\\x00 stop\\u3000ÉTÉ!")
    ['don', "'", 't', 'stop', 'ete', '!']
    """

    def __init__(self, do_lower_case: bool = True, max_cache_entries: int = 300_000,
                 strip_accents: Optional[bool] = None):
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        self.mode = text_mode(do_lower_case, strip_accents)
        self.clean_map = _CleanMap()
        self._cache: Dict[str, Tuple[str, ...]] = {}
        self._max_cache = max_cache_entries

    def clean(self, text: str) -> str:
        """The cleaned text (CJK ideographs spaced; NFC when the mode asks for it)."""
        text = text.translate(self.clean_map)
        if self.mode.nfc and not text.isascii():
            text = unicodedata.normalize("NFC", text)
        return text

    def split_token(self, token: str) -> Tuple[str, ...]:
        """The words of one whitespace token of cleaned text (not cached)."""
        if self.mode.lower:
            token = token.lower()
        if self.mode.strip and not token.isascii():
            token = strip_accents(token)
        words: List[str] = []
        # split() again: lower-casing / NFD can in principle expose whitespace.
        for word in token.split():
            if word.isalnum():  # letters and digits only: no punctuation to split off
                words.append(word)
            else:
                words.extend(_split_punctuation(word))
        return tuple(words)

    def tokenize(self, text: str) -> List[str]:
        """The words of `text`, as the original BasicTokenizer gives them."""
        cache = self._cache
        tokens = self.clean(text).split()
        found = list(map(cache.get, tokens))
        if None in found:
            for k, token in enumerate(tokens):
                if found[k] is None:
                    if len(cache) >= self._max_cache:
                        cache.clear()
                    found[k] = cache[token] = self.split_token(token)
        return list(chain.from_iterable(found))

    def tokenize_batch(self, texts: Iterable[str]) -> List[List[str]]:
        """`tokenize` over many texts (the pretokenizer interface of build_vocab)."""
        return [self.tokenize(t) for t in texts]


class WordPieceTokenizer:
    """The original BERT FullTokenizer over a vocab, in plain Python with a word cache.

    Gives exactly `bert_tf.text.tokenization.BertTokenizer`'s ids (the tests check it on real
    corpora). `tokenize_line(text)` gives the WordPiece ids of one line (no [CLS]/[SEP]);
    `tokenize_lines(lines)` one `array('i')` per line, `None` for an empty line (the
    `data_prep.corpus.LineTokenizer` interface of the offline jobs).

    Args:
      vocab_tokens: the vocab, index = id (a duplicated token keeps its last id).
      do_lower_case: uncased (lower + NFD + strip accents) as the original's flag.
      max_input_chars_per_word: longer words (in code points) become [UNK].
      unk_token: must be in the vocab (else `VocabError`).
      max_cache_entries: bound on the per-token caches (memory on huge word lists).
      strip_accents: None follows do_lower_case; False keeps accents and Hangul
        syllables when lower-casing (see `text_mode`).

    >>> tok = WordPieceTokenizer(["[PAD]", "[UNK]", "un", "##aff", "##able", ",", "x"])
    >>> tok.tokenize_line("UnAffable, X!")
    [2, 3, 4, 5, 6, 1]
    """

    def __init__(self, vocab_tokens: Sequence[str], do_lower_case: bool = True,
                 max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD,
                 unk_token: str = UNK_TOKEN, max_cache_entries: int = 300_000,
                 strip_accents: Optional[bool] = None):
        self.vocab = vocab_index(vocab_tokens)
        if unk_token not in self.vocab:
            raise VocabError(f"vocab lacks {unk_token}")
        self.unk_id = self.vocab[unk_token]
        # No vocab entry is longer than this (in characters, "##" excluded), so longer
        # candidate pieces need not be looked up.
        self._longest = max((len(t) - 2 if t.startswith("##") else len(t) for t in self.vocab),
                            default=1)
        self._pieces: dict = {}
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        self.max_chars = max_input_chars_per_word
        self._basic = BasicTokenizer(do_lower_case, strip_accents=strip_accents)
        self._cache: dict = {}
        self._max_cache = max_cache_entries

    @classmethod
    def from_vocab_file(cls, path, do_lower_case: bool = True, **kwargs) -> "WordPieceTokenizer":
        """Reads the vocab as the original does (`load_vocab`): one token a line, stripped.

        >>> import os, tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "vocab.txt")
        >>> _ = open(p, "w").write("[PAD]\\n[UNK]\\nhi\\n")
        >>> WordPieceTokenizer.from_vocab_file(p).tokenize_line("Hi hey")
        [2, 1]
        """
        return cls(load_vocab(path), do_lower_case, **kwargs)

    def _wordpiece(self, word: str, out: List[int]) -> None:
        cached = self._pieces.get(word)
        if cached is None:
            cached = self._pieces[word] = self._wordpiece_uncached(word)
        out.extend(cached)

    def _wordpiece_uncached(self, word: str, continuation: bool = False) -> tuple:
        """Greedy longest match; `continuation`: the word continues a previous one (its
        first piece is a "##" piece too: how extend_vocab spells a new "##" token)."""
        if len(word) > self.max_chars:
            return (self.unk_id,)
        vocab, longest, start, ids = self.vocab, self._longest, 0, []
        while start < len(word):
            end = min(len(word), start + longest)
            while start < end:
                piece = (word[start:end] if start == 0 and not continuation
                         else "##" + word[start:end])
                if piece in vocab:
                    ids.append(vocab[piece])
                    break
                end -= 1
            else:
                return (self.unk_id,)  # no piece matches: the whole word is [UNK]
            start = end
        return tuple(ids)

    def _token_ids(self, token: str) -> tuple:
        out: List[int] = []
        for word in self._basic.split_token(token):
            self._wordpiece(word, out)
        return tuple(out)

    def tokenize_line(self, text: str) -> List[int]:
        """WordPiece ids of one text (no [CLS]/[SEP])."""
        cache = self._cache
        tokens = self._basic.clean(text).split()
        # Lookups and concatenation run in C (map / chain); only misses cost Python work.
        found = list(map(cache.get, tokens))
        if None in found:
            for k, token in enumerate(tokens):
                if found[k] is None:
                    if len(cache) >= self._max_cache:
                        cache.clear()  # bounded memory on corpora with huge word lists
                        self._pieces.clear()
                    found[k] = cache[token] = self._token_ids(token)
        return list(chain.from_iterable(found))

    def tokenize_lines(self, lines: Sequence[str]) -> List[Optional[array]]:
        """Per line: its ids as a compact `array('i')`, or `None` for an empty line."""
        return [array("i", self.tokenize_line(t)) if t else None for t in lines]
