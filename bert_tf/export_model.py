"""Exports a model dir as a SavedModel for TF Serving (DESIGN 2.5).

    python -m bert_tf.export_model --init_checkpoint=DIR --export_dir=EXPORT_DIR \\
        [--version=N] [--max_seq_length=128]

DIR is what convert_checkpoint, pretrain or finetune wrote. The SavedModel goes to
EXPORT_DIR/<version> (default: the next free integer, 1 for a new EXPORT_DIR), ready for
`tensorflow_model_server --model_base_path=EXPORT_DIR`; the path is printed last.
See docs/serving.md for the signatures and client requests.
"""

from absl import app, flags, logging

from bert_tf import text_flags

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines this command's flags (only when run as a program, so importing this module
    never collides with other CLIs' flags).

    >>> fv = flags.FlagValues()
    >>> define_flags(fv)
    >>> _ = fv(["export_model", "--init_checkpoint=m", "--export_dir=e", "--version=3"])
    >>> fv.version, fv.max_seq_length
    (3, None)
    """
    fv = {"flag_values": flag_values}
    flags.DEFINE_string("init_checkpoint", None,
                        "Model dir (or a checkpoint prefix in one) written by "
                        "convert_checkpoint, pretrain or finetune.", **fv)
    flags.DEFINE_string("export_dir", None,
                        "Base directory; the model goes to EXPORT_DIR/<version>.", **fv)
    flags.DEFINE_integer("version", None,
                         "Version subdirectory (default: the next free integer).", **fv)
    flags.DEFINE_integer("max_seq_length", None,
                         "Raw-text signatures pack and truncate to this many tokens "
                         "(default: the fine-tuning max_seq_length; 128 for encoders).", **fv)
    flags.DEFINE_string("bert_config_file", None,
                        "Config to use instead of the one in the model dir.", **fv)
    flags.DEFINE_string("vocab_file", None,
                        "vocab.txt to use instead of the one in the model dir.", **fv)
    flags.DEFINE_bool("do_lower_case", None,
                      "Casing to use instead of the one recorded in the model dir.", **fv)
    text_flags.define_strip_accents_flag(flag_values)
    flags.DEFINE_bool("text_signatures", True,
                      "Include the raw-text signatures (tokenizer in the graph: needs TF Text "
                      "ops in the server). --notext_signatures exports ids signatures only.",
                      **fv)
    flags.mark_flags_as_required(["init_checkpoint", "export_dir"], flag_values=flag_values)


def run(flag_values: flags.FlagValues = FLAGS) -> str:
    """Exports as the flags say; returns EXPORT_DIR/<version>."""
    from bert_tf.export import export_model_dir  # late: flags parse before TF loads

    return export_model_dir(flag_values.init_checkpoint, flag_values.export_dir,
                            version=flag_values.version,
                            max_seq_length=flag_values.max_seq_length,
                            bert_config_file=flag_values.bert_config_file,
                            vocab_file=flag_values.vocab_file,
                            do_lower_case=flag_values.do_lower_case,
                            strip_accents=flag_values.strip_accents,
                            text_signatures=flag_values.text_signatures)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from bert_tf.config import ConfigError
    from bert_tf.export import ExportError
    from bert_tf.model_dir import CheckpointMismatchError
    from bert_tf.tokenization import VocabError

    try:
        path = run()
    except (ExportError, ConfigError, CheckpointMismatchError, VocabError,
            FileNotFoundError) as e:
        # What the user fixes with a flag or a file: the message, not a traceback.
        logging.error("%s", e)
        raise SystemExit(f"export_model: {e}") from None
    logging.info("exported %s", path)
    print(path)


if __name__ == "__main__":
    define_flags()
    app.run(main)
