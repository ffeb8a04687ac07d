"""The parts of the one-GPU check (issue 25); ``benchmarks/gpu_check.sh`` runs each under its own timeout (the file
is not named ``bench_*``: ``make bench``, which runs those on CPUs, leaves it out).

Nothing is downloaded: ``make-model`` builds a Qwen2 model with the shape of Qwen2.5-0.5B (hidden 896, 24 layers,
14 heads, 2 kv heads, MLP 4864, vocabulary 151936, rope theta 1e6, tied embeddings: the values of Qwen2.5-0.5B's
config.json) and random weights (seed 0), with ugrpo's character tokenizer (random weights make any tokenizer
equivalent; its ids are the first of the 151936). The task is ugrpo's arithmetic (generated in code). A random model
almost never emits EOS, so every completion runs to its token limit: the token counts are fixed, the rewards ~0.

Parts (each writes ``<out>/<part>.json``; ``merge`` joins them into one file):

* ``gen``: tokens/s of ``sampling.backend`` hf (``ugrpo.lm.sampling.sample_groups``) against vllm
  (``ugrpo.lm.vllm_engine``) at N = 256 completions (B = 32 prompts x G = 8), the two alternating; the engine's
  start and weight push timed apart; and the seeds contract measured on the real engine: the same call twice, and
  4 prompts alone against inside the full batch (fractions of identical completions);
* ``collect``: the step times of a ``ugrpo train`` run from its metrics.jsonl (the shell script runs the command);
* ``plan``: the pilot costs of ``ugrpo plan --model`` runs (the shell script runs them: ``--sampling-backend vllm``,
  then ``hf``), side by side; ``hf`` keeps the policy on the CPU (what ``plan --model`` does with it), ``vllm`` puts
  it and the engine on the GPU, so their ratio is the command's, not HF-vs-vLLM generation on one device (``gen``);
* ``trl``: TRL's ``GRPOTrainer`` with ``use_vllm=True, vllm_mode="colocate"`` on the same model folder, prompts,
  batch (B x G completions, same token limit) and learning rate; one step = the time between two ``on_step_end``.

``UGRPO_GPU_CHECK_SIZE=tiny`` (2 layers, hidden 64, vocabulary 151936) and ``UGRPO_GPU_CHECK_NO_VLLM=1`` (HF only)
let the script's own code run on a CPU; such a run measures nothing about GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.common import environment, time_alternating  # noqa: E402

SHAPES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
                 rms_norm_eps=1e-6, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=151936, max_position_embeddings=2048, rope_theta=1e6,
                 rms_norm_eps=1e-6, tie_word_embeddings=True),
}
"""``0.5b``: Qwen2.5-0.5B's architecture (its config.json); ``tiny``: the same code path, small enough for a CPU"""


def _write(out: Path, part: str, payload: dict) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{part}.json"
    path.write_text(json.dumps({"part": part, "status": "ok", **payload, "environment": _env()}, indent=1) + "\n")
    return path


def _env() -> dict:
    env = environment()
    env["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    for pkg in ("transformers", "trl", "vllm"):
        try:
            env[pkg] = __import__(pkg).__version__
        except Exception:  # not installed (or broken): say so instead of failing the part
            env[pkg] = None
    return env


def make_model(args) -> None:
    """The random Qwen2.5-0.5B-shaped model and the character tokenizer, saved in bfloat16 to ``args.model``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ugrpo.lm.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    config = Qwen2Config(**SHAPES[args.size], pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, use_cache=True)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(config)
    model = model.to(torch.bfloat16)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(args.model)
    tok.save_pretrained(args.model)
    n = sum(p.numel() for p in model.parameters())
    print(f"model: {args.size}, {n / 1e6:.1f} M parameters, built and saved in {time.perf_counter() - t0:.1f} s "
          f"to {args.model}", flush=True)


def _problems(B: int) -> list:
    """The first B training problems of ugrpo's arithmetic task (what ``ugrpo train`` on ``arithmetic`` draws from)."""
    from ugrpo.tasks.registry import get_task

    return get_task("arithmetic", n_train=max(B, 64), n_eval=16).train_problems()[:B]


def gen(args) -> None:
    """HF against vLLM generation at N = B x G completions of exactly ``max_new_tokens`` tokens (module docstring)."""
    from ugrpo.lm.loading import load_policy
    from ugrpo.lm.sampling import sample_groups

    device = "cuda" if torch.cuda.is_available() else "cpu"
    pol = load_policy(str(args.model), dtype="bfloat16" if device == "cuda" else "float32", device=device)
    model, tok = pol.model, pol.tokenizer
    texts = [p.prompt for p in _problems(args.prompts)]
    seeds = list(range(1000, 1000 + len(texts)))
    G, T = args.group_size, args.max_new_tokens
    out: dict = {"N": len(texts) * G, "B": len(texts), "G": G, "max_new_tokens": T, "dtype": str(model.dtype)}
    counts: dict[str, int] = {}

    def hf():
        counts["hf"] = int(sample_groups(model, tok, texts, G, seeds=seeds, max_new_tokens=T).completion_lengths.sum())

    fns = {"hf": hf}
    engine = None
    if not args.no_vllm:
        from ugrpo.lm.vllm_engine import build_engine

        t0 = time.perf_counter()
        engine = build_engine(model, tok, gpu_memory=args.gpu_memory)
        out["vllm_start_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        out["vllm_tensors_pushed"] = engine.sync_weights(model)
        out["vllm_sync_s"] = time.perf_counter() - t0

        def vllm():
            ro = engine.sample_groups(tok, texts, G, seeds=seeds, max_new_tokens=T)
            counts["vllm"] = int(ro.completion_lengths.sum())

        fns["vllm"] = vllm
    times = time_alternating(fns, repeats=args.repeats, warmup=1)
    for name, t in times.items():
        out[name] = {**t, "tokens": counts[name], "tokens_per_s": counts[name] / t["median_s"]}
    if engine is not None:
        out["vllm_over_hf_tokens_per_s"] = out["vllm"]["tokens_per_s"] / out["hf"]["tokens_per_s"]
        out["seeds_contract"] = _contract(engine, tok, texts, seeds, G, T)
        engine.close()
    _write(args.out, "gen", out)
    print(json.dumps({k: v for k, v in out.items() if not isinstance(v, dict)}), flush=True)


def _contract(engine, tok, texts, seeds, G: int, T: int) -> dict:
    """The seeds contract on the real engine: identical rows for the same call, and for 4 prompts drawn alone."""
    kw = dict(seeds=seeds, max_new_tokens=T)
    a, b = (engine.sample_groups(tok, texts, G, **kw) for _ in range(2))
    alone = engine.sample_groups(tok, texts[:4], G, seeds=seeds[:4], max_new_tokens=T)
    same_call = sum(x == y for x, y in zip(a.completion_ids.tolist(), b.completion_ids.tolist())) / len(a.texts)
    n4 = 4 * G
    other_batch = sum(x == y for x, y in zip(a.completion_ids[:n4].tolist(), alone.completion_ids.tolist())) / n4
    first_token = float((a.completion_ids[:n4, 0] == alone.completion_ids[:, 0]).float().mean())
    return {"same_call_identical_frac": same_call, "other_batch_identical_frac": other_batch,
            "other_batch_same_first_token_frac": first_token,
            "note": "fractions of completions (whole token rows) equal between two draws with the same seeds"}


def collect(args) -> None:
    """Step times of a finished (or partial) ``ugrpo train`` run: metrics.jsonl rows after the warm-up steps."""
    rows = [json.loads(x) for x in (args.run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in rows if r.get("step", 0) >= 1]
    timed = steps[args.warmup:]
    if not timed:
        raise SystemExit(f"{args.run}: no step after {args.warmup} warm-up steps in metrics.jsonl")
    med = statistics.median(r["s_per_step"] for r in timed)
    payload = {"run": str(args.run), "steps_logged": len(steps), "warmup_steps": args.warmup,
               "s_per_step": [r["s_per_step"] for r in steps], "s_sampling": [r.get("s_sampling") for r in steps],
               "median_s_per_step": med, "median_s_sampling": statistics.median(r["s_sampling"] for r in timed),
               "samples_per_step": steps[-1].get("samples"), "reward_mean": [r["reward_mean"] for r in steps],
               "alloc_g_hist": [r.get("alloc_g_hist") for r in steps if "alloc_g_hist" in r] or None}
    result = args.run / "results.json"
    if result.exists():
        payload["results"] = json.loads(result.read_text())
    _write(args.out, args.part, payload)
    print(f"{args.part}: median {med:.3f} s/step over {len(timed)} steps", flush=True)


def plan(args) -> None:
    """The pilot costs of the ``ugrpo plan --model`` runs ``--runs NAME=DIR ...`` (module docstring)."""
    runs = {}
    for item in args.runs or []:
        name, _, folder = item.partition("=")
        path = Path(folder) / "results.json"
        if path.exists():
            r = json.loads(path.read_text())
            runs[name] = {"pilot_cost": r["pilot_cost"], "step_cost": r["step_cost"],
                          "g_recommended": r.get("g_recommended"), "pilot": r.get("pilot"),
                          **{k: r[k]["estimate"] for k in ("c1", "c2", "c3")}}
        else:
            runs[name] = {"status": "no results.json (the run failed or was skipped; see its log)"}
    if not any("pilot_cost" in v for v in runs.values()):
        raise SystemExit(f"no finished plan run among {args.runs}")
    payload: dict = {"runs": runs, "device": {"hf": "cpu", "vllm": "cuda"}}
    hf, vl = runs.get("hf", {}).get("pilot_cost"), runs.get("vllm", {}).get("pilot_cost")
    if hf and vl:
        payload["hf_cpu_over_vllm_pilot_s"] = hf["seconds"] / vl["seconds"]
        payload["hf_cpu_over_vllm_sampling_s"] = hf["seconds_sampling"] / vl["seconds_sampling"]
    _write(args.out, "plan", payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "runs"}), flush=True)


def trl(args) -> None:
    """TRL's GRPOTrainer, vLLM colocated, on the same model folder and batch (module docstring)."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from ugrpo.tasks.base import score
    from ugrpo.tasks.registry import get_task

    task = get_task("arithmetic", n_train=max(args.prompts * (args.steps + 1), 64), n_eval=16)
    problems = task.train_problems()
    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            ends.append(time.perf_counter())

    def reward(prompts, completions, pid, **kw):
        return score(task, completions, [problems[i] for i in pid]).rewards

    cuda = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=str(args.out / "trl-run"), per_device_train_batch_size=args.prompts * args.group_size,
        num_generations=args.group_size, max_completion_length=args.max_new_tokens, max_steps=args.steps,
        learning_rate=args.lr, lr_scheduler_type="constant", beta=0.0, num_iterations=1, temperature=1.0,
        bf16=cuda, use_cpu=not cuda, gradient_checkpointing=False, report_to="none", save_strategy="no",
        logging_steps=1, disable_tqdm=True, dataloader_num_workers=0, seed=0,
        use_vllm=not args.no_vllm, vllm_mode="colocate", vllm_gpu_memory_utilization=args.gpu_memory,
    )
    data = Dataset.from_dict({"prompt": [p.prompt for p in problems], "pid": list(range(len(problems)))})
    t0 = time.perf_counter()
    trainer = GRPOTrainer(model=str(args.model), reward_funcs=reward, args=config, train_dataset=data,
                          callbacks=[Clock()])
    start_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    trainer.train()
    gaps = [b - a for a, b in zip([t0] + ends[:-1], ends)]
    timed = gaps[args.warmup:]
    payload = {"s_per_step": gaps, "warmup_steps": args.warmup, "start_s": start_s,
               "median_s_per_step": statistics.median(timed) if timed else None,
               "samples_per_step": args.prompts * args.group_size, "use_vllm": not args.no_vllm,
               "model_dtype": str(next(trainer.model.parameters()).dtype)}
    _write(args.out, "trl", payload)
    print(f"trl: median {payload['median_s_per_step']} s/step", flush=True)


def merge(args) -> None:
    """All parts' JSON in one file, with the ratios that compare them side by side."""
    parts = {p.stem: json.loads(p.read_text()) for p in sorted(args.out.glob("*.json"))}
    step, trl_part = parts.get("train_step", {}), parts.get("trl", {})
    ratios = {}
    if step.get("median_s_per_step") and trl_part.get("median_s_per_step"):
        ratios["trl_over_ugrpo_s_per_step"] = trl_part["median_s_per_step"] / step["median_s_per_step"]
    if "vllm_over_hf_tokens_per_s" in parts.get("gen", {}):
        ratios["vllm_over_hf_tokens_per_s"] = parts["gen"]["vllm_over_hf_tokens_per_s"]
    if "hf_cpu_over_vllm_pilot_s" in parts.get("plan", {}):
        ratios["plan_hf_cpu_over_vllm_pilot_s"] = parts["plan"]["hf_cpu_over_vllm_pilot_s"]
    merged = {"name": "gpu_check", "ratios": ratios, "parts": parts, "environment": _env()}
    args.merged.parent.mkdir(parents=True, exist_ok=True)
    args.merged.write_text(json.dumps(merged, indent=1) + "\n")
    print(json.dumps({"ratios": ratios, "status": {k: v.get("status") for k, v in parts.items()}}), flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=["make-model", "gen", "collect", "trl", "plan", "merge"])
    ap.add_argument("--model", type=Path, help="the model folder make-model writes and the others read")
    ap.add_argument("--out", type=Path, help="folder of the parts' JSON files")
    ap.add_argument("--merged", type=Path, help="merge: the one JSON file")
    ap.add_argument("--size", choices=sorted(SHAPES), default=os.environ.get("UGRPO_GPU_CHECK_SIZE", "0.5b"))
    ap.add_argument("--prompts", type=int, default=32, help="B")
    ap.add_argument("--group-size", type=int, default=8, help="G")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1, help="steps left out of the medians")
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--gpu-memory", type=float, default=0.3)
    ap.add_argument("--run", type=Path, help="collect: the ugrpo run folder")
    ap.add_argument("--part-name", dest="part_name", default="train_step", help="collect: the JSON's name")
    ap.add_argument("--runs", nargs="*", help="plan: NAME=DIR of each `ugrpo plan --model` run folder")
    ap.add_argument("--no-vllm", action="store_true", default=os.environ.get("UGRPO_GPU_CHECK_NO_VLLM") == "1")
    args = ap.parse_args(argv)
    if args.part == "collect":
        args.part = args.part_name
        return collect(args)
    return {"make-model": make_model, "gen": gen, "trl": trl, "plan": plan, "merge": merge}[args.part](args)


if __name__ == "__main__":
    main()
