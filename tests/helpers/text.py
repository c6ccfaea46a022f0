"""Texts the tokenizer tests share: inputs where a tokenizer that is not the original's
algorithm goes wrong, every code point, real Korean text, and a cased vocab learnt from
lines."""

import pathlib
import unicodedata

from tests import reference_tokenizer as ref

# Inputs where a tokenizer that is not the original's algorithm goes wrong.
HARD_TEXTS = [
    "Hello, WORLD! naïve café Ĺ résumé Æsir œuvre",
    "ΟΔΟΣ ΟΔΟΣ.Α ΣΣ Σ ὈΔΥΣΣΕΎΣ ΆΣ' ΑΣ-Β AΣ\u0301 AΣ\u0301B Σa aΣ",
    "한국어 텍스트입니다. 서울특별시 강남구 (Korean) ㄱㄴㄷ ᄀᄁ",
    "中文、。「」『』ＡＢＣ１２３！（括弧）日本語のテキスト、カタカナ。ｶﾀｶﾅ",
    "𝐀𝐁𝐂 𝒶𝒷𝒸 ① ² ﬁ ㎏ ℃ Ⅻ ℝ",
    "İstanbul İ ı ẞ ß ǅ ǈ ﬀ",
    "a\x00b\ufffdc\u200dd\u2028e\u2029f\x1cg\x85h\x0bi\x0cj\x7fk\u200bl\ufeffm",
    "tab\tnew\nline\r\nret\u00a0nbsp\u3000ideo\u2003em\u1680ogham",
    "", "   ", "\t\n", "\x00", "\u200d",
    "emoji 😀👍🏽👨‍👩‍👧 🇰🇷 ☃",
    "x" * 200, "x" * 201, "é" * 201, "한" * 67, "한" * 66,
    "ａｂｃ ＡＢＣ @#$%^&*()_+-=[]{}|;':\",./<>?`~ ¡¿ « » — – … ‘’ “ ”",
    "Ǆ ǅ ǆ Ǳ Ⓐ ⓐ \u0345 ΑΙ\u0345 ᾼ",
    "\U0001D16D\U0001D165 a\u0301\U0001D16D\u0316\U0001D165b \u302e\u302f 가\u302e",
    "[CLS] [SEP] [UNK] [MASK] ##ing ##",
    "don't won't it's U.S.A. e-mail 3.14 1,000,000 $5 50% a/b",
    "\ud7a3\ud7a4\uac00",  # last Hangul syllable, an unassigned neighbour, first syllable
    "a\ue000b \U000F0000 \u0378x \U0002A6DEy \U0002B73Fz",  # Co, Cn (kept), Cn in CJK ranges
    "\U00020000\U0002A6DF\U0002A700\U00030000 \uf900\ufa0e\U0002F800",  # CJK ext + compat
]

# Real Korean text (see tests/data/korean/README.md).
KOREAN = pathlib.Path(__file__).parent.parent / "data" / "korean" / "kolaw_kobill.txt"


def korean_lines():
    """The non-blank lines of KOREAN."""
    return [ln for ln in KOREAN.read_text(encoding="utf-8").split("\n") if ln.strip()]


def all_code_point_texts():
    """Every assigned code point (and every 97th unassigned / private-use one, and all
    of the CJK ranges) inside a word, a few hundred per text."""
    cps = [cp for cp in range(0x110000)
           if unicodedata.category(chr(cp)) not in ("Cn", "Co", "Cs") or cp % 97 == 0
           or ref._is_chinese_char(cp)]
    # Surrogates cannot be UTF-8 words; tests/test_tokenization.py checks their ids.
    cps = [cp for cp in cps if not 0xD800 <= cp <= 0xDFFF]
    texts = []
    for i in range(0, len(cps), 300):
        texts.append(" ".join(f"a{chr(cp)}b" for cp in cps[i:i + 300]))
    return texts


def cased_vocab_tokens(lines, do_lower_case=False):
    """A small cased (or, `do_lower_case`, uncased) WordPiece vocab learnt crudely from
    `lines` (whole words, chars, ##)."""
    basic = ref.BasicTokenizer(do_lower_case=do_lower_case)
    counts = {}
    for line in lines:
        for w in basic.tokenize(line):
            counts[w] = counts.get(w, 0) + 1
    words = sorted(counts, key=lambda w: (-counts[w], w))
    chars = sorted({c for w in words for c in w})
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(20)] + ["[UNK]", "[CLS]", "[SEP]",
                                                                "[MASK]"]
    tokens += chars + ["##" + c for c in chars]
    tokens += [w for w in words[:3000] if len(w) > 1]
    tokens += ["##" + w[len(w) // 2:] for w in words[:2000] if len(w) > 3]
    seen, out = set(), []
    for t in tokens:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out
