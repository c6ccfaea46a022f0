"""Stop requests for the training loop: a host flag the running loop reads between steps.

SIGTERM (a preemption notice) and SIGINT (Ctrl-C) both ask the run to stop: the Trainer
finishes the running step (or held-out evaluation batch, or record copy), saves a
checkpoint and the command exits 143 (SIGTERM) or 130 (SIGINT). A second SIGINT quits at
once without saving (exit 130).

A preempted machine gets SIGTERM and a grace period (30 s on GCE preemptible and spot VMs)
before it is killed. The Trainer runs `steps_per_loop` steps (the official configs: 1000)
inside one `tf.function` call, so the notice must reach the loop *while it runs*:

* Python runs signal handlers only between bytecodes of the main thread, and the main
  thread is inside that call. `PreemptionWatcher` therefore routes SIGTERM through
  `signal.set_wakeup_fd` to a thread that is always waiting, and that thread sets
  `requested`, a boolean `tf.Variable` on the host. The loop's condition reads it after
  every step, so training stops after the step that is running, not after the block.
* Under multi_worker_mirrored only the preempted worker sees the signal; the Trainer
  sums every worker's flag in the step's gradient all-reduce, so all workers stop after
  the same step and save the same checkpoint (agreement without extra collectives).

Why not `tf.distribute.experimental.PreemptionCheckpointHandler`: it counts calls of
`handler.run(step_fn)` and agrees on a call number through the coordination service, so
with a multi-step function the checkpoint still waits for the running block; its SIGTERM
handler is a Python handler (runs only between calls); and on Google Cloud TPU and CPU VMs
it does nothing (TF 2.21 logs "PreemptionCheckpointHandler does not support usage with TPU
or CPU device on GCP"). `termination_watcher_fn` plays the part of its `TerminationConfig`
watcher: a function polled every second that returns True when the platform announces a
termination by other means than SIGTERM (e.g. a GCE maintenance event).

>>> watcher = PreemptionWatcher()
>>> with watcher:
...     bool(watcher.requested.numpy())
False
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable, Optional

import tensorflow as tf
from absl import logging


# The signals that ask a run to stop, and what the command then exits with (128 + signal).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class PreemptionWatcher:
    """Context manager: while active, SIGTERM or SIGINT (or `termination_watcher_fn()`)
    sets `requested` (a host bool tf.Variable) and `event` (a threading.Event);
    `signal_number` says which signal came first (SIGTERM for a termination notice).

    Only the main thread can install signal handlers; elsewhere only
    `termination_watcher_fn` is watched. Leaving the context restores the previous
    handlers, so outside training the signals keep their meaning (terminate, interrupt).
    """

    def __init__(self, handle_sigterm: bool = True,
                 termination_watcher_fn: Optional[Callable[[], bool]] = None,
                 poll_seconds: float = 1.0):
        self.handle_sigterm = handle_sigterm
        self.termination_watcher_fn = termination_watcher_fn
        self.poll_seconds = poll_seconds
        with tf.init_scope(), tf.device("/cpu:0"):
            # Each worker's own notice, on its host (create the watcher outside
            # strategy.scope(), as the Trainer is).
            self.requested = tf.Variable(False, trainable=False, name="preemption_requested")
        self.event = threading.Event()
        self.signal_number = None
        self._stop = threading.Event()
        self._threads = []
        self._previous = None

    @property
    def exit_code(self) -> int:
        """128 + the signal that asked to stop (143: SIGTERM, 130: SIGINT)."""
        return 128 + int(self.signal_number or signal.SIGTERM)

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signal_number or signal.SIGTERM).name

    def _set(self, why: str, number=signal.SIGTERM):
        if not self.event.is_set():
            self.signal_number = number
            logging.warning("%s: stopping after the running step to save a checkpoint%s",
                            why, " (Ctrl-C again: quit without saving)"
                            if number == signal.SIGINT else "")
        elif number == signal.SIGINT and self.signal_number == signal.SIGINT:
            logging.warning("SIGINT again: quitting without saving")
            logging.flush()
            os._exit(130)
        self.event.set()
        self.requested.assign(True)

    def reset(self):
        self.event.clear()
        self.signal_number = None
        self.requested.assign(False)

    def __enter__(self):
        self.reset()
        self._stop.clear()
        if (self.handle_sigterm
                and threading.current_thread() is threading.main_thread()):
            read_fd, write_fd = os.pipe()
            os.set_blocking(write_fd, False)
            self._fds = (read_fd, write_fd)
            # A no-op Python handler: the C-level handler writes the signal number to
            # the wakeup fd at once, whatever the main thread is doing (for SIGINT also
            # no KeyboardInterrupt in the middle of a step or a checkpoint write).
            self._previous = {number: signal.signal(number, lambda *_: None)
                              for number in STOP_SIGNALS}
            self._previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
            self._start(self._read_signals)
        if self.termination_watcher_fn is not None:
            self._start(self._poll)
        return self

    def _start(self, target):
        thread = threading.Thread(target=target, daemon=True, name="preemption-watcher")
        thread.start()
        self._threads.append(thread)

    def _read_signals(self):
        read_fd = self._fds[0]
        while True:
            data = os.read(read_fd, 64)
            if not data or self._stop.is_set():
                return
            for number in data:
                if number in STOP_SIGNALS:
                    self._set(signal.Signals(number).name, number)

    def _poll(self):
        while not self._stop.wait(self.poll_seconds):
            if self.termination_watcher_fn():
                self._set("termination notice")
                return

    def __exit__(self, *exc):
        self._stop.set()
        if self._previous is not None:
            signal.set_wakeup_fd(self._previous_fd)
            for number, handler in self._previous.items():
                signal.signal(number, handler)
            self._previous = None
            os.write(self._fds[1], b"\0")  # wakes the reader, which sees _stop
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []
        if getattr(self, "_fds", None):
            for fd in self._fds:
                os.close(fd)
            self._fds = None
        return False
