"""Write the saturated arithmetic pool of examples/arith-mixed.yaml (examples/data/arith-mixed-{train,eval}.jsonl).

Train: the 200 easy training problems of ``examples/arith-tiny.yaml`` (compact prompts; the shipped tiny model was
warmed up on them) followed by 200 medium ones (numbers to 99, which it almost never gets right); eval: the same 100
easy held-out problems as arith-tiny. Also a small pool with the same mix, ``arith-mixed80-train.jsonl``: the first 40
easy and the first 40 medium of those rows (the dense-history study of docs/lm-sweep.md: B = 4 prompts x 200 steps
visit each of 80 prompts about 10 times, against 2 in the 400-prompt pool). Deterministic (the arithmetic task's
seeds); ``python benchmarks/make_mixed_pool.py`` rewrites the same bytes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ugrpo.tasks import get_task  # noqa: E402


def rows(problems, level: str) -> list[dict]:
    return [{"prompt": p.prompt, "answer": p.answer, "level": level} for p in problems]


def main() -> None:
    opts = {"prompt_style": "compact", "n_train": 200, "n_eval": 100}
    easy = get_task("arithmetic", difficulty="easy", **opts)
    medium = get_task("arithmetic", difficulty="medium", **opts)
    out = ROOT / "examples" / "data"
    easy_rows, medium_rows = rows(easy.train_problems(), "easy"), rows(medium.train_problems(), "medium")
    for name, rs in (("arith-mixed-train", easy_rows + medium_rows),
                     ("arith-mixed-eval", rows(easy.eval_problems(), "easy")),
                     ("arith-mixed80-train", easy_rows[:40] + medium_rows[:40])):
        path = out / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rs))
        print(f"wrote {path} ({len(rs)} rows)")


if __name__ == "__main__":
    main()
