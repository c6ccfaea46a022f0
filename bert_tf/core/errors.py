"""The base class of every error a user fixes with a flag, a file or a path.

Every command runs through `bert_tf.app.cli.run_main`, which prints such an error as one line
(`COMMAND: error: MESSAGE`) on stderr and exits with status 1, without a traceback; any
other exception is a bug and keeps its traceback. The concrete classes keep a builtin base
too (`class ConfigError(BertTfError, ValueError)`), so `except ValueError` still catches them.

TF-free, so the offline data tools (data_prep) derive their errors from it too.

>>> class VocabError(BertTfError, ValueError):
...     pass
>>> isinstance(VocabError("vocab.txt: line 3 is empty"), ValueError)
True
"""


class BertTfError(Exception):
    """An error in the user's input: the message names the file, flag or variable and
    says what to do."""


class UsageError(BertTfError, ValueError):
    """Flag values that do not make a run: printed first, then a pointer to --helpfull."""


class StopRequested(Exception):
    """Raised inside training (held-out evaluation, a record copy) when a stop was
    requested: the Trainer saves a checkpoint and returns "preempted". Here rather than in
    training/preemption.py so that the record readers (bert_tf/data) raise it without
    importing the training package."""


class Preempted(BertTfError):
    """A run stopped by SIGTERM (a preemption notice) or SIGINT after writing its
    checkpoint: the same command resumes from it. `cli.run_main` logs the message and
    exits with `exit_code` (128 + the signal: 143 for SIGTERM, which schedulers read as
    "terminated, restart me"; 130 for SIGINT)."""

    exit_code = 143

    def __init__(self, message: str = "", exit_code: int = 143):
        super().__init__(message)
        self.exit_code = exit_code
