"""Report of ``ugrpo train`` (:func:`ugrpo.train.loop.train`): ``report.md`` of a training run, with the reward and
held-out accuracy curves as PNG.

Reads only the run folder (config.json, metrics.jsonl, results.json).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ugrpo.report.coverage import coverage_phrase, is_coverage_phrase
from ugrpo.report.markdown import task_text
from ugrpo.report.plots import Series, line_plot
from ugrpo.runs import RunDir
from ugrpo.stats.intervals import wilson_interval

__all__ = ["write_report", "monitor_section", "allocation_section"]


def _series(rows: list[dict], key: str, label: str) -> Series:
    pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return Series(label, x=[p[0] for p in pts], y=[p[1] for p in pts])


def _accuracy_series(rows: list[dict], key: str, label: str) -> Series:
    """Held-out accuracy with a 95% Wilson band over the n evaluated problems (always inside [0, 1]).

    For sampled pass@1 (k samples per problem) the band is also over n problems, not n*k samples: the k samples
    of one problem are correlated, and a per-problem mean in [0, 1] has variance at most p(1-p), so the band is
    conservative. No band where the value lies outside [0, 1] (a custom reward) or n was not recorded."""
    pts = [(r["step"], r[key], r.get("eval_n_problems")) for r in rows if r.get(key) is not None]
    bands = [wilson_interval(y, int(n)) if n and 0.0 <= y <= 1.0 else None for _, y, n in pts]
    return Series(label, x=[p[0] for p in pts], y=[p[1] for p in pts], low=[b and b.ci_low for b in bands],
                  high=[b and b.ci_high for b in bands])


def _acc(row: dict | None, key: str) -> str:
    """``0.540 [0.442, 0.635]``: a held-out accuracy with the 95% Wilson interval of :func:`_accuracy_series`."""
    y = None if row is None else row.get(key)
    if y is None:
        return "-"
    n = row.get("eval_n_problems")
    if not n or not 0.0 <= y <= 1.0:
        return _f(y)
    w = wilson_interval(y, int(n))
    return f"{_f(y)} [{_f(w.ci_low)}, {_f(w.ci_high)}]"


def _change(first: dict | None, last: dict | None, kind: str) -> str:
    """``+0.140 [+0.052, +0.228]``: the mean per-problem change from ``first`` to ``last`` (greedy or pass1 rewards
    of the same problems, ``eval_per_problem``) with its normal 95% interval, paired over problems; "-" without
    them (runs written before the per-problem values were recorded)."""
    a = ((last or {}).get("eval_per_problem") or {}).get(kind)
    b = ((first or {}).get("eval_per_problem") or {}).get(kind)
    if not a or not b or len(a) != len(b) or len(a) < 2:
        return "-"
    import torch

    from ugrpo.stats.intervals import difference_interval

    d = difference_interval(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64))
    return f"{d.estimate:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}] (SE {d.se:.3f})"


def _band_series(rows: list[dict], key: str, label: str, color: str | None = None) -> Series:
    pts = [r for r in rows if r.get(key) is not None]
    return Series(label, x=[r["step"] for r in pts], y=[r[key] for r in pts],
                  low=[r.get(f"{key}_low") for r in pts], high=[r.get(f"{key}_high") for r in pts], color=color)


def monitor_section(run: RunDir, rows: list[dict], group_size) -> str:
    """The G* monitor's part of the report: monitor_g.png, monitor_c.png and a table (empty without a monitor).

    The monitor's rows (``--monitor-every``, :mod:`ugrpo.train.monitor`) hold c1, c3 with 95% intervals,
    the recommended G and the 95% band of near-optimal G (docs/math.md M39-M41).
    """
    mon = [r for r in rows if r.get("monitor_c1") is not None or r.get("monitor_g_recommended") is not None]
    if not mon:
        return ""
    steps = [r["step"] for r in mon]
    rec = [r for r in mon if r.get("monitor_g_recommended") is not None]
    g_series = [Series("recommended G (band: near-optimal for some c1 in its 95% interval)", x=[r["step"] for r in rec],
                       y=[r["monitor_g_recommended"] for r in rec], low=[r.get("monitor_g_band_low") for r in rec],
                       high=[r.get("monitor_g_band_high") for r in rec], color="C0")]
    if group_size:
        g_series.append(Series(f"G in use ({group_size})", x=steps, y=[group_size] * len(steps), dashed=True,
                               color="C3"))
    line_plot(run.file("monitor_g.png"), g_series, xlabel="step", ylabel="group size G", logy=True,
              title="group size: recommendation and near-optimal band (Thm 7)")
    line_plot(run.file("monitor_c.png"), [_band_series(mon, "monitor_c1", "c1 (95% CI)", "C0"),
                                          _band_series(mon, "monitor_c3", "c3 (95% CI)", "C1")],
              xlabel="step", ylabel="constant", title="c1, c3 of Theorem 7 at the current policy")
    table = "\n".join(
        f"| {r['step']} | {_f(r.get('monitor_c1'))} [{_f(r.get('monitor_c1_low'))}, {_f(r.get('monitor_c1_high'))}] | "
        f"{_f(r.get('monitor_c3'))} [{_f(r.get('monitor_c3_low'))}, {_f(r.get('monitor_c3_high'))}] | "
        f"{_f(r.get('monitor_g_recommended'))} | "
        f"[{_f(r.get('monitor_g_band_low'))}, {_f(r.get('monitor_g_band_high'))}] | {_f(r.get('monitor_g_star'))} | "
        f"{r.get('monitor_n_batches', 1)} |" for r in mon)
    last = mon[-1].get("monitor_message") or ""
    return f"""
## Group size (the G* monitor)

![group size](monitor_g.png)

![constants](monitor_c.png)

| step | c1 [95% CI] | c3 [95% CI] | recommended G | 95% band | G* (point) | batches pooled |
|---|---|---|---|---|---|---|
{table}

Last measurement: {last}.
"""


def allocation_section(run: RunDir, rows: list[dict], cfg: dict) -> str:
    """Per-prompt group sizes (``allocation.rule`` != uniform, docs/allocation.md): the G_b histogram over all
    steps, predicted vs realised reward variance per step (``alloc_var.png``) and the certificate; else empty."""
    rule = (cfg.get("allocation") or {}).get("rule", "uniform")
    if rule == "dynamic":
        return _dynamic_section(rows, cfg)
    al = [r for r in rows if r.get("alloc_g_hist")]
    if rule == "uniform" or not al:
        return ""
    counts: dict[int, int] = {}
    for r in al:
        for g, c in r["alloc_g_hist"].items():
            counts[int(g)] = counts.get(int(g), 0) + int(c)
    total = sum(counts.values())
    hist = "\n".join(f"| {g} | {c} | {c / total:.3f} |" for g, c in sorted(counts.items()))
    line_plot(run.file("alloc_var.png"), [_series(al, "reward_var_predicted", "predicted E p(1-p) (posterior mean)"),
                                         _series(al, "reward_var_realised", "realised within-group variance")],
              xlabel="step", ylabel="reward variance (batch mean)", title="reward variance: predicted vs realised")
    spent = sum(r.get("samples", 0) for r in al)
    zero = sum(r.get("samples_zero_std", 0) for r in al)
    return f"""
## Allocation (`{rule}`: {"prompts drawn from a law q" if rule == "uniform-is" else "per-prompt group sizes G_b"})

| G_b | prompts (all steps) | fraction |
|---|---|---|
{hist}

![reward variance](alloc_var.png)

Samples on groups whose rewards were all equal: {zero} of {spent} ({zero / max(spent, 1):.3f}).
{_is_text(al) if rule in ("uniform-is", "ustat-is") else _certificate_text(al)}
"""




def _certificate_text(al: list[dict]) -> str:
    """The certificate (docs/allocation.md A6): mean posterior median and the last step's interval (nominal 95%,
    M60-M61) of the within-batch MSE ratio chosen / uniform G, and against uniform G* where the monitor gave c1."""
    ratios = [r["alloc_predicted_ratio"] for r in al if r.get("alloc_predicted_ratio") is not None]
    last = next((r for r in reversed(al) if r.get("alloc_predicted_ratio_low") is not None), None)
    text = (f"Certificate: predicted within-batch MSE of the chosen G_b relative to uniform G at the same N "
            f"(`alloc_predicted_ratio`, posterior median from the history, M33/M45): mean "
            f"{_f(sum(ratios) / max(len(ratios), 1))} over {len(ratios)} steps (a prediction, not a measurement).")
    if last is not None:
        text += (f" Step {last.get('step')}: {_f(last['alloc_predicted_ratio'])}, interval "
                 f"[{_f(last['alloc_predicted_ratio_low'])}, {_f(last['alloc_predicted_ratio_high'])}] (nominal 95%; "
                 f"{coverage_phrase()}).")
    gs = next((r for r in reversed(al) if r.get("alloc_predicted_ratio_gstar") is not None), None)
    if gs is not None:
        text += (f" Full MSE (c1 from the G* monitor) against the best single G* = {gs['alloc_gstar']} at the same N, "
                 f"step {gs.get('step')}: {_f(gs['alloc_predicted_ratio_gstar'])}, interval "
                 f"[{_f(gs['alloc_predicted_ratio_gstar_low'])}, {_f(gs['alloc_predicted_ratio_gstar_high'])}] "
                 "(coverage of this one not measured).")
    return text


def _is_text(al: list[dict]) -> str:
    """Prompt importance sampling (docs/allocation.md A8, docs/math.md M52-M59): the weights, the law's entropy, the
    samples spent against the expected N, and the certificate of the second-moment ratio."""
    def mean(key: str) -> float:
        v = [r[key] for r in al if r.get(key) is not None]
        return sum(v) / max(len(v), 1)

    spent = [r["samples"] for r in al if r.get("samples") is not None]
    top = max((r["is_weight_max"] for r in al if r.get("is_weight_max") is not None), default=None)
    choices = [r["is_guard_choice"] for r in al if r.get("is_guard_choice") is not None]
    guard = ("" if not choices else " The held-out guard (M78) used " + ", ".join(
        f"{c} in {choices.count(c)}" for c in dict.fromkeys(choices)) + f" of {len(choices)} steps.")
    return (f"Prompt importance sampling: the step's B prompts drawn from a law q of the history and weighted by "
            f"1/(P q) (unbiased for the uniform-prompt objective, M52). Mean over {len(al)} steps: effective sample "
            f"size of the weights {_f(mean('is_ess'))} of B, largest weight per step {_f(mean('is_weight_max'))} "
            f"(the largest of any step {_f(top)}; at most 1/lambda), entropy of q {_f(mean('is_q_entropy'))} nats of "
            f"{_f(mean('is_q_entropy_max'))} (uniform), samples per step {_n(sum(spent) / max(len(spent), 1))} spent "
            f"against {_n(mean('is_expected_samples'))} expected. Certificate: the posterior median of the second "
            f"moment S(q, G) over uniform prompts' "
            f"(`is_predicted_ratio`, M59, M89; the MSE ratio lies below it when it is below 1) averaged "
            f"{_f(mean('is_predicted_ratio'))}{_last_interval(al)} (a prediction, not a measurement: "
            f"{is_coverage_phrase()}, docs/allocation.md A8; read the interval: with a thin history the median can be "
            f"far off while the interval says so)."
            + guard)


def _last_interval(al: list[dict]) -> str:
    """``, the last step's 95% interval [lo, hi]`` of the prompt-IS certificate (M89), or '' without one; with
    ``allocation.is_certificate_every`` > 1, how many steps computed it and the last of those."""
    certified = [r for r in al if r.get("is_predicted_ratio_low") is not None]
    if not certified:
        return ""
    last = certified[-1]
    every = "" if len(certified) == len(al) else f" over the {len(certified)} of {len(al)} steps that computed it"
    which = "step's" if last is al[-1] else "certificate's"
    return (f"{every}, the last {which} (step {last['step']}) 95% interval [{_f(last['is_predicted_ratio_low'])}, "
            f"{_f(last['is_predicted_ratio_high'])}]")


def _dynamic_section(rows: list[dict], cfg: dict) -> str:
    """DAPO dynamic sampling: samples drawn vs the nominal N per step, rounds, all-equal groups (biased, A5)."""
    tr = [r for r in rows if r.get("dynamic_rounds") is not None]
    if not tr:
        return ""
    N = (cfg.get("budget") or {}).get("samples_per_step")
    spent, zero = sum(r["samples"] for r in tr), sum(r.get("samples_zero_std", 0) for r in tr)
    return f"""
## Allocation (`dynamic`: DAPO dynamic sampling, a biased estimator)

Samples drawn: {spent} over {len(tr)} steps ({spent / len(tr):.1f} per step against N = {N}); rounds per step:
mean {sum(r['dynamic_rounds'] for r in tr) / len(tr):.2f}, max {max(r['dynamic_rounds'] for r in tr)}. Samples in
all-equal groups (dropped, or kept when the rounds ran out): {zero} ({zero / max(spent, 1):.3f}). The batch is
conditioned on informative prompts, so each step estimates the gradient of a different objective
(docs/allocation.md A5).
"""


def write_report(run: RunDir, results: dict | None = None, argv: Sequence[str] | None = None) -> Path:
    """Write ``reward.png``, ``eval.png`` (and the monitor's plots) and ``report.md``; returns the report path.

    A training run's report reads its folder: the metrics rows, config.json, and ``results`` (None: the folder's
    results.json, which the trainer has written); ``argv`` is not shown (the config is the command's record)."""
    rows = run.metrics()
    cfg = run.read_config() or {}
    res = (run.read_results() if results is None else results) or {}
    for name, series, ylabel, title in (
        ("reward.png", [_series(rows, "reward_mean", _reward_label(cfg))], "reward", "training reward"),
        ("eval.png", [_accuracy_series(rows, "eval_accuracy", "greedy accuracy"),
                      _accuracy_series(rows, "eval_pass1", "sampled pass@1")],
         "held-out (95% Wilson interval over problems)", "held-out evaluation"),
    ):
        series = [s for s in series if len(s.x)]
        if series:
            line_plot(run.file(name), series, xlabel="step", ylabel=ylabel, title=title)
    budget = cfg.get("budget", {})
    evals = [r for r in rows if r.get("eval_accuracy") is not None or r.get("eval_pass1") is not None]
    table = "\n".join(f"| {r['step']} | {_acc(r, 'eval_accuracy')} | {_acc(r, 'eval_pass1')} |" for r in evals)
    first = next((r for r in evals if r["step"] == 0), None)
    last = evals[-1] if evals and evals[-1]["step"] > 0 else None
    train_rows = [r for r in rows if r["step"] > 0]
    unscorable = sum(r.get("n_unscorable", 0) for r in train_rows)
    model, task, optim = cfg.get("model", {}), cfg.get("task", {}), cfg.get("optim", {})
    N, G = budget.get("samples_per_step"), budget.get("group_size")
    text = f"""# Training report

Model `{model.get('name')}`, {task_text(task)}, algorithm {cfg.get('algorithm')},
baseline `{cfg.get('baseline')}`, scale `{cfg.get('scale')}`, N = {N}, G = {G},
{res.get('steps', len(train_rows))} steps, optimizer {optim.get('name')} lr {optim.get('lr')},
{_f(res.get('minutes'))} minutes of training{_load(res)}.

| | greedy accuracy | sampled pass@1 |
|---|---|---|
| before (step 0) | {_acc(first, 'eval_accuracy')} | {_acc(first, 'eval_pass1')} |
| after (step {last['step'] if last else '-'}) | {_acc(last, 'eval_accuracy')} | {_acc(last, 'eval_pass1')} |
| change, paired over the problems | {_change(first, last, 'greedy')} | {_change(first, last, 'pass1')} |

Held-out accuracies with 95% Wilson intervals over the evaluated problems (for pass@1 over problems, not samples:
conservative). The change is the mean over the same problems of (after - before), with its 95% normal interval and
standard error from the per-problem differences: more precise than the two intervals above suggest.

![reward](reward.png)

![eval](eval.png)

## Held-out evaluations

| step | greedy accuracy | sampled pass@1 |
|---|---|---|
{table}

Unscorable completions during training: {unscorable}. Oracle extra samples: {res.get('oracle_samples', 0)}.
Prompts skipped as too long: {res.get('skipped_prompts', 0)}.
{monitor_section(run, rows, budget.get('group_size'))}{allocation_section(run, rows, cfg)}"""
    return run.write_report(text)


def _load(res: dict) -> str:
    """The model's load time, reported apart: a first-use build of a ``tiny:*`` model is not training time."""
    if res.get("load_minutes") is None:
        return ""
    return (f" (loading the model took {res['load_minutes']:.3f} more minutes, including any first-use build of a "
            "tiny model)")


def _f(v) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def _n(v) -> str:
    """A count of samples: whole when it is whole (128, not 128.000)."""
    return "-" if v is None else str(round(v)) if abs(v - round(v)) < 1e-6 else f"{v:.1f}"


def _reward_label(cfg: dict) -> str:
    """The reward curve's label: the plain mean over the step's samples, and, where the rule changes who is sampled,
    that it is then not the uniform-prompt reward."""
    rule = (cfg.get("allocation") or {}).get("rule", "uniform")
    if rule in ("uniform", "dynamic"):
        return "train reward (mean of B*G)"
    why = "prompts drawn from q, unweighted" if rule.endswith("-is") else "prompt b counts G_b times"
    return f"train reward (mean of the step's samples; {why}: not the uniform-prompt mean)"
