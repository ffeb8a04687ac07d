"""How much of an AdamW step survives in bfloat16 weights (why the README's GPU section trains float32 weights).

Weights drawn N(0, 0.02^2) (the initializer scale of Qwen2-type models), gradients N(0, 1), one million entries,
one and ten AdamW steps (betas 0.9 / 0.999, no weight decay) at several learning rates, once with bfloat16
parameters (what ``model.dtype: bfloat16`` trains: no float32 master copy) and once with float32. Reported: the
fraction of entries that changed at all, and the mean |change| over the mean |change| in float32. Pure arithmetic
of the number format; no timing, so the machine does not matter.

Run: ``.venv/bin/python benchmarks/bench_bf16_updates.py`` (a few seconds); writes
``benchmarks/results/local/bf16_updates.json`` (reference: ``benchmarks/results/bf16_updates.json``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import write_result  # noqa: E402


def _run(dtype: torch.dtype, lr: float, steps: int, n: int = 1_000_000) -> tuple[float, float]:
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(n, generator=g) * 0.02
    w = torch.nn.Parameter(w0.to(dtype).clone())
    opt = torch.optim.AdamW([w], lr=lr, betas=(0.9, 0.999), weight_decay=0.0)
    for _ in range(steps):
        w.grad = torch.randn(n, generator=g).to(dtype)
        opt.step()
    delta = (w.detach().float() - w0.to(dtype).float()).abs()
    return float((delta > 0).float().mean()), float(delta.mean())


def main() -> None:
    rows = []
    for lr in (1e-6, 1e-5, 1e-4):
        for steps in (1, 10):
            f32_frac, f32_mean = _run(torch.float32, lr, steps)
            bf_frac, bf_mean = _run(torch.bfloat16, lr, steps)
            rows.append({"lr": lr, "steps": steps, "float32_changed_frac": f32_frac, "bfloat16_changed_frac": bf_frac,
                         "bfloat16_over_float32_mean_abs_change": bf_mean / f32_mean})
            print(f"lr {lr:g}, {steps:2d} steps: changed float32 {f32_frac:.3f}, bfloat16 {bf_frac:.3f}; mean |change| "
                  f"bf16/fp32 {bf_mean / f32_mean:.3f}")
    print(write_result("bf16_updates", {"weights": "N(0, 0.02^2), 1e6 entries", "optimizer": "AdamW, no decay",
                                         "rows": rows}))


if __name__ == "__main__":
    main()
