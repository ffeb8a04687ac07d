"""Shared pieces of the TRL integration tests: the tiny model, a prompt set, a dense reward, a config.

The reward is dense on a randomly initialised model (its completions are near-uniform over the
21-token character vocabulary): the fraction of completion characters that are digits of the
prompt. Prompts differ in how many distinct digits they hold, so V(x) and g(x) vary over prompts
(c1 > 0) and most groups have unequal rewards.
"""

from __future__ import annotations

import random

PROMPTS = [f"{a}+{b}=" for a, b in random.Random(0).sample([(a, b) for a in range(10, 100) for b in range(10, 100)],
                                                           64)]


def digit_reward(prompts, completions, **kwargs):
    """TRL reward function: fraction of completion characters that occur among the prompt's digits."""
    out = []
    for p, c in zip(prompts, completions):
        digits = {ch for ch in p if ch.isdigit()}
        out.append(sum(ch in digits for ch in c) / len(c) if c else 0.0)
    return out


VARIED = ["11+11=", "22+22=", "12+34=", "56+78=", "1234+5678=", "9012+3456=", "33+33=", "13+24="]
"""prompts with 1, 2, 4 or 8 distinct digits: success rates of :func:`any_digit_reward` from about 0.3 to 1"""


def any_digit_reward(prompts, completions, **kwargs):
    """TRL reward function in {0, 1}: 1 when the completion holds one of the prompt's digits.

    On the random tiny model the success rate grows with the number of distinct digits of the prompt, so prompts
    differ in p(1-p) by a factor of ten (:data:`VARIED`) and the allocation rules give them different G_b.
    """
    return [float(any(ch.isdigit() and ch in p for ch in c)) for p, c in zip(prompts, completions)]


def grpo_config(tmp_path, **overrides):
    from trl import GRPOConfig

    kw = dict(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=32,
        num_generations=4,
        max_completion_length=8,
        learning_rate=1e-4,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        max_steps=2,
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    kw.update(overrides)
    return GRPOConfig(**kw)


def first_digit_reward(prompts, completions, **kwargs):
    """TRL reward function: fraction of completion characters equal to the prompt's first character.

    Each prompt rewards a different token, so the per-prompt gradients g(x) point in different
    directions and c1 = E||g(X) - g||^2 is clearly positive even for a random model.
    """
    return [sum(ch == p[0] for ch in c) / len(c) if c else 0.0 for p, c in zip(prompts, completions)]


class Recorder:
    """Wraps a trainer's ``_generate_and_score_completions`` (instance attribute) and a reward function.

    ``batches[i]`` is TRL's output of generation batch i (before TRL shuffles it into steps), and
    ``rewards[i]`` the rewards the reward function returned for it, in row order.
    """

    def __init__(self, reward_fn):
        self.reward_fn = reward_fn
        self.batches: list[dict] = []
        self.rewards: list[list[float]] = []
        self.loss_advantages: list = []
        self.__name__ = reward_fn.__name__

    def __call__(self, prompts, completions, **kwargs):
        out = self.reward_fn(prompts, completions, **kwargs)
        self.rewards.append(list(out))
        return out

    def attach(self, trainer):
        gen, loss = trainer._generate_and_score_completions, trainer.compute_loss

        def recorded_gen(inputs):
            out = gen(inputs)
            self.batches.append({k: v.detach().clone() if hasattr(v, "detach") else v for k, v in out.items()})
            return out

        def recorded_loss(model, inputs, *args, **kwargs):
            self.loss_advantages.append(inputs["advantages"].detach().clone())
            return loss(model, inputs, *args, **kwargs)

        trainer._generate_and_score_completions = recorded_gen
        trainer.compute_loss = recorded_loss
        return trainer
