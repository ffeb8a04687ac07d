"""Write the saturated arithmetic pool of examples/arith-mixed.yaml (examples/data/arith-mixed-{train,eval}.jsonl).

Train: the 200 easy training problems of ``examples/arith-tiny.yaml`` (compact prompts; the shipped tiny model was
warmed up on them) followed by 200 medium ones (numbers to 99, which it almost never gets right); eval: the same 100
easy held-out problems as arith-tiny. Deterministic (the arithmetic task's seeds); ``python
benchmarks/make_mixed_pool.py`` rewrites the same bytes.
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
    for name, rs in (("train", rows(easy.train_problems(), "easy") + rows(medium.train_problems(), "medium")),
                     ("eval", rows(easy.eval_problems(), "easy"))):
        path = out / f"arith-mixed-{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rs))
        print(f"wrote {path} ({len(rs)} rows)")


if __name__ == "__main__":
    main()
