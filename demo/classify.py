# What a client does with a SavedModel of `export_model` (the demos' last step): load it
# with TensorFlow alone and classify raw text. bert_tf is never imported.
#
#   python demo/classify.py SAVED_MODEL_DIR "a sentence" "another one"
#   python demo/classify.py SAVED_MODEL_DIR < sentences.txt        # one sentence a line
#
# Labels 0 / 1 print as negative / positive (SST-2's and NSMC's labels). A model trained
# on text split by a morpheme analyser (assets.extra/tokenizer_config.json says which)
# must be sent text split the same way: `python -m bert_tf.pre_tokenizers < in > out`.
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # fewer of TensorFlow's C++ log lines
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  registers the raw-text signature's tokenizer ops

assert "bert_tf" not in sys.modules
model_dir = sys.argv[1]
model = tf.saved_model.load(model_dir)
print("signatures:", sorted(model.signatures))
settings_path = os.path.join(model_dir, "assets.extra", "tokenizer_config.json")
if os.path.exists(settings_path):
    with open(settings_path, encoding="utf-8") as f:
        pre_tokenizer = json.load(f).get("pre_tokenizer")
    if pre_tokenizer:
        print(f"note: this model reads text split by --pre_tokenizer={pre_tokenizer}; "
              "send it text split the same way", file=sys.stderr)
serve = model.signatures["serving_default"]
sentences = sys.argv[2:] or [line.rstrip("\n") for line in sys.stdin if line.strip()]
out = serve(text=tf.constant(sentences))
names = {0: "negative", 1: "positive"}
probs = out["probabilities"].numpy()
for i, s in enumerate(sentences):
    label = int(out["label_id"].numpy()[i])
    print(f"  {names[label]:>8}  p={probs[i].max():.3f}  {s}")
