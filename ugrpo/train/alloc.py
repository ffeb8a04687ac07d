"""Per-prompt group sizes G_b in the trainer (docs/allocation.md): choose them, weight the loss, learn from the step.

Each step: :meth:`Allocator.choose` gives G_b for the B drawn prompts from the run's own history only (never
from this step's samples, so each prompt's leave-one-out estimate stays unbiased, M32) by a rule of
:func:`ugrpo.stats.allocation.allocate`, plus the certificate ``alloc_predicted_ratio``; after sampling,
:meth:`Allocator.observe` adds the step's global rewards (and, for ``ustat``, the score norms of
:meth:`Allocator.step_scores`, docs/allocation.md A3c) to the history.
What a rule knows is the one predictor's posterior (:mod:`ugrpo.stats.predict`, docs/math.md M46-M49); ``ustat``
chooses through the safe rule (:func:`ugrpo.stats.safe.choose_sizes`, M50).
:func:`row_weights` is the per-row weight Gbar/G_b that turns the trainer's usual 1/(B Gbar) sum into the
estimate (1/B) sum_b (1/G_b) sum_g A_bg W_bg (M32-M33).

The prompt importance-sampling rules (``uniform-is``, ``ustat-is``; docs/math.md M52-M59, docs/allocation.md A8)
also choose WHICH prompts a step draws: :meth:`Allocator.prompts` draws the B prompts iid from the law q that
:func:`ugrpo.stats.is_guard.guarded_law` computes from the history only (the rule's law from the predictor's posterior,
judged on held-out visits and replaced when they refute it, docs/math.md M78), with the generator
:func:`ugrpo.train.rollout.choose_prompts` uses; :meth:`Allocator.choose` gives each its G_x and keeps the weights
1/(P q(x_b)), which :meth:`Allocator.prompt_weights` hands to :func:`step_advantages` and :meth:`Allocator.observe` to
the history's held-out sums. ``ustat-is`` with ``allocation.is_spend: exact`` (M88; the TRL adapter's) keeps the law's
q and gives the drawn prompts the sizes :func:`ugrpo.stats.prompt_is.exact_spend_sizes` (exactly N samples) instead
of their G_x (N only in expectation, M56).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ugrpo.stats.allocation import IS_RULES
from ugrpo.stats.certificate import certificate, widening
from ugrpo.stats.history import FIELDS, SECOND, PromptHistory, ScoreNorms, check_unit_rewards
from ugrpo.stats.is_certificate import history_certificate
from ugrpo.stats.is_guard import GUARD_G_MIN, GuardedLaw, guarded_law
from ugrpo.stats.population import population_posteriors
from ugrpo.stats.predict import Posterior, posterior_means, reward_variance
from ugrpo.stats.prompt_is import batch_sizes, step_metrics
from ugrpo.stats.ragged import compute_ragged_advantages, ragged_reward_spread
from ugrpo.stats.safe import choose_sizes
from ugrpo.stats.seeds import stream_seed
from ugrpo.train.config import TrainConfig
from ugrpo.train.rollout import choose_prompts, prompt_generator

__all__ = ["Allocator", "LAW_SOURCE_FILE", "StepScores", "guard_metrics", "row_weights", "step_advantages"]

LAW_SOURCE_FILE = "law_history.json"
"""the checkpoint file of a prompt-IS run with ``allocation.is_law_every`` > 1: the history its law was computed from"""


def row_weights(sizes: Tensor, mean_size: int) -> Tensor:
    """(N,) weight Gbar / G_b of each row (prompt-major); all ones when every G_b = Gbar.

    >>> import torch
    >>> [round(w, 4) for w in row_weights(torch.tensor([2, 6]), 4).tolist()]
    [2.0, 2.0, 0.6667, 0.6667, 0.6667, 0.6667, 0.6667, 0.6667]
    """
    return (mean_size / sizes.double()).repeat_interleave(sizes)


def step_advantages(cfg: TrainConfig, rollout, rewards: Tensor, values,
                    weights: Tensor | None = None) -> tuple[Tensor, int]:
    """((N_local,) float32 advantages times the row weight Gbar/G_b, all-equal group count) (docs/allocation.md).

    One path for equal and ragged groups: :func:`compute_ragged_advantages` with every option of the config (each
    prompt's own G_b in its LOO mean and its std; equal groups reduce on the (B, G) view, so the plain trainer's
    advantages are the dense ones bit for bit) times Gbar/G_b (1 for equal groups), so the loss's usual
    1/(B Gbar) sum is (1/B) sum_b (1/G_b) sum_g A_bg W_bg (M32-M33). ``weights`` (B_local,): the prompt-IS weights
    1/(P q(x_b)) of the local groups (M52), multiplied in per row; None: 1.
    """
    sizes = rollout.group_sizes
    adv = compute_ragged_advantages(rewards, sizes, baseline=cfg.baseline, values=values, scale=cfg.scale,
                                    ddof=cfg.ddof, eps=cfg.eps, zero_std=cfg.zero_std)  # (N_local,), row b*G+g
    w = row_weights(sizes, cfg.budget.group_size)
    if weights is not None:
        w = w * torch.as_tensor(weights, dtype=torch.float64).repeat_interleave(sizes)
    return (adv.advantages * w).float(), adv.n_zero_std


def guard_metrics(gl: GuardedLaw) -> dict:
    """The prompt-IS guard's per-step metrics (docs/allocation.md A8, M78): the candidate used, how far down the list
    it is, and the held-out ratio with its interval of the rule's own law (the first check; none when unguarded)."""
    row = {"is_guard_choice": gl.choice, "is_guard_fallback": gl.fallback}
    if gl.checks:
        c = gl.checks[0]
        row.update(is_guard_ratio=c.ratio, is_guard_ratio_low=c.low, is_guard_ratio_high=c.high)
    return row


class StepScores:
    """``ustat``'s score statistics of one step's local rows (:meth:`Allocator.step_scores`): measured already
    (``norms``) or collected by ``on_logits`` from the update's forward; :meth:`result` after the update."""

    def __init__(self, *, norms: ScoreNorms | None = None, seconds: float = 0.0, recorder=None) -> None:
        self.norms, self.seconds, self.recorder = norms, seconds, recorder

    @property
    def on_logits(self):
        """The callback for :func:`ugrpo.train.update.step_updates` (None: nothing to collect)."""
        return self.recorder

    def result(self) -> tuple[ScoreNorms | None, float]:
        """(the local rows' :class:`ScoreNorms` or None, seconds spent on them)."""
        if self.recorder is not None:
            w2, zw2 = self.recorder.result()
            return ScoreNorms(w2.numpy(), zw2.numpy()), self.recorder.seconds
        return self.norms, self.seconds


def _dropout_active(model) -> bool:
    """True when dropout would perturb the training forward (then ``scores: output`` runs its own): a dropout
    module with p > 0 (e.g. LoRA's) or a positive ``*dropout*`` / ``*pdrop*`` rate in the model's config (HF
    attention dropout is a functional call, not a module)."""
    if not model.training:
        return False
    if any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()):
        return True
    conf = getattr(model, "config", None)
    rates = [v for k, v in (vars(conf).items() if conf is not None else ())
             if ("dropout" in k or "pdrop" in k) and isinstance(v, (int, float)) and not isinstance(v, bool)]
    return any(v > 0 for v in rates)


class Allocator:
    """The allocation rule of a run with its per-prompt history (one per process; all stay identical).
    ``first_step``: the number of the run's first step (1 in ``ugrpo train``, 0 in TRL, whose ``global_step`` counts
    the updates done), where periodic work such as the prompt-IS certificate starts."""

    def __init__(self, cfg: TrainConfig, n_prompts: int, first_step: int = 1) -> None:
        self.cfg, self.al, self.first_step = cfg, cfg.allocation, first_step
        self.N, self.G = cfg.budget.samples_per_step, cfg.budget.group_size
        self.B = self.N // self.G
        self.g_min, self.g_max = self.al.bounds(self.N, self.G)
        self.is_rule = self.al.rule in IS_RULES
        self.held_out = self.is_rule and self.al.is_guard  # the prompt-IS guard's folds (M76)
        if self.held_out:
            self.g_min = max(self.g_min, GUARD_G_MIN)
        self.history = PromptHistory(n_prompts, held_out=self.held_out)
        self.exact_spend = self.al.rule == "ustat-is" and self.al.is_spend == "exact"  # M88 (else M56's joint law)
        self.uses_scores = self.al.rule == "ustat" or self.is_rule
        self.c1: tuple[float, float, float] | None = None  # the G* monitor's latest c1 (estimate, low, high)
        self._law: tuple[int, GuardedLaw] | None = None  # prompt IS: (step, the guarded law and its posterior)
        self._law_source: tuple[int, PromptHistory] | None = None  # is_law_every > 1: (step, the history it read)
        self._weights: np.ndarray | None = None  # prompt IS: this step's (B,) weights 1/(P q(x_b))

    def restore(self, ckpt) -> None:
        """Replace the history by the one saved in checkpoint folder ``ckpt`` as ``history.json`` (checksummed;
        ResumeError if absent, ValueError if it does not fit this run's prompts)."""
        from ugrpo.errors import ResumeError
        from ugrpo.train.checkpoint import read_extra
        from ugrpo.train.resume import check_history_json

        data = read_extra(ckpt, "history.json")
        if data is None:
            raise ResumeError(f"--resume: checkpoint {ckpt} has no history.json, but allocation.rule needs the "
                              "per-prompt history; start a new run with a new --out")
        check_history_json(data, self.history.P, Path(ckpt) / "history.json", FIELDS, SECOND)  # names file, field, fix
        self.history = PromptHistory.from_json(data, self.history.P, f"{ckpt}/history.json", held_out=self.held_out)
        self.restore_law_source(read_extra(ckpt, LAW_SOURCE_FILE), f"{ckpt}/{LAW_SOURCE_FILE}")

    def law_source_json(self) -> dict | None:
        """``allocation.is_law_every`` > 1: the step of the law in use and the history it was computed from (for a
        checkpoint: a resume between two recomputations rebuilds that law exactly); else None."""
        if self._law_source is None:
            return None
        return {"step": self._law_source[0], "history": self._law_source[1].to_json()}

    def law_source_extra(self) -> dict:
        """``{LAW_SOURCE_FILE: law_source_json()}`` for a checkpoint's extra files, or {} when there is none."""
        data = self.law_source_json()
        return {} if data is None else {LAW_SOURCE_FILE: data}

    def restore_law_source(self, data: dict | None, where: str) -> None:
        """Take back what :meth:`law_source_json` saved (None: nothing saved; the next law is computed afresh)."""
        if data is None or self.al.is_law_every == 1:
            return
        if not isinstance(data, dict) or not isinstance(data.get("step"), int) or "history" not in data:
            raise ValueError(f"{where}: expected {{'step': int, 'history': {{...}}}}; restore the checkpoint from a "
                             "copy or start a new run")
        self._law_source = (data["step"], PromptHistory.from_json(data["history"], self.history.P, where,
                                                                  held_out=self.held_out))

    @property
    def uniform(self) -> bool:
        """True when every group has G samples and no history is kept (``uniform``, ``dynamic``)."""
        return self.al.rule in ("uniform", "dynamic")

    def certify(self, post: Posterior, prompts: np.ndarray, sizes: np.ndarray, st, step: int) -> dict:
        """The certificate (docs/allocation.md A6, M45, M60, M61): posterior median and interval (nominal 95%) of
        the within-batch MSE ratio chosen / uniform G from the predictor's posterior under draws of its population
        model, widened by the history's factor; the plug-in ratio; and with the monitor's latest c1 (``ustat`` with
        ``scores: sketch`` only: c1 is of the score over all trainable parameters, so in the history's units only
        then) the full-MSE ratio against the best single G* at the same N."""
        c1 = self.c1 if self.uses_scores and self.al.scores == "sketch" else None  # the monitor sketches all params
        sums = self.history.sums_for_prediction()
        seed = stream_seed(self.cfg.seed, step, 0x636572)
        posts = population_posteriors(sums, prompts, post.hyper, rng=np.random.default_rng([seed, 0x706f70]))
        c = certificate(posts, sizes, self.G, st.c2, st.c3, c1=c1, g_min=self.g_min, g_max=self.g_max, seed=seed,
                        widen=widening(sums))
        row = {"alloc_predicted_ratio": c.ratio, "alloc_predicted_ratio_low": c.ratio_low,
               "alloc_predicted_ratio_high": c.ratio_high, "alloc_predicted_ratio_plugin": c.plugin,
               "alloc_predicted_ratio_widen": c.widen}
        if c.full_ratio is not None:
            row.update(alloc_predicted_ratio_gstar=c.full_ratio, alloc_predicted_ratio_gstar_low=c.full_ratio_low,
                       alloc_predicted_ratio_gstar_high=c.full_ratio_high, alloc_gstar=c.g_star)
        return row

    def note_monitor(self, row: dict) -> None:
        """Keep c1 with its interval from a row with the G* monitor's measurement (for the next certificates)."""
        if row.get("monitor_c1") is not None and row.get("monitor_c1_low") is not None \
                and row.get("monitor_c1_high") is not None:
            self.c1 = (row["monitor_c1"], row["monitor_c1_low"], row["monitor_c1_high"])

    def law(self, step: int) -> GuardedLaw:
        """Prompt IS: the step's law (q, G_x) over every train prompt from the history only (M54-M56), through the
        held-out guard (M78) unless ``allocation.is_guard`` is false, with the posterior of the whole history;
        computed once per step, or with ``allocation.is_law_every`` = k on the first step and every k-th after (the
        steps between keep it; after a resume it is rebuilt from the history it was computed from)."""
        k = self.al.is_law_every
        since = (step - self.first_step) % k
        made = step - since  # the step whose history the law reads
        if self._law is not None and self._law[0] == made:
            return self._law[1]
        source = self.history
        if k > 1:
            if since and self._law_source is not None and self._law_source[0] == made:
                source = self._law_source[1]  # a resume between two recomputations
            else:  # a recomputation (or no saved source: then from the history as it is now)
                self._law_source = (made, PromptHistory.from_json(self.history.to_json(), self.history.P, "history",
                                                                  held_out=self.held_out))
        al = self.al
        self._law = (made, guarded_law(al.rule, source, self.B, self.N, lam=al.is_lambda, g_min=self.g_min,
                                       g_max=al.g_max or 4 * self.G, level=al.safe_level, tol=al.safe_tol,
                                       guard=al.is_guard))
        return self._law[1]

    def prompts(self, step: int) -> np.ndarray:
        """(B,) train-prompt indices of ``step``: iid uniform (:func:`choose_prompts`) or, for the prompt-IS rules,
        iid from the step's law q (M52), with the same generator."""
        if not self.is_rule:
            return choose_prompts(self.history.P, self.B, self.cfg.seed, step)
        return self.law(step).law.draw(prompt_generator(self.cfg.seed, step))

    def prompt_weights(self, position: Tensor) -> Tensor | None:
        """Prompt IS: the weights 1/(P q(x_b)) of the local groups at ``position`` (B_local,); else None."""
        if self._weights is None:
            return None
        return torch.as_tensor(self._weights[position.numpy()], dtype=torch.float64)

    def _choose_is(self, prompts: np.ndarray, step: int) -> tuple[np.ndarray, dict]:
        """Prompt IS: G_x of the drawn prompts, their weights (kept for the loss and the history) and the step's
        metrics (M58) with the guard's choice (M78) and the certificate (M59: under population draws, M60, and widened
        by the history's factor, M89)."""
        gl = self.law(step)
        law, post = gl.law, gl.posterior
        self._weights = law.weights(prompts)
        sizes = batch_sizes(law, gl.moments, prompts, self.N, spend=self.al.is_spend, g_min=self.g_min,
                            g_max=self.g_max)  # G_x (M56), or exactly N in all (M88)
        hist = np.bincount(sizes)
        return sizes, {
            "alloc_g_min": int(sizes.min()), "alloc_g_max": int(sizes.max()),
            "alloc_g_hist": {str(g): int(c) for g, c in enumerate(hist) if c}, **step_metrics(law, prompts),
            **({"is_expected_samples": float(self.N)} if self.exact_spend else {}),  # M88 spends exactly N
            **self._certificate(gl, step),
            "reward_var_predicted": float(reward_variance(post.take(prompts)).mean()), **guard_metrics(gl),
        }

    def _certificate(self, gl: GuardedLaw, step: int) -> dict:
        """The law's certificate (M59: under population draws, M60, widened by the history's factor, M89) on the
        first step and every ``allocation.is_certificate_every`` steps after; {} on the others (it only reports)."""
        if (step - self.first_step) % self.al.is_certificate_every:
            return {}
        seed = stream_seed(self.cfg.seed, step, 0x636572)
        source = self.history if self._law_source is None else self._law_source[1]  # the history the law read
        cert = history_certificate(gl.posterior, gl.law, self.G, source.sums_for_prediction(), seed)
        return {"is_predicted_ratio": cert.ratio, "is_predicted_ratio_low": cert.ratio_low,
                "is_predicted_ratio_high": cert.ratio_high, "is_predicted_ratio_plugin": cert.plugin,
                "is_predicted_ratio_widen": cert.widen}

    def choose(self, prompts: np.ndarray, step: int = 0) -> tuple[np.ndarray, dict]:
        """(G_b (B,), metrics) for the drawn prompts; uniform: every G_b = budget.group_size and no metrics."""
        if self.uniform:
            return np.full(self.B, self.G, dtype=np.int64), {}
        if self.is_rule:
            return self._choose_is(prompts, step)
        al = self.al
        post = self.history.posterior(prompts, scores=self.uses_scores)
        st = posterior_means(post)
        rng = np.random.default_rng(np.random.SeedSequence([int(self.cfg.seed), int(step), 0x736166]))
        sizes, choice = choose_sizes(al.rule, post, self.N, self.G, g_min=self.g_min, g_max=self.g_max,
                                     tol=al.safe_tol, level=al.safe_level, rng=rng)
        hist = np.bincount(sizes)
        row = {
            "alloc_g_min": int(sizes.min()), "alloc_g_max": int(sizes.max()),
            "alloc_g_hist": {str(g): int(c) for g, c in enumerate(hist) if c},
            **self.certify(post, prompts, sizes, st, step),
            "reward_var_predicted": float(reward_variance(post).mean()),
        }
        if choice is not None:  # ustat's guard (M50): the blend weight chosen (None: uniform G) and its quantile
            row.update(alloc_safe_blend=choice.blend, alloc_safe_upper=choice.upper,
                       alloc_safe_plugin_upper=choice.plugin_upper)
        return sizes.astype(np.int64), row

    def check_rewards(self, rewards: Tensor) -> None:
        """A ValueError naming the first reward outside [0, 1] when the rule keeps a history (M38's Beta)."""
        if not self.uniform:
            check_unit_rewards(rewards.numpy(), self.al.rule)

    def sketch(self, model, rollout) -> tuple[Tensor, float]:
        """(sketched scores (N_local, k) of all trainable parameters at the current parameters, seconds):
        ``allocation.scores: sketch`` (docs/allocation.md A3c)."""
        from ugrpo.lm.sketch import sketch_scores

        t0 = time.perf_counter()
        w = sketch_scores(model, rollout, self.al.sketch_dim, seed=int(self.cfg.seed),
                          temperature=self.cfg.sampling.temperature,
                          chunk_size=self.cfg.budget.micro_batch or None)
        return w.double().cpu(), time.perf_counter() - t0

    def step_scores(self, model, batch, rewards: Tensor, group_index: Tensor, *, forward: bool) -> StepScores:
        """``ustat``'s score statistics of this process's rows at the sampling parameters (docs/allocation.md A3c);
        call it before the update. ``batch``: a Rollout or its four tensors, whole groups (``group_index`` (n,) the
        group of each row, ``rewards`` (n,)). ``forward=True``: the caller's update runs the step's forward at these
        parameters and passes the handle's ``on_logits`` to it (``scores: output`` reads that forward; with active
        dropout it runs its own); else everything is measured now."""
        if not self.uses_scores:
            return StepScores()
        if self.al.scores == "sketch":
            w, seconds = self.sketch(model, batch)
            sizes = torch.bincount(torch.as_tensor(group_index).cpu())
            return StepScores(norms=ScoreNorms.from_scores(rewards.numpy(), w.numpy(), sizes.numpy()),
                              seconds=seconds)
        from ugrpo.lm.output_scores import OutputScores, output_score_norms

        T = self.cfg.sampling.temperature
        if forward and not _dropout_active(model):
            return StepScores(recorder=OutputScores(model, batch.completion_ids, batch.completion_mask, group_index,
                                                    rewards, temperature=T))
        t0 = time.perf_counter()
        w2, zw2 = output_score_norms(model, batch, rewards, group_index, temperature=T,
                                     chunk_size=self.cfg.budget.micro_batch or None)
        return StepScores(norms=ScoreNorms(w2.numpy(), zw2.numpy()), seconds=time.perf_counter() - t0)

    def observe(self, prompts: np.ndarray, sizes: np.ndarray, rewards: np.ndarray,
                scores: ScoreNorms | None) -> dict:
        """Add the step's GLOBAL rewards (N,) (and, for ``ustat``, its score norms) to the history; the
        realised-variance metrics."""
        if not self.uniform:  # prompt IS: the draw's weights 1/(P q(x_b)) enter the held-out sums (M76)
            self.history.update(prompts, sizes, rewards, scores, self._weights if self.held_out else None)
        zero, var = (t.numpy() for t in ragged_reward_spread(torch.as_tensor(rewards), torch.as_tensor(sizes)))
        row = {"samples_zero_std": int(sizes[zero].sum())}
        if not self.uniform:
            row["reward_var_realised"] = float(var.mean())
        return row
