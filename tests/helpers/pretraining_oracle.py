"""The original create_pretraining_data algorithm as an oracle: a plain in-memory
transcription over token *strings* (whole corpus in memory, one generator, the original's
order of generator calls), which data_prep's id-based functions must match exactly for the
same seed; and `first_docs`, a corpus cut to its first documents."""

import collections


def first_docs(lines, n):
    """The lines of a corpus in the original's format (a blank line ends a document) up to
    the end of its `n`th document."""
    out, docs = [], 0
    for line in lines:
        out.append(line)
        if not line.strip():
            docs += 1
            if docs == n:
                break
    return out


def oracle_create_training_instances(all_documents, vocab_words, rng, max_seq_length,
                                     dupe_factor, short_seq_prob, masked_lm_prob,
                                     max_predictions_per_seq, do_whole_word_mask):
    """The original algorithm over token strings, transcribed plainly (whole corpus)."""
    all_documents = [d for d in all_documents if d]
    rng.shuffle(all_documents)
    instances = []
    for _ in range(dupe_factor):
        for document_index in range(len(all_documents)):
            instances.extend(_oracle_from_document(
                all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
                max_predictions_per_seq, vocab_words, rng, do_whole_word_mask))
    rng.shuffle(instances)
    return instances


def _oracle_from_document(all_documents, document_index, max_seq_length, short_seq_prob,
                          masked_lm_prob, max_predictions_per_seq, vocab_words, rng, wwm):
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances = []
    current_chunk, current_length, i = [], 0, 0
    while i < len(document):
        current_chunk.append(document[i])
        current_length += len(document[i])
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = [t for seg in current_chunk[:a_end] for t in seg]
                tokens_b = []
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(all_documents) - 1)
                        if random_document_index != document_index:
                            break
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    i -= len(current_chunk) - a_end
                else:
                    is_random_next = False
                    tokens_b = [t for seg in current_chunk[a_end:] for t in seg]
                while len(tokens_a) + len(tokens_b) > max_num_tokens:
                    trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
                    if rng.random() < 0.5:
                        del trunc[0]
                    else:
                        trunc.pop()
                tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
                segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                tokens, positions, labels = _oracle_mask(
                    tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng, wwm)
                instances.append((tokens, segment_ids, is_random_next, positions, labels))
            current_chunk, current_length = [], 0
        i += 1
    return instances


MaskedLm = collections.namedtuple("MaskedLm", ["index", "label"])


def _oracle_mask(tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng, wwm):
    cand_indexes = []
    for i, token in enumerate(tokens):
        if token in ("[CLS]", "[SEP]"):
            continue
        if wwm and len(cand_indexes) >= 1 and token.startswith("##"):
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    rng.shuffle(cand_indexes)
    output_tokens = list(tokens)
    num_to_predict = min(max_predictions_per_seq,
                         max(1, int(round(len(tokens) * masked_lm_prob))))
    masked_lms, covered = [], set()
    for index_set in cand_indexes:
        if len(masked_lms) >= num_to_predict:
            break
        if len(masked_lms) + len(index_set) > num_to_predict:
            continue
        if any(index in covered for index in index_set):
            continue
        for index in index_set:
            covered.add(index)
            if rng.random() < 0.8:
                masked_token = "[MASK]"
            elif rng.random() < 0.5:
                masked_token = tokens[index]
            else:
                masked_token = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            output_tokens[index] = masked_token
            masked_lms.append(MaskedLm(index, tokens[index]))
    masked_lms.sort(key=lambda m: m.index)
    return output_tokens, [m.index for m in masked_lms], [m.label for m in masked_lms]


# A simple WordPiece-ish test tokenizer (not the product's): words and punctuation, each word
# greedily split into vocabulary pieces, so real text yields "##" pieces for whole-word tests.
