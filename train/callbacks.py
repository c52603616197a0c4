"""Trainer callbacks: a progress bar with loss and tokens/s, and the test hook that dies after a save."""

from __future__ import annotations

import os
import time

from transformers import TrainerCallback

EXIT_AFTER_SAVE = "LEDGERWRIGHT_TEST_EXIT_AFTER_SAVE"


class ProgressBar(TrainerCallback):
    """One tqdm bar on the main process: step, train loss, eval loss and training tokens per second.

    Tokens are the trainer's count of real (non-padding) tokens, summed over processes
    (``state.num_input_tokens_seen``, restored on resume).
    """

    def __init__(self):
        self.bar = None
        self._t0 = None
        self._tok0 = 0
        self.loss = None
        self.eval_loss = None

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=state.max_steps,
                initial=state.global_step,
                desc="train",
                unit="step",
                dynamic_ncols=True,
                mininterval=1.0,
            )
        self._t0 = time.perf_counter()
        self._tok0 = state.num_input_tokens_seen

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is None:
            return
        self.bar.update(state.global_step - self.bar.n)
        dt = time.perf_counter() - self._t0
        post = {}
        if self.loss is not None:
            post["loss"] = f"{self.loss:.3f}"
        if self.eval_loss is not None:
            post["val"] = f"{self.eval_loss:.3f}"
        if dt > 0:
            post["tok/s"] = f"{(state.num_input_tokens_seen - self._tok0) / dt:,.0f}"
        self.bar.set_postfix(post, refresh=False)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "loss" in logs:
            self.loss = logs["loss"]
        if "eval_loss" in logs:
            self.eval_loss = logs["eval_loss"]
            if state.is_world_process_zero:
                from tqdm.auto import tqdm

                tqdm.write(f"step {state.global_step}: validation loss {self.eval_loss:.4f}")

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class ExitAfterSave(TrainerCallback):
    """Test hook: with LEDGERWRIGHT_TEST_EXIT_AFTER_SAVE set, the process dies (no cleanup) right after
    the first checkpoint is written, as if it had been killed."""

    def on_save(self, args, state, control, **kwargs):
        if os.environ.get(EXIT_AFTER_SAVE):
            os._exit(17)
