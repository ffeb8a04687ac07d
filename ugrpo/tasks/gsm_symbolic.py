"""GSM-Symbolic grade-school word problems, generated offline by reasoning-gym (``pip install 'ugrpo[gsm]'``).

reasoning-gym's ``gsm_symbolic`` dataset instantiates GSM8K-style templates (85 of its 100
templates; its ``tasks_ok`` list) with random names, objects and numbers, and computes the answer in
code: no files and no network. Item ``i`` of a reasoning-gym dataset of seed ``s`` is drawn from
``random.Random(s + i)`` (its template from ``Random(s).choices``), so the same seed gives the
same problems on every machine.

Splits. The eval problems come from the reasoning-gym seed ``seed * 10**7 + 5 * 10**6`` and the
train problems from ``seed * 10**7``; duplicates within a split and train problems whose question
text is an eval question are skipped, so the splits never overlap (by question text). So are the
draws whose answer is negative (13 of 20,000 measured, all of template 24: "How old was David when
he saw the Comet for the first time?" -> -1): a flaw of that template, not a problem with an answer.

Prompt. ``prompt_template`` (``{question}`` replaced; default the Qwen2.5-Math style of
:data:`ugrpo.tasks.qa.DEFAULT_TEMPLATE`, "put your final answer within \\boxed{}") around
reasoning-gym's question, which ends "Give the result as your final answer. Do not include units.".
The prompt is raw text; a chat model gets it as one user turn with ``model.chat: true``.

Verifier. The gold answer is reasoning-gym's ``answer`` (a number as text, e.g. ``"28080"``,
``"9281.25"``); a completion is scored as GSM8K is (:func:`ugrpo.tasks.qa.verify_qa`): the last
``\\boxed{}``, else the last number, equal to the gold exactly; otherwise math-verify decides
(``\\frac{...}{...}`` and the like); unparsable -> unscorable (reward 0, counted). Not
reasoning-gym's own ``score_answer``: it reads the *first* number of the text it is given (it
expects an already extracted answer, so on a chain of thought it scores an intermediate result)
and gives 0.01 to a wrong number, where the paper's reward is binary.

Difficulty. reasoning-gym supports only ``difficulty=1.0`` for this dataset; problems differ in
difficulty by template. ``Problem.meta`` has the template id (``template``) and the number of
steps of reasoning-gym's reference solution (``steps``, its lines before ``####``): over the 85
templates the mean is 2 to 14 steps (median 3), which is the per-prompt spread that allocation
rules use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

from ugrpo.errors import UserError
from ugrpo.tasks.base import OptionError, Problem, VerifyStats, check_options
from ugrpo.tasks.mathcheck import MathChecker, TimeoutMode
from ugrpo.tasks.qa import DEFAULT_TEMPLATE, check_template, render_prompt, verify_qa

__all__ = ["GSMSymbolicTask", "MissingExtraError", "make_gsm_symbolic", "GSM_SYMBOLIC_OPTIONS"]

_STREAM = 10**7  # reasoning-gym seeds of one task seed: [seed * _STREAM, (seed + 1) * _STREAM)
_EVAL_OFFSET = 5 * 10**6


class MissingExtraError(UserError, ImportError):
    """An optional dependency is not installed (the message names the extra to install)."""


def _reasoning_gym():
    try:
        import reasoning_gym
    except ImportError as e:
        raise MissingExtraError(
            "task 'gsm_symbolic' needs the reasoning-gym package, which is not installed; install it with "
            "`pip install 'ugrpo[gsm]'` (or `pip install reasoning-gym`)") from e
    return reasoning_gym


@dataclass(frozen=True)
class GSMSymbolicTask:
    """GSM-Symbolic problems from reasoning-gym (module docstring).

    Parameters
    ----------
    seed : int
        Seeds both splits (>= 0); the same seed gives the same problems.
    n_train, n_eval : int
        Problems per split (>= 1).
    prompt_template : str
        Must contain ``{question}``; default :data:`ugrpo.tasks.qa.DEFAULT_TEMPLATE`.
    timeout_s, timeout_mode, fast_path, workers
        The math-verify settings of :class:`ugrpo.tasks.qa.QATask`.
    """

    seed: int = 0
    n_train: int = 500
    n_eval: int = 200
    prompt_template: str = DEFAULT_TEMPLATE
    timeout_s: float = 5.0
    timeout_mode: TimeoutMode = "auto"
    fast_path: bool = True
    workers: int = 0

    name: ClassVar[str] = "gsm_symbolic"

    def __post_init__(self) -> None:
        for f in ("seed", "n_train", "n_eval"):
            v = getattr(self, f)
            low = 0 if f == "seed" else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise OptionError(f"gsm_symbolic: {f} must be an integer >= {low}, got {v!r}")
        check_template(self.name, self.prompt_template)
        if not isinstance(self.fast_path, bool):
            raise OptionError(f"gsm_symbolic: fast_path must be True or False, got {self.fast_path!r}")
        _reasoning_gym()  # a clear error now, not at the first batch
        object.__setattr__(self, "_checker", MathChecker(self.timeout_s, self.timeout_mode, self.workers))
        object.__setattr__(self, "_cache", {})

    def _splits(self) -> dict[str, list[Problem]]:
        cache: dict = self.__dict__["_cache"]
        if not cache:
            base = self.seed * _STREAM
            cache["test"] = self._draw("test", base + _EVAL_OFFSET, self.n_eval, frozenset())
            taken = frozenset(p.meta["question"] for p in cache["test"])
            cache["train"] = self._draw("train", base, self.n_train, taken)
        return cache

    def _draw(self, split: str, rg_seed: int, n: int, exclude: frozenset) -> list[Problem]:
        """``n`` distinct problems of reasoning-gym seed ``rg_seed`` whose question is not in ``exclude``."""
        rg = _reasoning_gym()
        size = 2 * n + 100  # ~0.4% of draws repeat a question (measured: 1993 distinct of 2000)
        ds = rg.create_dataset("gsm_symbolic", seed=rg_seed, size=size)
        templates = getattr(ds, "task_indices", None)
        problems: list[Problem] = []
        seen = set(exclude)
        for i in range(size):
            item = ds[i]
            question = item["question"]
            if question in seen or Fraction(str(item["answer"])) < 0:  # a negative age: a flawed draw (docstring)
                continue
            seen.add(question)
            cot = item["metadata"].get("answer_cot", "")
            meta: dict[str, Any] = {
                "question": question, "solution": cot,
                "steps": sum(1 for line in cot.split("\n") if line.strip() and not line.startswith("####")),
                "template": int(templates[i]) if templates is not None else None,
                "source": f"reasoning-gym gsm_symbolic seed={rg_seed} index={i}",
            }
            problems.append(Problem(id=f"gsm_symbolic-{split}-{len(problems):05d}",
                                    prompt=render_prompt(self.prompt_template, question),
                                    answer=str(item["answer"]), meta=meta))
            if len(problems) == n:
                return problems
        raise ValueError(f"gsm_symbolic: only {len(problems)} distinct {split} problems in {size} draws; "
                         f"ask for fewer than {n}")

    def train_problems(self) -> list[Problem]:
        """``n_train`` problems, none with the question of an eval problem."""
        return list(self._splits()["train"])

    def eval_problems(self) -> list[Problem]:
        """``n_eval`` held-out problems."""
        return list(self._splits()["test"])

    def verify_with_stats(
        self, completions: Sequence[str], problems: Sequence[Problem]
    ) -> tuple[list[float | None], VerifyStats]:
        """Rewards (1.0 / 0.0 / None) with the timeout / parse-failure / error counts."""
        return verify_qa(completions, problems, checker=self.__dict__["_checker"], fast_path=self.fast_path)

    def verify(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[float | None]:
        """1.0 if the final answer equals the gold number, 0.0 if not, None if unscorable."""
        return self.verify_with_stats(completions, problems)[0]


GSM_SYMBOLIC_OPTIONS = ("seed", "n_train", "n_eval", "prompt_template", "timeout_s", "timeout_mode", "fast_path",
                        "workers")


def make_gsm_symbolic(**options: Any) -> GSMSymbolicTask:
    """``get_task("gsm_symbolic", **options)``; options: see :class:`GSMSymbolicTask`."""
    check_options("gsm_symbolic", options, GSM_SYMBOLIC_OPTIONS)
    return GSMSymbolicTask(**options)
