"""A UGRPOTrainer run with per-prompt group sizes, for 1 process or under ``torchrun`` (tests/integrations).

``python trl_alloc_driver.py OUT PER_DEVICE_BATCH RUN [RUN ...]``, each RUN ``RULE[:SAFE_TOL[:IS_GUARD[:STEPS]]]``:
one after the other in the same processes (one interpreter start for all), STEPS (default 6) steps of SGD on the
tiny model (random weights), the prompts of :data:`trl_helpers.VARIED`, the {0, 1} reward
:func:`trl_helpers.any_digit_reward`, the allocation's ``safe_tol`` (default 0) and ``is_guard`` (``true``/``false``,
default true; prompt IS only). Rank 0 writes ``OUT/RULE/model.safetensors`` and ``OUT/RULE/sizes.json`` (prompts
and G_b of every step; prompt IS: the last step's weights).

Generation is the one part replaced: TRL's HF ``generate`` draws from each process's global torch RNG, so 1 and 2
processes would sample different completions. Here row g of prompt x at step s gets a completion drawn from
``numpy.random.default_rng([s, x, g])`` (independent of the process layout), so the two runs see the same samples;
everything else (the sampler, the gathers, the allocation, rewards, advantages, the loss and DDP's all-reduce) is
TRL's and ugrpo's own code.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for `tests.` and `ugrpo`

from tests.integrations.trl_helpers import VARIED, any_digit_reward, grpo_config  # noqa: E402


def seeded_completions(trainer, eos: int, vocab: int):
    """A ``_generate_single_turn`` replacement: completions keyed by (step, dataset index, row within the group)."""
    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        cur = trainer.ugrpo_allocation.current
        assert cur is not None and len(prompt_ids) == len(cur.local_groups)
        out = []
        for x, g in zip(cur.local_prompts.tolist(), cur.local_ranks.tolist()):
            rng = np.random.default_rng([cur.step, x, g])
            n = int(rng.integers(1, 8))
            out.append(rng.integers(3, vocab, size=n).tolist() + [eos])
        return out, None
    return generate


def main(out: Path, per_device: int, rule: str, safe_tol: float = 0.0, is_guard: bool = True, steps: int = 6) -> None:
    """One run of the module docstring into ``out``."""
    import torch
    from datasets import Dataset
    from safetensors.torch import save_file

    from ugrpo.integrations.trl import AdvantageSpec, AllocationSpec, UGRPOTrainer
    from ugrpo.lm.tiny import build_tiny_model
    from ugrpo.lm.tokenizer import build_char_tokenizer

    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    tok = build_char_tokenizer()
    args = grpo_config(out, max_steps=steps, num_generations=4, per_device_train_batch_size=per_device, optim="sgd",
                       learning_rate=0.05, lr_scheduler_type="constant", max_grad_norm=0.0, loss_type="dr_grpo",
                       max_completion_length=8)
    trainer = UGRPOTrainer(model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=any_digit_reward, args=args,
                           train_dataset=Dataset.from_dict({"prompt": VARIED}), processing_class=tok,
                           advantages=AdvantageSpec(),
                           allocation=AllocationSpec(rule=rule, safe_tol=safe_tol, is_guard=is_guard))
    trainer._generate_single_turn = seeded_completions(trainer, tok.eos_token_id, len(tok))
    trainer.train()
    if trainer.accelerator.is_main_process:
        model = trainer.accelerator.unwrap_model(trainer.model)
        save_file({k: v.detach().clone() for k, v in model.named_parameters()}, str(out / "model.safetensors"))
        log = [{"step": a.step, "prompts": a.prompts.tolist(), "sizes": a.sizes.tolist()}
               for a in trainer.ugrpo_allocation.log]
        if trainer.ugrpo_allocation.allocator.is_rule:  # prompt IS: the weights of the last step too
            log[-1]["weights"] = trainer.ugrpo_allocation.allocator.prompt_weights(
                torch.arange(len(log[-1]["sizes"]))).tolist()
        (out / "sizes.json").write_text(json.dumps(log))


def parse_run(spec: str) -> tuple:
    """``RULE[:SAFE_TOL[:IS_GUARD[:STEPS]]]`` -> main's (rule, safe_tol, is_guard, steps) given."""
    rule, *rest = spec.split(":")
    conv = (float, lambda x: x == "true", int)
    return (rule, *(f(x) for f, x in zip(conv, rest)))


if __name__ == "__main__":
    root, per_device = Path(sys.argv[1]), int(sys.argv[2])
    for spec in sys.argv[3:]:
        run = parse_run(spec)
        (root / run[0]).mkdir(parents=True, exist_ok=True)
        main(root / run[0], per_device, *run)
