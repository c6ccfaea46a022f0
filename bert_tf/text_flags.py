"""The text-handling flags every command with a vocab takes, defined in one place.

`--strip_accents` / `--nostrip_accents` (default: follow --do_lower_case, the original)
and, for the commands that read a corpus, `--pre_tokenizer`. Each command defines its
own `--do_lower_case` (defaults differ); model directories record all three in
`tokenizer_config.json` (`bert_tf.model_dir`). Imports absl only (no TensorFlow), so the
offline data jobs use it too.
"""

from __future__ import annotations

from absl import flags

from bert_tf.pre_tokenizers import PRE_TOKENIZERS

STRIP_ACCENTS_HELP = (
    "Strip accents (NFD, drop combining marks). Default: as --do_lower_case (the original "
    "BERT). --nostrip_accents with --do_lower_case lower-cases but keeps accents and Hangul "
    "syllables whole (text NFC-normalized; for Korean: uncased stripping splits every "
    "syllable into jamo). Recorded in the model directory.")


def define_strip_accents_flag(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines --strip_accents (None by default: follows --do_lower_case); idempotent."""
    if "strip_accents" not in flag_values:
        flags.DEFINE_bool("strip_accents", None, STRIP_ACCENTS_HELP, flag_values=flag_values)


def define_pre_tokenizer_flag(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines --pre_tokenizer (None by default); idempotent."""
    if "pre_tokenizer" not in flag_values:
        flags.DEFINE_enum(
            "pre_tokenizer", None, list(PRE_TOKENIZERS),
            "Split text into morphemes before the basic tokenizer (Korean; kiwi = kiwipiepy, "
            "pip install -r requirements-korean.txt). Use the same value for build_vocab, "
            "create_pretraining_data and pretrain (which records it); serving clients split "
            "text the same way (python -m bert_tf.pre_tokenizers).", flag_values=flag_values)


def define_text_flags(flag_values: flags.FlagValues = flags.FLAGS, *,
                      pre_tokenizer: bool = False) -> None:
    """--strip_accents, and --pre_tokenizer when asked."""
    define_strip_accents_flag(flag_values)
    if pre_tokenizer:
        define_pre_tokenizer_flag(flag_values)
