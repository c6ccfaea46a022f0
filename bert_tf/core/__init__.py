"""The TF-free ground every other module stands on (imports nothing above it):

    errors.py        BertTfError, the base of every error the user fixes; Preempted
    constants.py     model input names, special tokens, checkpoint children's names, the
                     protobuf field writer
    file_io.py       local or gs:// paths (TensorFlow only for remote ones), scratch_dir
    output_guard.py  THE rules for a user's files: markers, atomic writes, set-aside, locks
"""
