"""Optional pre-splitting of text before BERT's basic tokenization (Korean morphemes).

Korean BERTs that work well split text into morphemes before WordPiece (KoELECTRA v3,
KLUE): "대한민국은" is the noun "대한민국" and the particle "은", and a vocabulary learned
on such text spends its entries on morphemes instead of on every noun + particle pair.
A pre-tokenizer here only INSERTS SPACES at morpheme boundaries inside a run of text
(the characters are kept as written, never replaced by dictionary forms), so the basic
tokenizer, WordPiece and byte offsets work on it as on any text:

    "대한민국은 민주공화국이다."  ->  "대한민국 은 민주 공화국 이 다."

Only boundaries next to a Hangul character are used (Latin, digits and hanja runs are
left to the basic tokenizer: "abc123" stays whole, "KTX를" becomes "KTX 를").

`kiwi` uses kiwipiepy (https://github.com/bab2min/kiwipiepy, LGPL-2.1; its model is the
kiwipiepy_model package, so it runs offline): `pip install -r requirements-korean.txt`.
The choice is recorded in the model directory (`tokenizer_config.json`,
`"pre_tokenizer": "kiwi"`). A SavedModel's raw-text signature cannot run an analyser:
clients split text with `split_lines` (or the command on it, `python -m
bert_tf.pre_tokenizers`) before sending it, or send ids.

This module imports no TensorFlow and imports the analyser only when asked for one.

>>> split_at_boundaries("대한민국은 abc123", [(0, 4), (4, 5), (6, 9), (9, 12)])
'대한민국 은 abc123'
"""

from __future__ import annotations

import functools
import importlib.util
import unicodedata
from typing import Callable, Iterable, List, Sequence, Tuple
import warnings

from bert_tf.core.errors import BertTfError

PRE_TOKENIZERS = ("kiwi",)
REQUIREMENTS_FILE = "requirements-korean.txt"
_PIP_HINT = {"kiwi": f"pip install -r {REQUIREMENTS_FILE} (or pip install kiwipiepy==0.24.1)"}

LineSplitter = Callable[[Sequence[str]], List[str]]


class PreTokenizerError(BertTfError, ValueError):
    """An unknown pre-tokenizer, or its optional dependency is not installed."""


def is_hangul(char: str) -> bool:
    """Hangul syllables, jamo (conjoining, compatibility, extended A/B) and halfwidth jamo.

    >>> [is_hangul(c) for c in "한ㄱᄀa中"]
    [True, True, True, False, False]
    """
    cp = ord(char)
    return (0xAC00 <= cp <= 0xD7A3 or 0x1100 <= cp <= 0x11FF or 0x3130 <= cp <= 0x318F
            or 0xA960 <= cp <= 0xA97F or 0xD7B0 <= cp <= 0xD7FF or 0xFFA0 <= cp <= 0xFFDC)


def split_at_boundaries(text: str, spans: Iterable[Tuple[int, int]]) -> str:
    """`text` with a space at each (start, end) span boundary that falls between two
    non-space characters of which at least one is Hangul (spans are morphemes; several
    may share a syllable, e.g. 했 = 하 + 었, and then add nothing inside it)."""
    cuts = set()
    n = len(text)
    for start, end in spans:
        for p in (start, end):
            if 0 < p < n:
                cuts.add(p)
    out, last = [], 0
    for p in sorted(cuts):
        a, b = text[p - 1], text[p]
        if a.isspace() or b.isspace() or not (is_hangul(a) or is_hangul(b)):
            continue
        out.append(text[last:p])
        last = p
    out.append(text[last:])
    return " ".join(out)


class KiwiSplitter:
    """Morpheme boundaries from Kiwi (kiwipiepy); one analyser per process."""

    name = "kiwi"

    def __init__(self):
        try:
            from kiwipiepy import Kiwi  # optional (requirements-korean.txt)
        except ImportError:
            raise PreTokenizerError(
                f"--pre_tokenizer=kiwi needs the kiwipiepy package, which is not installed: "
                f"{_PIP_HINT['kiwi']}") from None

        with warnings.catch_warnings():  # 0 = one thread since kiwipiepy 0.21 (it warns)
            warnings.simplefilter("ignore", DeprecationWarning)
            self._kiwi = Kiwi(num_workers=0)

    def __call__(self, lines: Sequence[str]) -> List[str]:
        lines = [t if unicodedata.is_normalized("NFC", t) else unicodedata.normalize("NFC", t)
                 for t in lines]
        out = list(lines)
        todo = [i for i, t in enumerate(lines) if any(is_hangul(c) for c in t)]
        if todo:
            # One thread (num_workers=0): the data jobs run one process per core already.
            for i in todo:
                tokens = self._kiwi.tokenize(lines[i])
                out[i] = split_at_boundaries(
                    lines[i], [(t.start, t.start + t.len) for t in tokens])
        return out


_MODULES = {"kiwi": "kiwipiepy"}


def check_available(name: str) -> None:
    """Raises PreTokenizerError (what to pip install) unless `name` can run here; loads no
    model (a parent process checks before its workers start).

    >>> check_available("nonesuch")
    Traceback (most recent call last):
    ...
    bert_tf.text.pre_tokenizers.PreTokenizerError: --pre_tokenizer=nonesuch: unknown; choose one of kiwi
    """
    if name not in _MODULES:
        raise PreTokenizerError(f"--pre_tokenizer={name}: unknown; choose one of "
                                f"{', '.join(PRE_TOKENIZERS)}")
    if importlib.util.find_spec(_MODULES[name]) is None:
        raise PreTokenizerError(
            f"--pre_tokenizer={name} needs the {_MODULES[name]} package, which is not "
            f"installed: {_PIP_HINT[name]}")


@functools.lru_cache(maxsize=None)
def get_pre_tokenizer(name: str) -> LineSplitter:
    """The line splitter called `name` (cached per process: analysers load models).

    Raises PreTokenizerError for an unknown name, or saying what to pip install.
    """
    check_available(name)
    return KiwiSplitter()


def split_lines(lines: Sequence[str], pre_tokenizer: str | None) -> List[str]:
    """`lines` pre-split by `pre_tokenizer` (None: unchanged). For clients of a model
    pretrained with one, before the raw-text signature."""
    if not pre_tokenizer:
        return list(lines)
    return get_pre_tokenizer(pre_tokenizer)(lines)
