"""WordPiece tokenization inside the TensorFlow graph, exact to the original BERT.

`BertTokenizer` gives exactly the ids of google-research/bert's `FullTokenizer` (cased and
uncased), but runs as TensorFlow ops, so it works eagerly on batches, inside `tf.function`,
`tf.data` and in an exported SavedModel that takes raw strings (the SavedModel needs only
TensorFlow and tensorflow_text, never bert_tf).

The original's character rules (whitespace, control, punctuation, CJK ideographs,
accent stripping) and vocab reading come from `bert_tf.text.text_rules`, which the offline
tools' pure-Python `WordPieceTokenizer` shares; `bert_tf.text.codepoint_tables` runs them over
every code point once into lookup tables. In the graph: decode UTF-8 (invalid bytes
dropped, as Python's "ignore"), look up each character's template, expand, re-encode,
split on ' ', then WordPiece with tensorflow_text's `FastWordpieceTokenizer` (words over
`max_input_chars_per_word` characters become [UNK] first, as the original does).
`encode` packs `[CLS] a [SEP] (b [SEP])` with `bert_tf.text.packing.pack_inputs`.

`strip_accents` (Hugging Face's meaning, `text_rules.text_mode`) selects the tables:
None follows do_lower_case (the original); lower-casing with `strip_accents=False` keeps
marks and Hangul syllables, and the cleaned text is first NFC-normalized with TF Text's
`normalize_utf8` (with an offsets map for `tokenize_with_offsets`), as Hugging Face's
Python BasicTokenizer does; cased with `strip_accents=True` strips without lower-casing.

Example:

>>> import os, tempfile
>>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "!", "##s"]
>>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> _ = open(path, "w").write("\\n".join(vocab) + "\\n")
>>> tok = BertTokenizer(path, do_lower_case=True)
>>> tok.tokenize(["Hello, WORLDs!"]).to_list()
[[5, 1, 6, 8, 7]]
>>> tok.decode([[2, 5, 6, 8, 3, 0]])
['hello worlds']
"""

from __future__ import annotations

import os
import weakref
from typing import List, Optional, Sequence, Union

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.core import constants
from bert_tf.text import codepoint_tables as ct, text_rules
from bert_tf.text.packing import pack_inputs

def _utf8_length(cp):
    """Bytes of each code point in UTF-8 (int32 tensor in, int32 out)."""
    return (1 + tf.cast(cp >= 0x80, tf.int32) + tf.cast(cp >= 0x800, tf.int32)
            + tf.cast(cp >= 0x10000, tf.int32))


# --------------------------------------------------------------------------------------
# The tokenizer.


TextsLike = Union[str, bytes, Sequence[Union[str, bytes]], np.ndarray, tf.Tensor]
_PACK_FNS = weakref.WeakKeyDictionary()  # tokenizer -> {(pair, length): tf.function}


# tensorflow_text's FastWordpieceTokenizer refuses longer vocab entries ("##" excluded).
MAX_WORDPIECE_BYTES = 256


class BertTokenizer(tf.Module):
    """In-graph WordPiece tokenizer giving the original BERT `FullTokenizer`'s ids.

    Args:
      vocab_file: one token per line; must hold [PAD] [UNK] [CLS] [SEP] [MASK].
      do_lower_case: uncased (lower + NFD + strip accents) as the original's flag.
      strip_accents: as Hugging Face's: None (default) follows do_lower_case, exactly the
        original; False with do_lower_case lower-cases but keeps accents, and Hangul in
        composed syllables (the text is NFC-normalized first, see `text_rules.text_mode`);
        True strips accents also when cased.
      max_input_chars_per_word: longer words (in code points) become [UNK].

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(path, "w").write("[PAD]\\n[UNK]\\n[CLS]\\n[SEP]\\n[MASK]\\n한국\\n##어\\n")
    >>> BertTokenizer(path, do_lower_case=True, strip_accents=False).tokenize(
    ...     ["한국어", "\\u1112\\u1161\\u11ab\\u1100\\u116e\\u11a8\\u110b\\u1165"]).to_list()
    [[5, 6], [5, 6]]
    """

    def __init__(self, vocab_file, do_lower_case: bool = True,
                 strip_accents: Optional[bool] = None,
                 max_input_chars_per_word: int = text_rules.MAX_INPUT_CHARS_PER_WORD,
                 name: Optional[str] = None):
        super().__init__(name=name)
        import tensorflow_text as tf_text  # registers its ops; 1.3 s, so only when used

        self._vocab_file = os.fspath(vocab_file)
        vocab = text_rules.load_vocab(self._vocab_file)
        token_to_id = text_rules.vocab_index(vocab)  # the original's dict: a duplicate keeps its last index
        text_rules.check_special_tokens(token_to_id, self._vocab_file)
        self._vocab = vocab
        self._token_to_id = token_to_id
        self._do_lower_case = bool(do_lower_case)
        self._strip_accents = None if strip_accents is None else bool(strip_accents)
        self._mode = text_rules.text_mode(self._do_lower_case, self._strip_accents)
        self._max_chars = int(max_input_chars_per_word)
        # The vocab travels with any SavedModel that holds this tokenizer (assets/).
        self.vocab_asset = tf.saved_model.Asset(self._vocab_file)

        t = ct.tables(self._mode.lower, self._mode.strip)
        self._first_multi = t.first_multi
        self._first_special = t.first_special
        self._isolate_pattern = t.isolate_pattern
        self._page = tf.constant(t.page)
        self._blocks = tf.constant(t.blocks)
        self._template_len1 = tf.constant(t.template_len1)
        self._template_matrix = tf.constant(t.template_matrix)
        if self._mode.lower:
            self._class_page = tf.constant(t.class_page)
            self._class_blocks = tf.constant(t.class_blocks)
        if self._mode.strip:
            self._full_page = tf.constant(t.full_page)
            self._full_blocks = tf.constant(t.full_blocks)
            self._full_starts = tf.constant(t.full_starts)
            self._full_lengths = tf.constant(t.full_lengths)
            self._full_values = tf.constant(t.full_values)
            self._full_ccc = tf.constant(t.full_ccc)
            self._full_mn = tf.constant(t.full_mn)
        if self._mode.nfc:
            # Cleaning before NFC (as Hugging Face's BasicTokenizer): the cased tables are
            # exactly the original's cleanup, one code point or none per character.
            clean = ct.tables(False, False)
            self._clean_page = tf.constant(clean.page)
            self._clean_blocks = tf.constant(clean.blocks)
            self._clean_len1 = tf.constant(clean.template_len1)

        # WordPiece: only tokens the original could ever emit (each with its final id).
        self._wordpiece_vocab = _wordpiece_vocab(token_to_id, self._vocab_file)
        wp_tokens, wp_ids = list(self._wordpiece_vocab), list(self._wordpiece_vocab.values())
        self._wp_remap = (None if wp_ids == list(range(len(vocab)))
                          else tf.constant(np.array(wp_ids, np.int64)))
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=wp_tokens, suffix_indicator="##", unknown_token=constants.UNK_TOKEN,
            max_bytes_per_word=4 * self._max_chars + 8, token_out_type=tf.int64,
            no_pretokenization=True, support_detokenization=False)

        spec = [tf.TensorSpec([None], tf.string)]
        # Plain graph code (explicit tf.cond), so no autograph: tracing stays quick.
        self._tokenize_fn = tf.function(self._tokenize_impl, input_signature=spec,
                                        autograph=False)
        self._words_fn = tf.function(self._words_impl, input_signature=spec, autograph=False)
        self._basic_fn = tf.function(self._basic_impl, input_signature=spec, autograph=False)
        self._offsets_fn = tf.function(self._offsets_impl, input_signature=spec,
                                       autograph=False)

    # ---------------------------------------------------------------- properties
    @property
    def vocab(self) -> List[str]:
        return list(self._vocab)

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    @property
    def do_lower_case(self) -> bool:
        return self._do_lower_case

    @property
    def strip_accents(self) -> Optional[bool]:
        """As given (None: follows do_lower_case)."""
        return self._strip_accents

    @property
    def vocab_file(self) -> str:
        return self._vocab_file

    @property
    def max_input_chars_per_word(self) -> int:
        return self._max_chars

    @property
    def wordpiece_vocab(self) -> dict:
        """token -> id of the tokens WordPiece can emit (the vocab less tokens that no
        word matches: empty, with whitespace, "##"; and those too long for the in-graph
        WordPiece), in vocab order."""
        return dict(self._wordpiece_vocab)

    @property
    def pad_id(self) -> int:
        return self._token_to_id[constants.PAD_TOKEN]

    @property
    def unk_id(self) -> int:
        return self._token_to_id[constants.UNK_TOKEN]

    @property
    def cls_id(self) -> int:
        return self._token_to_id[constants.CLS_TOKEN]

    @property
    def sep_id(self) -> int:
        return self._token_to_id[constants.SEP_TOKEN]

    @property
    def mask_id(self) -> int:
        return self._token_to_id[constants.MASK_TOKEN]

    def token_to_id(self, token: str) -> int:
        """Id of `token` (its last line for a duplicate); KeyError when absent."""
        try:
            return self._token_to_id[token]
        except KeyError:
            raise KeyError(f"token {token!r} is not in vocab {self._vocab_file}") from None

    def id_to_token(self, token_id: int) -> str:
        token_id = int(token_id)
        if not 0 <= token_id < len(self._vocab):
            raise IndexError(f"id {token_id} out of range for vocab {self._vocab_file} "
                             f"of size {len(self._vocab)}")
        return self._vocab[token_id]

    # ---------------------------------------------------------------- public ops
    def tokenize(self, texts: TextsLike) -> tf.RaggedTensor:
        """WordPiece ids, int64 RaggedTensor [batch, (pieces)], no [CLS]/[SEP]."""
        return self._tokenize_fn(_as_batch(texts))

    def tokenize_words(self, texts: TextsLike) -> tf.RaggedTensor:
        """Ids per basic-tokenizer word: int64 RaggedTensor [batch, (words), (pieces)]."""
        return self._words_fn(_as_batch(texts))

    def basic_tokenize(self, texts: TextsLike) -> tf.RaggedTensor:
        """Words after the original's BasicTokenizer: string RaggedTensor [batch, (words)]."""
        return self._basic_fn(_as_batch(texts))

    def tokenize_with_offsets(self, texts: TextsLike):
        """(ids, start_bytes, end_bytes), each int64 RaggedTensor [batch, (pieces)].

        Offsets are byte positions in the original input strings, [start, end), of the
        characters each WordPiece came from (a word that became [UNK] spans the word).
        """
        return self._offsets_fn(_as_batch(texts))

    def encode(self, texts_a: TextsLike, texts_b: Optional[TextsLike] = None,
               max_seq_length: int = 128):
        """[CLS] A [SEP] (B [SEP]) packed as int32 [batch, max_seq_length] tensors.

        Returns {"input_word_ids", "input_mask", "input_type_ids"}. A pair longer than fits
        is truncated as the original: repeatedly drop the last token of the currently
        longer segment (B on ties); a single text is cut from the end. Zero padded.
        """
        max_seq_length = int(max_seq_length)
        if max_seq_length < (3 if texts_b is not None else 2):
            raise ValueError(f"max_seq_length={max_seq_length} cannot hold [CLS] and [SEP]")
        pair = texts_b is not None
        a = self._tokenize_fn(_as_batch(texts_a))
        b = self._tokenize_fn(_as_batch(texts_b)) if pair else None
        if tf.inside_function():  # being traced (e.g. a SavedModel signature)
            return pack_inputs(a, b, max_seq_length, self.cls_id, self.sep_id)
        # Eagerly: packing compiled once per (pair?, length), kept out of the module's
        # tracked state so that a SavedModel does not carry these functions.
        cache = _PACK_FNS.setdefault(self, {})
        fn = cache.get((pair, max_seq_length))
        if fn is None:
            spec = [tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1)] * (1 + pair)
            fn = tf.function(
                lambda *ab: pack_inputs(ab[0], ab[1] if pair else None, max_seq_length,
                                        self.cls_id, self.sep_id),
                input_signature=spec, autograph=False)
            cache[(pair, max_seq_length)] = fn
        return fn(*([a, b] if pair else [a]))

    def decode(self, ids) -> List[str]:
        """Ids -> text per row, merging "##" pieces, dropping [PAD]/[CLS]/[SEP]."""
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_list()
        elif isinstance(ids, (tf.Tensor, np.ndarray)):
            ids = np.asarray(ids).tolist()
        ids = list(ids)
        if ids and not isinstance(ids[0], (list, tuple, np.ndarray)):
            ids = [ids]  # one sequence
        skip = {self.pad_id, self.cls_id, self.sep_id}
        out = []
        for row in ids:
            tokens = [self.id_to_token(i) for i in row if int(i) not in skip]
            out.append(" ".join(tokens).replace(" ##", "").strip())
        return out

    # ---------------------------------------------------------------- graph internals
    def _lookup(self, page, blocks, cp):
        return tf.gather(blocks, tf.gather(page, tf.bitwise.right_shift(cp, ct.BLOCK_BITS))
                         * ct.BLOCK + tf.bitwise.bitwise_and(cp, ct.BLOCK - 1))

    def _final_sigma(self, cp, tid, char_splits):
        """Swaps in the 'ς' template for every capital sigma in final position."""
        is_sigma = tf.equal(cp, ct.SIGMA)

        def fix():
            cls = self._lookup(self._class_page, self._class_blocks, cp)
            visible = tf.where(tf.not_equal(cls, ct.C_SKIP))[:, 0]
            sig = tf.where(is_sigma)[:, 0]
            n = tf.size(visible, out_type=tf.int64)
            k = tf.searchsorted(visible[None], sig[None], side="left", out_type=tf.int64)[0]
            row = tf.searchsorted(char_splits[None], sig[None], side="right", out_type=tf.int64)[0] - 1
            row_start = tf.gather(char_splits, row)
            row_end = tf.gather(char_splits, row + 1)
            prev = tf.gather(visible, tf.maximum(k - 1, 0))
            nxt = tf.gather(visible, tf.minimum(k + 1, n - 1))
            prev_cased = ((k > 0) & (prev >= row_start)
                          & tf.equal(tf.gather(cls, prev), ct.C_CASED))
            next_cased = ((k + 1 < n) & (nxt < row_end)
                          & tf.equal(tf.gather(cls, nxt), ct.C_CASED))
            final = tf.boolean_mask(sig, prev_cased & ~next_cased)
            return tf.tensor_scatter_nd_update(
                tid, final[:, None], tf.fill(tf.shape(final), ct.T_FINAL_SIGMA))

        return tf.cond(tf.reduce_any(is_sigma), fix, lambda: tid)

    @staticmethod
    def _expand(cp, tid, char_splits, starts_table, lengths_table, values_table):
        """Applies variable-length templates: (value index [M], src char [M], codes [M],
        row splits)."""
        lengths = tf.cast(tf.gather(lengths_table, tid), tf.int64)
        cum = tf.concat([[0], tf.cumsum(lengths)], 0)
        out_start = cum[:-1]
        total = cum[-1]
        # src[p] = the last input character whose output starts at or before p (an empty
        # template shares its start with the next character, which therefore wins).
        marks = tf.scatter_nd(out_start[:, None], tf.ones_like(out_start), total[None] + 1)
        src = tf.cumsum(marks[:-1]) - 1
        offset = tf.range(total) - tf.gather(out_start, src)
        value_index = tf.cast(tf.gather(tf.gather(starts_table, tid), src), tf.int64) + offset
        values = tf.gather(values_table, value_index)
        out = tf.where(values < 0, tf.gather(cp, src), values)
        return value_index, src, out, tf.gather(cum, char_splits)

    def _map_chars(self, texts, with_offsets: bool):
        """Basic tokenization (steps 1-6) as strings whose words are separated by spaces.

        Returns (strings [batch], and for offsets: out [M] int32 output code points where
        the word characters are those >= 0 and != ' ', src [M] int64 the input character
        each came from, cp [N] input code points, byte_starts [N] int64).
        """
        if with_offsets:
            decoded, byte_starts = tf.strings.unicode_decode_with_offsets(
                texts, "UTF-8", errors="ignore")
            byte_starts = byte_starts.flat_values
        else:
            decoded = tf.strings.unicode_decode(texts, "UTF-8", errors="ignore")
            byte_starts = None
        cp = decoded.flat_values
        char_splits = decoded.row_splits
        tid = self._lookup(self._page, self._blocks, cp)
        if self._mode.lower:
            tid = self._final_sigma(cp, tid, char_splits)
        max_tid = tf.reduce_max(tf.concat([tid, [0]], 0))

        def dense(width):
            # Every template fits `width` code points (padding is skipped by the encoder);
            # then a regex isolates punctuation and CJK ideographs.
            def branch():
                if width == 1:
                    values = tf.gather(self._template_len1, tid)
                    out = tf.where(tf.equal(values, ct.SELF), cp, values)
                else:
                    values = tf.gather(self._template_matrix, tid)
                    out = tf.reshape(tf.where(tf.equal(values, ct.SELF), cp[:, None], values),
                                     [-1])
                splits = char_splits * width
                strings = tf.strings.unicode_encode(
                    tf.RaggedTensor.from_row_splits(out, splits, validate=False), "UTF-8",
                    errors="ignore")
                strings = tf.strings.regex_replace(strings, self._isolate_pattern, r" \0 ")
                if not with_offsets:
                    return strings, out, tf.zeros([0], tf.int64)
                src = tf.range(tf.size(out, out_type=tf.int64)) // width
                return strings, out, src
            return branch

        width = int(self._template_matrix.shape[1])

        def fast():
            return tf.cond(max_tid < self._first_multi, dense(1), dense(width))

        if self._first_special < int(self._template_matrix.shape[0]):
            strings, out, src = tf.cond(max_tid >= self._first_special,
                                        lambda: self._special(cp, tid, char_splits), fast)
        else:
            strings, out, src = fast()
        return strings, out, src, cp, byte_starts

    def _special(self, cp, tid, char_splits):
        """The exact slow path for batches with a "special" character (uncased).

        Expands the original's own output (spaces included) from the full-NFD templates
        (marks kept, with their combining class), stable-sorts every run of non-starters
        by combining class as NFD's canonical reordering does (a run never crosses a
        starter, a space or a row), then drops the "Mn" marks.
        """
        full_tid = tf.where(tf.equal(tid, ct.T_FINAL_SIGMA), ct.T_FINAL_SIGMA,
                            self._lookup(self._full_page, self._full_blocks, cp))
        value_index, src, out, out_splits = self._expand(
            cp, full_tid, char_splits, self._full_starts, self._full_lengths,
            self._full_values)
        ccc = tf.cast(tf.gather(self._full_ccc, value_index), tf.int64)
        n = tf.size(out, out_type=tf.int64)
        row_first = tf.scatter_nd(out_splits[:-1, None],
                                  tf.ones_like(out_splits[:-1]), [n + 1])[:n] > 0
        run = tf.cumsum(tf.cast(tf.equal(ccc, 0) | row_first, tf.int64))
        order = tf.argsort(run * 256 + ccc, stable=True)
        keep = ~tf.gather(tf.gather(self._full_mn, value_index), order)
        out = tf.boolean_mask(tf.gather(out, order), keep)
        # Sources stay in input order (a reordered character is attributed to a position
        # of its own run), so offsets stay monotone.
        src = tf.boolean_mask(src, keep)
        cum = tf.concat([[0], tf.cumsum(tf.cast(keep, tf.int64))], 0)
        strings = tf.strings.unicode_encode(
            tf.RaggedTensor.from_row_splits(out, tf.gather(cum, out_splits), validate=False),
            "UTF-8")
        return strings, out, src

    def _clean_nfc(self, texts, with_offsets: bool):
        """TextMode.nfc: the original's cleanup, then NFC (before lower-casing, as Hugging
        Face's BasicTokenizer). The rest of the pipeline then runs on these strings (its
        own cleanup finds nothing left to do).

        Returns the strings, and with offsets a function mapping byte offsets in them
        (ragged [batch, (n)], start or exclusive end) back to the input's bytes.
        """
        import tensorflow_text as tf_text  # registers its ops; 1.3 s, so only when used

        if with_offsets:
            decoded, raw_starts = tf.strings.unicode_decode_with_offsets(
                texts, "UTF-8", errors="ignore")
        else:
            decoded = tf.strings.unicode_decode(texts, "UTF-8", errors="ignore")
        cp = decoded.flat_values
        values = tf.gather(self._clean_len1,
                           self._lookup(self._clean_page, self._clean_blocks, cp))
        out = tf.where(tf.equal(values, ct.SELF), cp, values)  # ct.PAD (dropped) is skipped
        cleaned = tf.strings.unicode_encode(decoded.with_flat_values(out), "UTF-8",
                                            errors="ignore")
        if not with_offsets:
            return tf_text.normalize_utf8(cleaned, "NFC")
        normalized, offsets_map = tf_text.normalize_utf8_with_offsets_map(cleaned, "NFC")
        keep = out >= 0
        kept_raw_start = tf.boolean_mask(raw_starts.flat_values, keep)
        kept_raw_end = kept_raw_start + tf.cast(_utf8_length(tf.boolean_mask(cp, keep)),
                                                tf.int64)
        kept_len = tf.cast(_utf8_length(tf.boolean_mask(out, keep)), tf.int64)
        kept_start = tf.cumsum(kept_len, exclusive=True)        # in all rows' concatenation
        row_len = tf.math.unsorted_segment_sum(
            kept_len, tf.boolean_mask(decoded.value_rowids(), keep), decoded.nrows())
        row_base = tf.cumsum(row_len, exclusive=True)

        def to_input(offsets, is_end: bool):
            cleaned_offsets = tf_text.find_source_offsets(offsets_map, offsets)
            flat = cleaned_offsets.flat_values + tf.gather(row_base,
                                                           cleaned_offsets.value_rowids())
            if is_end:  # the character holding the last byte
                k = tf.searchsorted(kept_start, flat - 1, side="right") - 1
                values = tf.gather(kept_raw_end, tf.maximum(k, 0))
            else:
                k = tf.searchsorted(kept_start, flat, side="right") - 1
                values = tf.gather(kept_raw_start, tf.maximum(k, 0))
            return offsets.with_flat_values(values)

        return normalized, to_input

    def _words(self, texts):
        if self._mode.nfc:
            texts = self._clean_nfc(texts, with_offsets=False)
        strings, _, _, _, _ = self._map_chars(texts, with_offsets=False)
        return tf.strings.split(strings)

    def _basic_impl(self, texts):
        return self._words(texts)

    def _wordpiece_ids(self, words):
        """[num_words] strings -> int64 ragged [num_words, (pieces)] (long words -> [UNK])."""
        # Each distinct word once (a batch of text repeats most words).
        unique, index = tf.unique(words)
        n_chars = tf.strings.length(unique, unit="UTF8_CHAR")
        unique = tf.where(n_chars > self._max_chars, constants.UNK_TOKEN, unique)
        pieces = self._wordpiece.tokenize(unique)
        if self._wp_remap is not None:
            pieces = pieces.with_flat_values(tf.gather(self._wp_remap, pieces.flat_values))
        return tf.gather(pieces, index)

    def _words_impl(self, texts):
        words = self._words(texts)
        pieces = self._wordpiece_ids(words.flat_values)
        return tf.RaggedTensor.from_row_splits(pieces, words.row_splits, validate=False)

    def _tokenize_impl(self, texts):
        return self._words_impl(texts).merge_dims(1, 2)

    def _offsets_impl(self, texts):
        if not self._mode.nfc:
            return self._offsets_of(texts)
        normalized, to_input = self._clean_nfc(texts, with_offsets=True)
        ids, starts, ends = self._offsets_of(normalized)
        return ids, to_input(starts, False), to_input(ends, True)

    def _offsets_of(self, texts):
        strings, out, src, cp, byte_starts = self._map_chars(texts, with_offsets=True)
        words = tf.strings.split(strings)
        flat_words = words.flat_values
        n_chars = tf.strings.length(flat_words, unit="UTF8_CHAR")
        long_word = n_chars > self._max_chars
        flat_words = tf.where(long_word, constants.UNK_TOKEN, flat_words)
        ids, piece_start, piece_end = self._wordpiece.tokenize_with_offsets(flat_words)
        if self._wp_remap is not None:
            ids = ids.with_flat_values(tf.gather(self._wp_remap, ids.flat_values))
        # Word characters in order = the output characters other than spaces and padding.
        word_char = tf.not_equal(out, ct.SPACE) & (out >= 0)
        char_src = tf.boolean_mask(src, word_char)                 # input char per word char
        char_bytes = tf.cast(_utf8_length(tf.boolean_mask(out, word_char)), tf.int64)
        char_byte_start = tf.cumsum(char_bytes, exclusive=True)    # in the words' concatenation
        n_chars64 = tf.cast(n_chars, tf.int64)
        word_char_start = tf.cumsum(n_chars64, exclusive=True)
        word_char_end = word_char_start + n_chars64                # exclusive
        total_bytes = tf.reduce_sum(char_bytes)
        byte_start_ext = tf.concat([char_byte_start, [total_bytes]], 0)
        word_byte_start = tf.gather(byte_start_ext, word_char_start)
        piece_word = ids.value_rowids()
        g_start = tf.gather(word_byte_start, piece_word) + piece_start.flat_values
        g_end = tf.gather(word_byte_start, piece_word) + piece_end.flat_values
        first_char = tf.searchsorted(char_byte_start[None], g_start[None], side="right",
                                     out_type=tf.int64)[0] - 1
        last_char = tf.searchsorted(char_byte_start[None], g_end[None], side="left",
                                    out_type=tf.int64)[0] - 1
        # A word with one piece (a full match or [UNK], also for long words) spans the word.
        single = tf.gather(tf.equal(ids.row_lengths(), 1), piece_word)
        first_char = tf.where(single, tf.gather(word_char_start, piece_word), first_char)
        last_char = tf.where(single, tf.gather(word_char_end, piece_word) - 1, last_char)
        first_src = tf.gather(char_src, first_char)
        last_src = tf.gather(char_src, last_char)
        start_bytes = tf.gather(byte_starts, first_src)
        end_bytes = (tf.gather(byte_starts, last_src)
                     + tf.cast(_utf8_length(tf.gather(cp, last_src)), tf.int64))
        # (The decoder's byte offsets are already relative to each input string.)
        word_splits = words.row_splits
        piece_splits = tf.gather(ids.row_splits, word_splits)

        def batch(values):
            return tf.RaggedTensor.from_row_splits(values, piece_splits, validate=False)

        return batch(ids.flat_values), batch(start_bytes), batch(end_bytes)




def _wordpiece_vocab(token_to_id: dict, vocab_file: str) -> dict:
    """The entries of `token_to_id` WordPiece can emit (BertTokenizer.wordpiece_vocab)."""
    entries = {}
    for token, i in token_to_id.items():
        if not token or any(c.isspace() for c in token) or token == "##":
            continue
        piece = token[2:] if token.startswith("##") else token
        if len(piece.encode("utf-8")) > MAX_WORDPIECE_BYTES:
            # tensorflow_text's WordPiece refuses such entries outright; leave it out
            # (only a word of 86+ characters could ever match it) rather than fail.
            logging.warning("%s line %d: token of %d UTF-8 bytes is longer than the %d "
                            "the in-graph WordPiece supports; it is never emitted "
                            "(words containing it get shorter pieces)", vocab_file,
                            i + 1, len(piece.encode("utf-8")), MAX_WORDPIECE_BYTES)
            continue
        entries[token] = i
    return entries


def _encode_str(text: str) -> bytes:
    """UTF-8 of a Python str. A lone surrogate (not encodable) becomes U+FFFF, which the
    original treats the same way (kept, not cased, in no vocab: its word becomes [UNK]);
    both take 3 bytes, so offsets still point into the surrogatepass encoding."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\uffff" if "\ud800" <= c <= "\udfff" else c
                       for c in text).encode("utf-8")


def _as_batch(texts) -> tf.Tensor:
    """A [batch] string tensor from str/bytes, a list of them, numpy or tf strings."""
    if isinstance(texts, (str, bytes)):
        texts = [texts]
    if isinstance(texts, tf.RaggedTensor):
        raise TypeError("texts must be a dense [batch] string tensor, not ragged")
    if isinstance(texts, (list, tuple)):
        texts = [_encode_str(t) if isinstance(t, str) else t for t in texts]
        t = tf.constant(texts, tf.string) if texts else tf.zeros([0], tf.string)
    else:
        t = tf.convert_to_tensor(texts, tf.string)
    if t.shape.rank == 0:
        t = tf.reshape(t, [1])
    elif t.shape.rank != 1:
        raise ValueError(f"texts must be a [batch] vector of strings, got shape {t.shape}")
    return t
