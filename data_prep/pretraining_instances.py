"""The original create_pretraining_data algorithm, step for step, over token ids.

Every function is pure apart from the explicit `random.Random` it is given, and calls that
generator in exactly the order the original google-research/bert tool does, so the same seed
over the same documents gives the same instances. Tokens are WordPiece ids (ints), not
strings: `VocabIds` carries the few ids the algorithm needs and, for whole-word masking, a
table saying which ids are "##" continuation pieces.

    >>> import random
    >>> vocab = VocabIds(cls_id=101, sep_id=102, mask_id=103, vocab_size=30522)
    >>> docs = [[[2023, 2003], [1037, 6251, 1012]], [[2178, 3793, 1012]]]
    >>> pool = create_training_instances(
    ...     docs, max_seq_length=16, dupe_factor=1, short_seq_prob=0.1, masked_lm_prob=0.15,
    ...     max_predictions_per_seq=3, vocab=vocab, rng=random.Random(12345))
    >>> [inst.input_ids[0] for inst in pool]
    [101, 101]
"""

from __future__ import annotations

import random
import struct
from array import array
from typing import Iterator, List, MutableSequence, NamedTuple, Optional, Sequence

# A document is a list of segments (one per input line); a segment is a sequence of ids.
Segment = Sequence[int]
Document = Sequence[Segment]


class VocabIds(NamedTuple):
    """The vocabulary facts the algorithm needs.

    `is_continuation[id]` is truthy when the WordPiece `id` starts with "##"; it is only read
    for whole-word masking (build it with `continuation_table`).

        >>> VocabIds(cls_id=101, sep_id=102, mask_id=103, vocab_size=30522).mask_id
        103
    """

    cls_id: int
    sep_id: int
    mask_id: int
    vocab_size: int
    is_continuation: Optional[Sequence[int]] = None


def continuation_table(vocab_tokens: Sequence[str]) -> bytes:
    """One byte per id: 1 when the token starts with "##" (a word continuation piece).

        >>> list(continuation_table(["[CLS]", "un", "##aff", "##able"]))
        [0, 0, 1, 1]
    """
    return bytes(1 if tok.startswith("##") else 0 for tok in vocab_tokens)


class TrainingInstance(NamedTuple):
    """One pretraining example before padding (docs/contracts.md §2 holds the padded record).

    `input_ids` is `[CLS] A [SEP] B [SEP]` after masking; `masked_lm_ids` are the original ids
    at `masked_lm_positions` (sorted); `is_random_next` is the NSP label (True = random B).

        >>> TrainingInstance([101, 7, 102, 8, 102], [0, 0, 0, 1, 1], False, [1], [7]).is_random_next
        False
    """

    input_ids: List[int]
    segment_ids: List[int]
    is_random_next: bool
    masked_lm_positions: List[int]
    masked_lm_ids: List[int]


_BIT_LENGTH = [n.bit_length() for n in range(4096)]


def shuffle(x: list, rng: random.Random) -> None:
    """`rng.shuffle(x)`, faster for a plain `random.Random`: the same draws, inlined.

    CPython 3.x's shuffle swaps x[i] with x[_randbelow(i + 1)] for i from the end, and
    _randbelow(n) draws getrandbits(n.bit_length()) until the value is below n. Doing that
    here without the per-draw method calls roughly halves the cost of the masking step, the
    hottest loop of the job; the test checks the result and the generator state are equal.
    Any other generator (a subclass, a test double) gets its own `shuffle`.

        >>> a, b = list(range(10)), list(range(10))
        >>> r1, r2 = random.Random(5), random.Random(5)
        >>> r1.shuffle(a); shuffle(b, r2)
        >>> a == b and r1.random() == r2.random()
        True
    """
    if type(rng) is not random.Random or len(x) >= len(_BIT_LENGTH):
        rng.shuffle(x)
        return
    getrandbits = rng.getrandbits
    for i, n, k in _shuffle_steps(len(x)):
        j = getrandbits(k)
        while j >= n:
            j = getrandbits(k)
        x[i], x[j] = x[j], x[i]


_STEPS: dict = {}


def _shuffle_steps(length: int):
    # (i, i + 1, bit length of i + 1) for i from length - 1 down to 1, built once per length.
    steps = _STEPS.get(length)
    if steps is None:
        if length > 512:  # rare lengths (document lists): not worth keeping in memory
            return ((i, i + 1, _BIT_LENGTH[i + 1]) for i in range(length - 1, 0, -1))
        steps = _STEPS[length] = tuple((i, i + 1, _BIT_LENGTH[i + 1])
                                       for i in range(length - 1, 0, -1))
    return steps


def _candidate_positions(tokens: list, cls_id: int, sep_id: int) -> List[int]:
    # Positions that are neither [CLS] nor [SEP], found with list.index (C speed) rather than
    # a Python loop over every token.
    special = []
    for s in (cls_id, sep_id):
        start = 0
        try:
            while True:
                k = tokens.index(s, start)
                special.append(k)
                start = k + 1
        except ValueError:
            pass
    special.sort()
    cand: List[int] = []
    prev = 0
    for k in special:
        cand.extend(range(prev, k))
        prev = k + 1
    cand.extend(range(prev, len(tokens)))
    return cand


def truncate_seq_pair(tokens_a: MutableSequence[int], tokens_b: MutableSequence[int],
                      max_num_tokens: int, rng: random.Random) -> None:
    """Shortens the pair in place to `max_num_tokens`, the original way.

    The longer side loses one token at a time (B when they are equal), from the front or the
    back with equal probability; the randomness avoids always cutting sentence ends.

        >>> a, b = [1, 2, 3, 4], [5, 6]
        >>> truncate_seq_pair(a, b, 4, random.Random(0))
        >>> len(a) + len(b), b
        (4, [5, 6])
    """
    # Which side loses a token depends only on the lengths, so count the cuts and slice once
    # (same draws, same result as deleting one token at a time).
    len_a, len_b = len(tokens_a), len(tokens_b)
    front_a = back_a = front_b = back_b = 0
    rand = rng.random
    while len_a + len_b > max_num_tokens:
        if len_a > len_b:
            assert len_a >= 1
            len_a -= 1
            if rand() < 0.5:
                front_a += 1
            else:
                back_a += 1
        else:
            assert len_b >= 1
            len_b -= 1
            if rand() < 0.5:
                front_b += 1
            else:
                back_b += 1
    if front_a or back_a:
        tokens_a[:] = tokens_a[front_a:len(tokens_a) - back_a]
    if front_b or back_b:
        tokens_b[:] = tokens_b[front_b:len(tokens_b) - back_b]


def create_masked_lm_predictions(tokens: Sequence[int], masked_lm_prob: float,
                                 max_predictions_per_seq: int, vocab: VocabIds,
                                 rng: random.Random, do_whole_word_mask: bool = False,
                                 candidates: Optional[List[int]] = None):
    """Chooses the masked positions and replaces them 80% [MASK] / 10% random / 10% kept.

    Returns `(output_ids, positions, labels)`: `positions` sorted, `labels` the original ids
    there. `[CLS]`/`[SEP]` are never chosen. With `do_whole_word_mask`, a "##" piece joins the
    candidate before it so a word is chosen whole, but the 80/10/10 draw is still made for each
    piece separately, as in the original.

    `candidates`, when the caller knows them, are the positions that are neither [CLS] nor
    [SEP] in increasing order (taken over, not copied); otherwise they are searched for.
    An `array` of tokens gives an `array` of output ids (a list otherwise).

        >>> vocab = VocabIds(cls_id=101, sep_id=102, mask_id=103, vocab_size=30522)
        >>> out, pos, lab = create_masked_lm_predictions(
        ...     [101, 7, 8, 9, 102], 0.15, 20, vocab, random.Random(1))
        >>> len(pos), lab == [[101, 7, 8, 9, 102][p] for p in pos]
        (1, True)
    """
    cls_id, sep_id = vocab.cls_id, vocab.sep_id
    num_to_predict = min(max_predictions_per_seq,
                         max(1, int(round(len(tokens) * masked_lm_prob))))
    if do_whole_word_mask:
        is_cont = vocab.is_continuation
        if is_cont is None:
            raise ValueError("do_whole_word_mask needs VocabIds.is_continuation "
                             "(build it with continuation_table(vocab_tokens))")
        cand_indexes: list = []
        for i, tok in enumerate(tokens):
            if tok == cls_id or tok == sep_id:
                continue
            # Like the original, a "##" piece right after [SEP] joins the last word of A.
            if cand_indexes and is_cont[tok]:
                cand_indexes[-1].append(i)
            else:
                cand_indexes.append([i])
        shuffle(cand_indexes, rng)
        chosen: List[int] = []
        for index_set in cand_indexes:
            if len(chosen) >= num_to_predict:
                break
            # A word that does not fit is skipped, a shorter one later may still fit. (The
            # original also checks for already-covered indexes; groups are disjoint, so it
            # never fires and is left out.)
            if len(chosen) + len(index_set) > num_to_predict:
                continue
            chosen.extend(index_set)
    else:
        # Single-index candidates: the original's loop then takes exactly the first
        # num_to_predict of the shuffled list (shuffle draws depend only on the length).
        cand = candidates
        if cand is None:
            cand = _candidate_positions(list(tokens), cls_id, sep_id)
        shuffle(cand, rng)
        chosen = cand[:num_to_predict]

    output = tokens[:] if type(tokens) in (list, array) else list(tokens)
    rand = rng.random
    mask_id, top = vocab.mask_id, vocab.vocab_size - 1
    # No generator call happens while choosing, so drawing afterwards, in choice order,
    # keeps the original's sequence of calls.
    for i in chosen:
        if rand() < 0.8:
            output[i] = mask_id
        elif rand() < 0.5:
            pass  # keep the original id
        else:
            output[i] = rng.randint(0, top)
    positions = sorted(chosen)
    labels = [tokens[p] for p in positions]
    return output, positions, labels


def create_instances_from_document(all_documents: Sequence[Document], document_index: int,
                                   max_seq_length: int, short_seq_prob: float,
                                   masked_lm_prob: float, max_predictions_per_seq: int,
                                   vocab: VocabIds, rng: random.Random,
                                   do_whole_word_mask: bool = False,
                                   no_special_ids: bool = False,
                                   random_documents: Optional[Sequence[Document]] = None,
                                   random_exclude: Optional[int] = None
                                   ) -> List[TrainingInstance]:
    """All instances from `all_documents[document_index]`, as the original makes them
    (`iter_instances_from_document`'s, in a list).
    """
    return list(iter_instances_from_document(
        all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
        max_predictions_per_seq, vocab, rng, do_whole_word_mask, no_special_ids,
        random_documents, random_exclude))


def iter_instances_from_document(all_documents: Sequence[Document], document_index: int,
                                 max_seq_length: int, short_seq_prob: float,
                                 masked_lm_prob: float, max_predictions_per_seq: int,
                                 vocab: VocabIds, rng: random.Random,
                                 do_whole_word_mask: bool = False,
                                 no_special_ids: bool = False,
                                 random_documents: Optional[Sequence[Document]] = None,
                                 random_exclude: Optional[int] = None
                                 ) -> Iterator[TrainingInstance]:
    """Yields the instances from `all_documents[document_index]`, as the original makes
    them, while walking the document: a book-length document (a `document_store` document
    read on demand) is never in memory, nor are its instances. The random draws are the
    original's, in its order (the caller draws nothing between two instances).

    Segments are packed into chunks up to a target length (shortened to a random length in
    [2, max] with `short_seq_prob`, drawn once per document); A is a random prefix of the
    chunk; B is the rest, or (with probability 0.5, and always when the chunk holds a single
    segment) text from a random other document of `all_documents`, in which case the chunk's
    unused segments are put back.

    `no_special_ids` says no segment of `all_documents` holds the [CLS] or [SEP] id
    (`pool_has_no_special_ids`), so the masking candidates are known from the layout without
    searching. Token ids are kept in `array('i')`s (`input_ids` is one).

    `random_documents` (default `all_documents`) is where random-next text comes from, e.g.
    a `document_store.DocumentStore` of the whole corpus read lazily; `random_exclude` is
    the current document's index there (default `document_index`). The draws are the same
    calls either way.

        >>> vocab = VocabIds(cls_id=101, sep_id=102, mask_id=103, vocab_size=30522)
        >>> docs = [[[2023, 2003], [1037, 6251]], [[2178, 3793]]]
        >>> insts = create_instances_from_document(docs, 0, 8, 0.0, 0.15, 2, vocab,
        ...                                        random.Random(3))
        >>> [len(inst.input_ids) <= 8 for inst in insts]
        [True, True]
    """
    document = all_documents[document_index]
    if random_documents is None:
        random_documents, random_exclude = all_documents, document_index
    elif random_exclude is None:
        random_exclude = document_index
    num_random = len(random_documents)
    # [CLS], [SEP], [SEP]
    max_num_tokens = max_seq_length - 3
    # Mostly full-length sequences; sometimes shorter ones so that pretraining also sees
    # the short inputs fine-tuning will give it.
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    current_chunk: List[Segment] = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = array("i")
                for j in range(a_end):
                    tokens_a.extend(current_chunk[j])

                tokens_b = array("i")
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    # Up to 10 tries for a different document (a pool of one has no other).
                    for _ in range(10):
                        random_document_index = rng.randint(0, num_random - 1)
                        if random_document_index != random_exclude:
                            break
                    random_document = random_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    # The segments after A were not used: go back so they start the next chunk.
                    num_unused_segments = len(current_chunk) - a_end
                    i -= num_unused_segments
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                assert len(tokens_a) >= 1
                assert len(tokens_b) >= 1

                len_a, len_b = len(tokens_a), len(tokens_b)
                tokens = array("i", (vocab.cls_id,))
                tokens += tokens_a
                tokens.append(vocab.sep_id)
                tokens += tokens_b
                tokens.append(vocab.sep_id)
                segment_ids = [0] * (len_a + 2) + [1] * (len_b + 1)
                # Without [CLS]/[SEP] ids in the text, the candidates are A's and B's positions.
                cand = None
                if no_special_ids and not do_whole_word_mask:
                    cand = list(range(1, len_a + 1))
                    cand += range(len_a + 2, len_a + len_b + 2)
                output, positions, labels = create_masked_lm_predictions(
                    tokens, masked_lm_prob, max_predictions_per_seq, vocab, rng,
                    do_whole_word_mask, cand)
                yield TrainingInstance(output, segment_ids, is_random_next, positions, labels)
            current_chunk = []
            current_length = 0
        i += 1


def iter_pool_instances(documents: List[Document], dupe_factor: int, max_seq_length: int,
                        short_seq_prob: float, masked_lm_prob: float,
                        max_predictions_per_seq: int, vocab: VocabIds, rng: random.Random,
                        do_whole_word_mask: bool = False, corpus: Optional[Sequence] = None,
                        corpus_start: int = 0, no_special_ids: Optional[bool] = None):
    """Yields a pool's instances in creation order (before the final shuffle).

    Shuffles `documents` in place first, then makes `dupe_factor` passes over them (each pass
    draws fresh masks), as the original does with its whole corpus. The random-next documents
    come from `documents`, or, when given, from `corpus` (any sequence of documents, e.g. a
    `DocumentStore`), in which `documents` (before the shuffle) are the ones numbered from
    `corpus_start`. Follow with `shuffled_order(count, rng)` on the same `rng` to get the
    original's final instance order without holding the instances. `no_special_ids` says
    whether any document (of `corpus` too) holds the [CLS]/[SEP] ids (default: searched for
    in `documents`, see `pool_has_no_special_ids`).

        >>> vocab = VocabIds(cls_id=101, sep_id=102, mask_id=103, vocab_size=30522)
        >>> docs = [[[5, 6], [7, 8]], [[9, 10]]]
        >>> sum(1 for _ in iter_pool_instances(docs, 2, 8, 0.0, 0.15, 2, vocab, random.Random(0)))
        6
    """
    # Shuffling the positions draws exactly what shuffling the documents does.
    order = list(range(len(documents)))
    shuffle(order, rng)
    documents[:] = [documents[k] for k in order]
    no_special = no_special_ids
    if no_special is None:
        no_special = pool_has_no_special_ids(documents, vocab)
    for _ in range(dupe_factor):
        for document_index in range(len(documents)):
            yield from iter_instances_from_document(
                documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
                max_predictions_per_seq, vocab, rng, do_whole_word_mask, no_special,
                corpus, None if corpus is None else corpus_start + order[document_index])


def pool_has_no_special_ids(documents: Sequence[Document], vocab: VocabIds) -> bool:
    """True when no segment holds the [CLS] or [SEP] id (the usual case: WordPiece never
    gives them for text). `array('i')` segments are searched as bytes (matches that straddle
    two ids are skipped).

        >>> vocab = VocabIds(cls_id=101, sep_id=102, mask_id=103, vocab_size=30522)
        >>> pool_has_no_special_ids([[array("i", [5, 6])]], vocab)
        True
        >>> pool_has_no_special_ids([[[5, 102]]], vocab)
        False
    """
    segments = [seg for doc in documents for seg in doc]
    if all(type(seg) is array and seg.typecode == "i" for seg in segments):
        data = b"".join(segments)
        size = array("i").itemsize
        for t in (vocab.cls_id, vocab.sep_id):
            pattern = struct.pack("i", t)
            at = data.find(pattern)
            while at >= 0:
                if at % size == 0:
                    return False
                at = data.find(pattern, at + 1)
        return True
    specials = (vocab.cls_id, vocab.sep_id)
    return not any(t in seg for seg in segments for t in specials)


def shuffled_order(count: int, rng: random.Random) -> List[int]:
    """The permutation the original's final `rng.shuffle(instances)` applies to `count` items.

    `[instances[k] for k in shuffled_order(len(instances), rng)]` equals
    `rng.shuffle(instances)` with the same generator state (shuffle draws depend only on the
    length).

        >>> shuffled_order(4, random.Random(0))
        [2, 0, 1, 3]
    """
    order = list(range(count))
    shuffle(order, rng)
    return order


def create_training_instances(documents: List[Document], max_seq_length: int, dupe_factor: int,
                              short_seq_prob: float, masked_lm_prob: float,
                              max_predictions_per_seq: int, vocab: VocabIds,
                              rng: random.Random,
                              do_whole_word_mask: bool = False) -> List[TrainingInstance]:
    """All instances of a pool of documents, shuffled: the original's whole job in memory.

    `documents` is shuffled in place. Given the whole corpus and `random.Random(random_seed)`
    this returns the original tool's instances in its order.

        >>> vocab = VocabIds(cls_id=101, sep_id=102, mask_id=103, vocab_size=30522)
        >>> len(create_training_instances([[[5, 6], [7, 8]]], 8, 3, 0.0, 0.15, 2, vocab,
        ...                               random.Random(0)))
        5
    """
    instances = list(iter_pool_instances(documents, dupe_factor, max_seq_length, short_seq_prob,
                                         masked_lm_prob, max_predictions_per_seq, vocab, rng,
                                         do_whole_word_mask))
    return [instances[k] for k in shuffled_order(len(instances), rng)]
