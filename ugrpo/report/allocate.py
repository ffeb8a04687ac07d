"""Report of ``ugrpo allocate`` (:mod:`ugrpo.experiments.allocate`): results.json, allocation.png and report.md
(reads only ``results``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["write_report"]


def _plot(rd, results: dict[str, Any]) -> None:
    """Uniform G's exact MSE against G (a curve), and each per-prompt rule's MSE (which does not depend on G) as a
    horizontal reference line with its 95% interval shaded; one linear y axis."""
    from ugrpo.report.plots import Level, Marker, Series, line_plot

    curve = results["uniform_curve"]
    xs = [c["G"] for c in curve]
    series = [Series("uniform G (exact, B = N/G)", x=xs, y=[c["mse"] for c in curve], color="black")]
    colors = {"vip": "C0", "knapsack": "C3", "ustat": "C2", "ustat+screen": "C4", "uniform-is": "C1", "ustat-is": "C5"}
    levels = [Level(row["mse"], f"{row['rule']} ({row['moments']} moments, B = {row['B']})", row["ci_low"],
                    row["ci_high"], dashed=row["moments"] == "predicted", color=colors.get(row["rule"], "C7"))
              for row in results["rows"] if row["rule"] != "uniform"]
    inst = results["instance"]
    line_plot(rd.file("allocation.png"), series, xlabel="G of the uniform rule (the other rules: one G_b per prompt)",
              ylabel="exact gradient MSE", logx=True, xticks=xs, levels=levels,
              markers=[Marker(inst["best_uniform_G"], f"best uniform G = {inst['best_uniform_G']}")],
              title=f"N = {results['config']['budget']} samples per step: per-prompt rules vs uniform G")


def write_report(rd, results: dict[str, Any], argv: Sequence[str] | None = None) -> Path:
    """results.json, allocation.png and report.md (the run time from ``seconds``); returns the report's path."""
    from ugrpo.report.markdown import fmt, fmt_ci, header, image, md_table

    seconds = results["seconds"]
    rd.write_results(results)
    _plot(rd, results)
    inst, cfg = results["instance"], results["config"]

    def table(rows: list[dict]) -> str:
        return md_table(["rule", "moments", "G (uniform)", "B", "MSE", "95% interval", "mean cost"],
                        [[r["rule"], r["moments"], r.get("G"), r["B"], r["mse"],
                          "exact" if r.get("exact") else fmt_ci(r["ci_low"], r["ci_high"]), r.get("mean_cost")]
                         for r in rows])

    ratios = md_table(["unit", "moments", "rule", "/ rule", "ratio", "95% interval", "interval"],
                      [[r["unit"], r["moments"], r["numerator"], r["denominator"], r["ratio"],
                        fmt_ci(r["ci_low"], r["ci_high"]), r.get("interval", "95% delta method, ratio of paired means")]
                       for r in results["ratios"]])
    q = results["prediction_quality"]
    parts = [
        header("Per-prompt rollout allocation at equal budget (exact synthetic lab)", argv),
        f"Instance {inst['name'] or '(unnamed)'}: P = {inst['P']} prompts, c1 = {fmt(inst['c1'])}, "
        f"c2 = {fmt(inst['c2'])}, c3 = {fmt(inst['c3'])}; budget N = {cfg['budget']} samples per step. "
        f"Best uniform G = {inst['best_uniform_G']} (exact, docs/math.md M11); the other rules allocate over "
        f"B = {inst['B']} prompts drawn uniformly with replacement, as in training. The uniform G is chosen with the "
        "exact constants in both the `true` and the `predicted` rows (the most favourable choice for uniform).",
        "Each rule's MSE is exact given the drawn batch, c1/B + (1/B^2) sum_b f_b(G_b) with the true per-prompt "
        "f_b (M33), averaged over drawn batches; the interval (mean +- 1.96 SE over batches) covers only that "
        "average. `true` rules know the exact per-prompt moments (the ceiling of the gain); `predicted` rules "
        "know the one predictor's posterior of each prompt's moments from a simulated history (docs/math.md M46-M49, "
        "M85-M86: a population model fitted to the history, each prompt's posterior from its own visits).",
        "The prompt importance-sampling rules `uniform-is` and `ustat-is` (docs/math.md M52-M57) draw the B prompts "
        "from a law q over all P prompts (the floor q >= lambda/P, lambda = "
        f"{cfg.get('is_lambda', 0.1):g}) chosen from the same moments, and weight each by 1/(P q): unbiased for the "
        "uniform-prompt gradient. Their MSE is the closed form (1/B)(sum_x a_x(G_x)/(P^2 q(x)) - ||g||^2) with the "
        "true a_x (M53), exact (no batches, so no interval); `mean cost` is their EXPECTED samples per step "
        "(`ustat-is` spends N only on average). Against a rule measured on drawn batches their ratio's interval is "
        "that of the other rule's mean. With the `predicted` moments their law is the trainer's: the rule's law from "
        "the history's posterior, judged on held-out visits of the history and replaced when they refute it "
        f"(docs/math.md M78; guard {'on' if cfg.get('is_guard', True) else 'off'}): "
        + _guard_choices(results["rows"]) + ".",
        "## Samples as the unit (sum_b G_b = N)", table(results["rows"]),
        image("allocation.png", "MSE of each rule against uniform G"),
        "## Tokens as the unit (sum_b L_b G_b <= the tokens uniform G = N/B spends on the same batch)",
        "Sample lengths L_x are seeded per prompt (8 x log-uniform in [2, 32] tokens); vip and knapsack are given "
        "the same token prices in their own objective (their papers allocate rollouts)."
        + _no_is_tokens(cfg.get("rules", ())),
        table(results["token_rows"]) if results["token_rows"] else "(not run: B does not divide N)",
        "## Ratios (over the same batches: a delta-method interval of the paired means, or, against uniform's exact "
        "MSE, the interval of the mean over batches divided by it)", ratios,
        "## How well the history predicts",
        f"History: {results['history']['history_samples']} samples, {results['history']['mean_visits']:.3g} visits "
        f"per prompt on average, {results['history']['prompts_never_visited']} prompts never visited. Per-prompt "
        f"f_b(4): Spearman {fmt(q['spearman_f4'])}, median |log(pred/true)| {fmt(q['median_abs_log_ratio_f4'])}, "
        f"mean pred / mean true {fmt(q['mean_pred_over_true_f4'])}.",
        "Dropping prompts (G_b = 0) is biased unless g(x_b) = 0 (M32); it appears only as the explicit "
        "`ustat+screen` rule (with `--screen`), whose MSE includes that bias exactly (vector formula given the "
        f"batch). Run time {seconds:.1f} s.",
    ]
    return rd.write_report("\n\n".join(parts) + "\n")


def _no_is_tokens(rules) -> str:
    """Why the prompt-IS rules asked for are missing from the tokens table."""
    asked = [r for r in rules if r in ("uniform-is", "ustat-is")]
    if not asked:
        return ""
    return (f" {' and '.join(f'`{r}`' for r in asked)} {'are' if len(asked) > 1 else 'is'} not in this table: a "
            "prompt-IS law is chosen for a budget of samples (B sum_x q(x) G_x = N), and pricing it in tokens would "
            "need the law solved again with the lengths; it is compared in samples only (above).")


def _guard_choices(rows: list[dict]) -> str:
    """Which law the guard used for each prompt-IS rule with predicted moments (docs/math.md M78)."""
    got = [f"`{r['rule']}` used `{r['guard_choice']}`" for r in rows
           if r.get("moments") == "predicted" and r.get("guard_choice")]
    return ", ".join(got) if got else "no guarded rule in this run"
