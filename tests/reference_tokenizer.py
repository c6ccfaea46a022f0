"""Test oracle: the original google-research/bert `FullTokenizer` algorithm in plain Python.

Written from the algorithm's description (it is what `bert/tokenization.py` of
google-research/bert does), kept deliberately literal: per-character loops, Python's own
`str.lower`, `unicodedata.normalize("NFD", ...)`, `str.split()`. bert_tf's in-graph
tokenizer must give exactly these ids. Nothing in bert_tf imports this module.
"""

import collections
import unicodedata


def convert_to_unicode(text):
    """str stays; bytes are decoded as UTF-8 dropping invalid bytes."""
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    raise ValueError(f"Unsupported string type: {type(text)}")


def load_vocab(vocab_file):
    """token -> index; a duplicated token keeps its LAST index (dict overwrite)."""
    vocab = collections.OrderedDict()
    with open(vocab_file, "rb") as f:
        data = f.read().decode("utf-8")
    lines = data.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # readline() returns "" only at EOF: no token for the final newline
    for index, line in enumerate(lines):
        vocab[line.strip()] = index
    return vocab


def whitespace_tokenize(text):
    text = text.strip()
    if not text:
        return []
    return text.split()


def _is_whitespace(char):
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char):
    if char in ("\t", "\n", "\r"):
        return False
    # The original counts only Cc and Cf as control: private-use (Co), surrogate (Cs)
    # and unassigned (Cn) characters are kept.
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
    cp = ord(char)
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp):
    return ((0x4E00 <= cp <= 0x9FFF) or (0x3400 <= cp <= 0x4DBF)
            or (0x20000 <= cp <= 0x2A6DF) or (0x2A700 <= cp <= 0x2B73F)
            or (0x2B740 <= cp <= 0x2B81F) or (0x2B820 <= cp <= 0x2CEAF)
            or (0xF900 <= cp <= 0xFAFF) or (0x2F800 <= cp <= 0x2FA1F))


class BasicTokenizer:
    def __init__(self, do_lower_case=True):
        self.do_lower_case = do_lower_case

    def tokenize(self, text):
        text = convert_to_unicode(text)
        text = self._clean_text(text)
        text = self._tokenize_chinese_chars(text)
        orig_tokens = whitespace_tokenize(text)
        split_tokens = []
        for token in orig_tokens:
            if self.do_lower_case:
                token = token.lower()
                token = self._run_strip_accents(token)
            split_tokens.extend(self._run_split_on_punc(token))
        return whitespace_tokenize(" ".join(split_tokens))

    @staticmethod
    def _run_strip_accents(text):
        text = unicodedata.normalize("NFD", text)
        return "".join(c for c in text if unicodedata.category(c) != "Mn")

    @staticmethod
    def _run_split_on_punc(text):
        output = []
        start_new_word = True
        for char in text:
            if _is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
        return ["".join(x) for x in output]

    @staticmethod
    def _tokenize_chinese_chars(text):
        output = []
        for char in text:
            if _is_chinese_char(ord(char)):
                output.extend((" ", char, " "))
            else:
                output.append(char)
        return "".join(output)

    @staticmethod
    def _clean_text(text):
        output = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or _is_control(char):
                continue
            output.append(" " if _is_whitespace(char) else char)
        return "".join(output)


class WordpieceTokenizer:
    def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text):
        output_tokens = []
        for token in whitespace_tokenize(convert_to_unicode(text)):
            chars = list(token)
            if len(chars) > self.max_input_chars_per_word:
                output_tokens.append(self.unk_token)
                continue
            is_bad = False
            start = 0
            sub_tokens = []
            while start < len(chars):
                end = len(chars)
                cur_substr = None
                while start < end:
                    substr = "".join(chars[start:end])
                    if start > 0:
                        substr = "##" + substr
                    if substr in self.vocab:
                        cur_substr = substr
                        break
                    end -= 1
                if cur_substr is None:
                    is_bad = True
                    break
                sub_tokens.append(cur_substr)
                start = end
            if is_bad:
                output_tokens.append(self.unk_token)
            else:
                output_tokens.extend(sub_tokens)
        return output_tokens


class FullTokenizer:
    def __init__(self, vocab_file, do_lower_case=True):
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

    def tokenize(self, text):
        split_tokens = []
        for token in self.basic_tokenizer.tokenize(text):
            split_tokens.extend(self.wordpiece_tokenizer.tokenize(token))
        return split_tokens

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab[t] for t in tokens]

    def tokenize_to_ids(self, text):
        return self.convert_tokens_to_ids(self.tokenize(text))

    def tokenize_words_to_ids(self, text):
        """[[ids of word 1], [ids of word 2], ...] (basic tokens, each WordPiece'd)."""
        return [self.convert_tokens_to_ids(self.wordpiece_tokenizer.tokenize(w))
                for w in self.basic_tokenizer.tokenize(text)]


def truncate_seq_pair(tokens_a, tokens_b, max_length):
    """The original run_classifier truncation: pop from the longer (b on ties)."""
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def encode(tokenizer, text_a, text_b=None, max_seq_length=128):
    """run_classifier.convert_single_example's packing: ids, mask, type ids (zero padded)."""
    vocab = tokenizer.vocab
    a = tokenizer.tokenize_to_ids(text_a)
    b = tokenizer.tokenize_to_ids(text_b) if text_b is not None else None
    if b is not None:
        truncate_seq_pair(a, b, max_seq_length - 3)
    elif len(a) > max_seq_length - 2:
        a = a[:max_seq_length - 2]
    ids = [vocab["[CLS]"]] + a + [vocab["[SEP]"]]
    types = [0] * len(ids)
    if b is not None:
        ids += b + [vocab["[SEP]"]]
        types += [1] * (len(b) + 1)
    mask = [1] * len(ids)
    pad = max_seq_length - len(ids)
    return ids + [0] * pad, mask + [0] * pad, types + [0] * pad
