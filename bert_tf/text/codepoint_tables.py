"""Per-code-point lookup tables that make the in-graph tokenizer exact to the original.

The original's basic tokenizer is, apart from one rule, a function of each character on its
own: text cleaning (drop NUL, U+FFFD and control characters, which the original takes to be
categories "Cc" and "Cf"; map whitespace to ' '), spaces around CJK ideographs,
lower-casing + NFD + dropping "Mn" marks when uncased, and spaces around punctuation. So
`tables(lower, strip)` runs Python's own `unicodedata` / `str.lower` over all 0x110000 code
points once and stores, per code point, the code points it becomes (a compact two-level
page table over a list of "templates"; a template may say "the character itself", so the
~300k identity entries share one). `bert_tf.text.tokenization.BertTokenizer` looks them up in
the graph. Built once per machine and cached as .npz (`BERT_TF_CACHE_DIR`, default
~/.cache/bert_tf). numpy only, no TensorFlow.

The context-dependent rules of `str.lower()` + NFD are handled explicitly:
  * final sigma: 'Σ' lowers to 'ς' when preceded by a cased character (skipping
    case-ignorable ones) and not followed by one; the per-character classes come from
    probing Python's `str.lower` itself and the check runs only when a 'Σ' is present;
  * NFD canonical reordering: after dropping "Mn" marks, reordering only matters for the
    25 non-"Mn" combining characters (some Mc musical symbols, Hangul tone marks, ...);
    when one is present the affected rows are re-normalized exactly (stable sort by
    combining class inside each run of non-starters).

>>> t = tables(lower=True, strip=True)
>>> entry = t.blocks[t.page[ord("É") >> BLOCK_BITS] * BLOCK + (ord("É") & (BLOCK - 1))]
>>> [chr(c) for c in t.template_matrix[entry] if c >= 0]
['e']
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile
import unicodedata

import numpy as np

from bert_tf.text import text_rules
from bert_tf.text.text_rules import is_chinese_char as _is_chinese_char
from bert_tf.text.text_rules import is_punctuation as _is_punctuation

SPACE = 0x20
SELF = -1  # template value meaning "the input character itself"
SIGMA = 0x3A3
_FINAL_SIGMA = 0x3C2
BLOCK_BITS = 7
BLOCK = 1 << BLOCK_BITS
_NUM_CODEPOINTS = 0x110000

PAD = -2   # template padding; an invalid code point, skipped by the UTF-8 encoder

# Template ids fixed by construction.
_T_SELF = 0        # (SELF,)
_T_REMOVE = 1      # ()
_T_SPACE = 2       # (' ',)
T_FINAL_SIGMA = 3  # ('ς',)
_FIXED_TEMPLATES = ((SELF,), (), (SPACE,), (_FINAL_SIGMA,))

# Final-sigma classes (uncased only).
C_SKIP, C_CASED, _C_OTHER = 0, 1, 2


def _sigma_class(char: str) -> int:
    """Class of `char` for Python's final-sigma rule, probed from str.lower itself."""
    after_cased = ("A" + char + "Σ").lower()[-1] == "ς"   # ignorable or cased
    before_end = ("AΣ" + char).lower()[1] == "ς"          # ignorable or not cased
    if after_cased and before_end:
        return C_SKIP
    if after_cased:
        return C_CASED
    return _C_OTHER


def _is_reorderable(char: str) -> bool:
    """Non-"Mn" characters with a non-zero canonical combining class (kept by strip)."""
    return unicodedata.combining(char) != 0 and unicodedata.category(char) != "Mn"


class _TemplateSet:
    """Interns templates (tuples of output code points, SELF = the character itself)."""

    def __init__(self):
        self.templates = list(_FIXED_TEMPLATES)
        self.index = {t: i for i, t in enumerate(self.templates)}

    def add(self, template) -> int:
        template = tuple(template)
        if template not in self.index:
            self.index[template] = len(self.templates)
            self.templates.append(template)
        return self.index[template]

    def arrays(self):
        lengths = np.array([len(t) for t in self.templates], np.int32)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32)
        values = np.array([v for t in self.templates for v in t], np.int32)
        return starts, lengths, values


def _is_isolated(cp: int) -> bool:
    """Characters the fast path isolates with a regex: punctuation and CJK ideographs."""
    return _is_punctuation(chr(cp)) or _is_chinese_char(cp)


def _expand(cp: int, chars: str, self_ok) -> list:
    """The original's output for `chars` (what character `cp` became), spaces included:
    punctuation isolated by spaces, whitespace -> ' ', CJK ideographs surrounded by spaces."""
    out = []
    for c in chars:
        if _is_punctuation(c):
            out.extend((SPACE, ord(c), SPACE))
        elif c.isspace():
            out.append(SPACE)
        else:
            out.append(ord(c))
    if _is_chinese_char(cp):
        out = [SPACE] + out + [SPACE]
    return [SELF if v == cp and self_ok else v for v in out]


def _word_structure(values):
    """(words, boundary at start, boundary at end) of a template's output."""
    text = "".join(chr(v) for v in values)
    return text.split(" "), text[:1] == " ", text[-1:] == " "


def _same_words(spaced, unspaced) -> bool:
    """Does isolating the `_is_isolated` characters of `unspaced` (the fast path's regex)
    give the words and word boundaries of `spaced` (the original's output)?"""
    emulated = []
    for v in unspaced:
        emulated.extend((SPACE, v, SPACE) if v != SPACE and _is_isolated(v) else (v,))
    (wa, sa, ea), (wb, sb, eb) = _word_structure(spaced), _word_structure(emulated)
    return [w for w in wa if w] == [w for w in wb if w] and (sa, ea) == (sb, eb)


_TABLE_FIELDS = ("first_multi", "first_special", "template_len1", "template_matrix",
                 "page", "blocks", "class_page", "class_blocks", "isolate_pattern",
                 "full_starts", "full_lengths", "full_values", "full_page", "full_blocks",
                 "full_ccc", "full_mn")


class _Tables:
    """Per-code-point templates for one text mode, built from Python's own unicodedata.

    Main templates hold what a character becomes WITHOUT the spaces the original puts
    around punctuation and CJK ideographs (a regex adds those afterwards: one template
    serves every such character). Ids are ordered: templates of at most one code point
    first (`< first_multi`), then longer ones, then "special" characters
    (`>= first_special`, uncased only) whose batch takes the exact slow path: those that
    may need NFD canonical reordering, and any whose words the regex would not reproduce.
    `lower` / `strip`: `text_rules.TextMode`'s (the NFC of its third mode is a string op).
    """

    def __init__(self, lower: bool, strip: bool):
        self.lower, self.strip = lower, strip
        main = _TemplateSet()
        entry = np.zeros(_NUM_CODEPOINTS, np.int32)
        sigma_class = np.full(_NUM_CODEPOINTS, _C_OTHER, np.int32)
        # Stripping only: the original's output with the full NFD (marks not yet dropped)
        # and spaces, for the special path.
        full = _TemplateSet()
        full_entry = np.zeros(_NUM_CODEPOINTS, np.int32)
        special = []
        category = unicodedata.category
        combining = unicodedata.combining
        normalize = unicodedata.normalize
        cats = list(map(category, map(chr, range(_NUM_CODEPOINTS))))
        for cp, cat in enumerate(cats):
            if cat == "Cc" or cat == "Cf" or cat == "Zs" or cp == 0xFFFD:
                char = chr(cp)
                if char in "\t\n\r" or cat == "Zs":
                    entry[cp] = full_entry[cp] = _T_SPACE
                else:  # NUL and other controls ("Cc", "Cf"), U+FFFD
                    entry[cp] = full_entry[cp] = _T_REMOVE
                    sigma_class[cp] = C_SKIP  # removed before lower(): invisible to it
                continue
            if cat == "Cn" or cat == "Co" or cat == "Cs":
                # Unassigned, private use, surrogates: the original keeps them (its
                # _is_control is only "Cc"/"Cf"); lower() and NFD leave them alone and they
                # are neither cased nor case-ignorable. CJK ranges include unassigned ones.
                if strip and _is_chinese_char(cp):
                    full_entry[cp] = full.add(_expand(cp, chr(cp), True))
                continue
            char = chr(cp)
            if not (lower or strip):
                if char.isspace():
                    entry[cp] = _T_SPACE
                continue  # the character itself (isolated by the regex when needed)
            if lower and not _is_chinese_char(cp):  # CJK ideographs get spaces: "other"
                sigma_class[cp] = _sigma_class(char)
            lowered = char.lower() if lower else char
            nfd = normalize("NFD", lowered) if strip and not lowered.isascii() else lowered
            if nfd == char and (cat != "Mn" or not strip):  # common: stays itself
                if char.isspace():
                    entry[cp] = full_entry[cp] = _T_SPACE
                elif strip and combining(char):  # a kept non-starter ("Mc"): may reorder
                    full_entry[cp] = full.add(_expand(cp, nfd, False))
                    special.append(cp)
                elif strip and _is_isolated(cp):
                    full_entry[cp] = full.add(_expand(cp, nfd, True))
                continue
            stripped = "".join(c for c in nfd if category(c) != "Mn") if strip else nfd
            unspaced = [SPACE if c.isspace() else ord(c) for c in stripped]
            entry[cp] = main.add([SELF] if unspaced == [cp] else unspaced)
            if not strip:
                if not _same_words(_expand(cp, stripped, False), unspaced):
                    special.append(cp)
                continue
            # In the full template SELF may only stand for a starter that is not "Mn".
            self_ok = combining(char) == 0 and cat != "Mn"
            full_entry[cp] = full.add(_expand(cp, nfd, self_ok))
            if (any(_is_reorderable(c) for c in nfd)
                    or not _same_words(_expand(cp, stripped, False), unspaced)):
                special.append(cp)
        if special and not strip:  # cannot happen: per-character lower() adds no spacing
            raise RuntimeError(f"bert_tf.text.codepoint_tables: unexpected special characters {special}")
        # Order the ids: at most one code point, then longer, then the special copies.
        order = sorted(range(len(main.templates)),
                       key=lambda t: (len(main.templates[t]) > 1, t))
        assert order[:len(_FIXED_TEMPLATES)] == list(range(len(_FIXED_TEMPLATES)))
        new_id = np.empty(len(order), np.int32)
        new_id[order] = np.arange(len(order), dtype=np.int32)
        templates = [main.templates[t] for t in order]
        entry = new_id[entry]
        self.first_multi = sum(1 for t in templates if len(t) <= 1)
        self.first_special = len(templates)
        for cp in special:
            templates.append(templates[entry[cp]])
            entry[cp] = len(templates) - 1
        lmax = max(len(t) for t in templates)
        matrix = np.full((len(templates), max(lmax, 1)), PAD, np.int32)
        for i, t in enumerate(templates):
            matrix[i, :len(t)] = t
        self.template_matrix = matrix
        self.template_len1 = matrix[:self.first_multi, 0].copy()
        self.page, self.blocks = _page_table(entry)
        self.isolate_pattern = np.array(_isolate_pattern())
        if lower:
            self.class_page, self.class_blocks = _page_table(sigma_class)
        if strip:
            self.full_starts, self.full_lengths, self.full_values = full.arrays()
            self.full_page, self.full_blocks = _page_table(full_entry)
            # Per template value: canonical combining class, and whether "Mn" (dropped).
            chars = [chr(v) if v >= 0 else "a" for v in self.full_values]
            self.full_ccc = np.array([combining(c) for c in chars], np.int32)
            self.full_mn = np.array([category(c) == "Mn" for c in chars], bool)

    @classmethod
    def load(cls, lower: bool, strip: bool) -> "_Tables":
        """Built once per machine and cached (keyed by this file, text_rules.py and the
        Unicode version)."""
        sha = hashlib.sha256()
        for source in (__file__, text_rules.__file__):  # the table builder and its rules
            with open(source, "rb") as f:
                sha.update(f.read())
        digest = sha.hexdigest()[:16]
        mode = {(True, True): "uncased", (False, False): "cased",
                (True, False): "lower_keep_accents", (False, True): "cased_strip_accents"}
        name = (f"bert_tf_tokenizer_{mode[lower, strip]}_"
                f"py{sys.version_info[0]}{sys.version_info[1]}_"
                f"ucd{unicodedata.unidata_version}_{digest}.npz")
        cache_dir = os.environ.get("BERT_TF_CACHE_DIR") or os.path.join(
            os.path.expanduser("~"), ".cache", "bert_tf")
        path = os.path.join(cache_dir, name)
        try:
            with np.load(path) as data:
                tables = cls.__new__(cls)
                tables.lower, tables.strip = lower, strip
                for field in _TABLE_FIELDS:
                    if field in data:
                        setattr(tables, field, data[field])
                tables.first_multi = int(tables.first_multi)
                tables.first_special = int(tables.first_special)
                tables.isolate_pattern = str(tables.isolate_pattern)
                return tables
        except (OSError, ValueError, KeyError, AttributeError):
            pass
        tables = cls(lower, strip)
        try:
            os.makedirs(cache_dir, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".npz")
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **{k: np.asarray(getattr(tables, k)) for k in _TABLE_FIELDS
                               if hasattr(tables, k)})
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only home: rebuild next time
        tables.isolate_pattern = str(tables.isolate_pattern)
        return tables


def _isolate_pattern() -> str:
    """An RE2 character class of every `_is_isolated` code point."""
    ranges = []
    for cp in range(_NUM_CODEPOINTS):
        if _is_isolated(cp):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    parts = [f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges]
    return "[" + "".join(parts) + "]"


def _page_table(values: np.ndarray):
    """Two-level table: page[cp >> 7] is the row of `blocks` holding cp's 128 entries."""
    blocks = values.reshape(-1, BLOCK)
    seen, page, unique = {}, np.zeros(len(blocks), np.int32), []
    for i, block in enumerate(blocks):
        key = block.tobytes()
        if key not in seen:
            seen[key] = len(unique)
            unique.append(block)
        page[i] = seen[key]
    return page, np.concatenate(unique).astype(values.dtype)


@functools.lru_cache(maxsize=None)
def tables(lower: bool, strip: bool) -> _Tables:
    return _Tables.load(lower, strip)


def _utf8_length(cp):
    """Bytes of each code point in UTF-8 (int32 tensor in, int32 out)."""
