"""A dense reward for trainer tests: a randomly initialised model gets non-zero, varied rewards.

Used as ``task.options.reward_fn: "dense_reward:sevens"`` (this folder is on ``sys.path`` /
``PYTHONPATH`` in the tests). Completions containing ``0`` are unscorable (None), so the
trainer's counting of unscorable completions is exercised too.
"""


def sevens(completions, answers):
    return [None if "0" in c else c.count("7") / max(1, len(c)) for c in completions]


def varied(completions, answers):
    """A reward that differs between (almost) any two distinct completions: no all-equal groups."""
    return [(sum(map(ord, c)) % 7) / 6 for c in completions]


def huge(completions, answers):
    """Rewards beyond float32's range (1e39) for completions with a '7': they must count as unscorable."""
    return [1e39 if "7" in c else 0.5 for c in completions]


def above_one(completions, answers):
    """Rewards in [1, 2]: fine for the plain trainer, an error for an allocation rule's Beta posterior."""
    return [1.0 + c.count("7") / max(1, len(c)) for c in completions]


_calls = {"n": 0}


def pause_at_second_call(completions, answers):
    """:func:`sevens`, but the second call on a batch (step 2's rewards, with no evaluation; the one-completion call
    of the check before the run does not count) waits for the file ``$UGRPO_TEST_RELEASE`` to exist (at most 60 s):
    the run is paused, still running, after step 1's line."""
    import os
    import time

    _calls["n"] += len(completions) > 1
    if _calls["n"] == 2 and len(completions) > 1:
        release, t0 = os.environ["UGRPO_TEST_RELEASE"], time.time()
        while not os.path.exists(release) and time.time() - t0 < 60:
            time.sleep(0.05)
    return sevens(completions, answers)


def gold_only(completions, answers):
    """Scores the gold answers themselves (the check before the run passes) and raises on anything else: every batch
    of model completions is a scoring error."""
    if list(completions) != list(answers):
        raise ValueError("cannot parse the completion")
    return [1.0] * len(completions)


def nan_but_gold(completions, answers):
    """1.0 for the gold answers themselves, NaN (an error, not a number) for anything else."""
    return [1.0 if c == a else float("nan") for c, a in zip(completions, answers)]


def fails_after_first_batch(completions, answers):
    """:func:`sevens` on the gold answers and the first batch of completions (step 1 with no evaluation), raises on
    every later batch: occasional crashes after step 1, counted, not a stop. Reset ``_batches["n"]`` before a run."""
    if len(completions) > 1:
        _batches["n"] += 1
        if _batches["n"] > 1:
            raise RuntimeError("flaky verifier")
    return sevens(completions, answers)


_batches = {"n": 0}


def fails_on_held_out(completions, answers, prompts):
    """:func:`varied` on the training prompts (never unscorable), raises on a batch with a held-out prompt
    (``train_helpers.EVAL_PROMPTS``): every evaluation's completions are unscorable, no training step's."""
    from train_helpers import EVAL_PROMPTS

    if set(prompts) & set(EVAL_PROMPTS):
        raise ValueError("cannot score a held-out problem")
    return varied(completions, answers)
