"""Exports a model dir as a SavedModel for TF Serving (DESIGN 2.5).

    python -m bert_tf.export_model --init_checkpoint=DIR --export_dir=EXPORT_DIR \\
        [--version=N] [--max_seq_length=128]

DIR is what convert_checkpoint, pretrain or finetune wrote. The SavedModel goes to
EXPORT_DIR/<version> (default: the next free integer, 1 for a new EXPORT_DIR), ready for
`tensorflow_model_server --model_base_path=EXPORT_DIR`. See docs/serving.md.
"""

from absl import app, flags, logging

flags.DEFINE_string("init_checkpoint", None,
                    "Model dir (or checkpoint prefix in one) from convert_checkpoint, "
                    "pretrain or finetune.")
flags.DEFINE_string("export_dir", None, "Base directory; the model goes to EXPORT_DIR/<version>.")
flags.DEFINE_integer("version", None, "Version subdirectory (default: next free integer).")
flags.DEFINE_integer("max_seq_length", None,
                     "Raw-text signatures pack and truncate to this many tokens (default: the "
                     "fine-tuning max_seq_length, 128 for encoders).")
flags.DEFINE_string("bert_config_file", None, "Overrides the config stored in the model dir.")
flags.DEFINE_string("vocab_file", None, "Overrides the vocab stored in the model dir.")
flags.DEFINE_bool("do_lower_case", None, "Overrides the casing stored in the model dir.")
flags.mark_flags_as_required(["init_checkpoint", "export_dir"])

FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from bert_tf.export import export_model_dir  # late: flags parse before TF loads

    path = export_model_dir(FLAGS.init_checkpoint, FLAGS.export_dir, version=FLAGS.version,
                            max_seq_length=FLAGS.max_seq_length,
                            bert_config_file=FLAGS.bert_config_file,
                            vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case)
    logging.info("exported %s", path)
    print(path)


if __name__ == "__main__":
    app.run(main)
