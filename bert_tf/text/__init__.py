"""Text to ids, exact to the original BERT tokenizer:

    text_rules.py        THE tokenizer rules (character classes, vocab reading, host-side
                         WordPiece for the offline jobs); TF-free
    codepoint_tables.py  per-code-point tables for the in-graph tokenizer; numpy only
    pre_tokenizers.py    optional Korean morpheme pre-splitting (kiwi); TF-free
    tokenization.py      BertTokenizer: in-graph WordPiece
    packing.py           pack_inputs: THE `[CLS] a [SEP] (b [SEP])` packing, in the graph
"""
