"""ustat's score statistics at a realistic model shape: their cost against the step's forward+backward (issue 19).

A randomly initialised Qwen2 of a real model's shape (default Qwen2.5-1.5B: hidden 1536, 28 layers, 151,936-token
vocabulary, tied embeddings; no weights are loaded: costs do not depend on them), one batch of B prompts x G
completions of random tokens (prompt and completion lengths around ``--prompt-len`` and ``--completion-len``), and,
alternating for ``--reps`` rounds after a warm-up, with CUDA synchronised around each:

* ``update``: the trainer's update on the batch (``ugrpo.train.update.step_updates``: shared-prompt forward,
  loss, backward over micro-batches, AdamW with lr 0);
* ``update_with_output_stats``: the same update feeding :class:`ugrpo.lm.output_scores.OutputScores` (what
  ``allocation.scores: output`` adds to a step; its cost is the paired difference);
* ``output_stats_own_forward``: the same statistics from a no-gradient forward of their own (the TRL adapter's path);
* ``sketch``: the score sketch of all parameters (``allocation.scores: sketch``, k = 64, one batched backward).

The shares are of the update alone, an upper bound on the share of a step; ``--generate`` also times the step's
sampling once (ugrpo's HF sampler, ``completion_len`` new tokens per row) and gives the shares of update +
sampling. Written to ``benchmarks/results/local/score_stats_gpu.json`` (``$OUT`` when set). Run (a GPU):
``python benchmarks/bench_score_stats_gpu.py --generate``; ``--small`` for a CPU smoke run. The reference results
``benchmarks/results/score_stats_gpu.json`` (``--generate``) and ``score_stats_gpu_g32.json`` (``--prompts 2 --group
32 --reps 3``) were measured on one H200.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from common import environment, write_result


def _model(args, device):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                      max_position_embeddings=4096, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1,
                      eos_token_id=2)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(getattr(torch, args.dtype))
    return model.train()


def _batch(args):
    from ugrpo.lm.rollout import Rollout

    B, G, P, T = args.prompts, args.group, args.prompt_len, args.completion_len
    gen = torch.Generator().manual_seed(0)
    p_ids, p_mask = torch.zeros(B * G, P, dtype=torch.long), torch.zeros(B * G, P, dtype=torch.long)
    c_ids = torch.randint(3, args.vocab, (B * G, T), generator=gen)
    c_mask = torch.zeros(B * G, T, dtype=torch.long)
    for b in range(B):
        plen = int(P * (0.6 + 0.4 * torch.rand(1, generator=gen)))
        prompt = torch.randint(3, args.vocab, (plen,), generator=gen)
        for g in range(G):
            n = b * G + g
            p_ids[n, P - plen:], p_mask[n, P - plen:] = prompt, 1
            c_mask[n, :int(T * (0.3 + 0.7 * torch.rand(1, generator=gen)))] = 1
    sizes = torch.full((B,), G)
    ro = Rollout(p_ids, p_mask, c_ids * c_mask, c_mask, [""] * (B * G), torch.zeros(B * G, dtype=torch.bool),
                 torch.arange(B).repeat_interleave(sizes), G, sizes)
    z = (torch.rand(B * G, generator=gen) < 0.5).double()
    return ro, z


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--hidden", type=int, default=1536)
    ap.add_argument("--intermediate", type=int, default=8960)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--prompts", type=int, default=8, help="B")
    ap.add_argument("--group", type=int, default=8, help="G")
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--completion-len", type=int, default=512)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--sketch-dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--small", action="store_true", help="a CPU smoke run: a 2-layer model, short sequences")
    ap.add_argument("--generate", action="store_true", help="also time the step's sampling once (HF backend, "
                    "completion_len new tokens per row, no EOS) for shares of update + sampling")
    ap.add_argument("--name", default="score_stats_gpu")
    args = ap.parse_args()
    if not torch.cuda.is_available() and not args.small:  # ``make bench`` on a CPU machine: the smoke run only
        print("no GPU: running the --small smoke version (the 1.5B shape needs a GPU)", flush=True)
        args.small = True
    if args.small:
        args.vocab, args.hidden, args.intermediate, args.layers, args.heads, args.kv_heads = 512, 64, 128, 2, 4, 2
        args.prompt_len, args.completion_len, args.dtype, args.reps = 16, 24, "float32", 2
    from ugrpo.lm.output_scores import OutputScores, output_score_norms
    from ugrpo.stats.history import ScoreNorms
    from ugrpo.train.alloc import Allocator, step_advantages
    from ugrpo.train.config import config_from_dict
    from ugrpo.train.distributed import DistContext
    from ugrpo.train.update import step_updates

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = _model(args, device)
    ro, z = _batch(args)
    B, G = args.prompts, args.group
    cfg = config_from_dict({"budget": {"samples_per_step": B * G, "group_size": G, "micro_batch": args.micro_batch},
                            "allocation": {"rule": "ustat", "scores": "sketch", "sketch_dim": args.sketch_dim}})
    adv, _ = step_advantages(cfg, ro, z, None)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=0.0)
    alloc = Allocator(cfg, B)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def update(on_logits=None):
        step_updates(model, params, opt, ro, torch.arange(B), adv, reference=None, cfg=cfg, ctx=DistContext(),
                     on_logits=on_logits)

    inside: list[float] = []

    def with_stats():
        rec = OutputScores(model, ro.completion_ids, ro.completion_mask, ro.prompt_index, z, temperature=1.0)
        update(rec)
        rec.result()
        inside.append(rec.seconds)

    def own_forward():
        output_score_norms(model, ro, z, ro.prompt_index, temperature=1.0, chunk_size=args.micro_batch)

    def sketch():
        w, _ = alloc.sketch(model, ro)
        ScoreNorms.from_scores(z.numpy(), w.numpy(), ro.group_sizes.numpy())

    fns = {"update": update, "update_with_output_stats": with_stats, "output_stats_own_forward": own_forward,
           "sketch": sketch}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for rep in range(args.reps + 1):  # the first round warms up
        for name, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            if rep:
                times[name].append(time.perf_counter() - t0)
        print({k: round(v[-1], 3) for k, v in times.items() if v}, flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    diffs = [a - b for a, b in zip(times["update_with_output_stats"], times["update"])]
    res = {k: {"median_s": v, "share_of_update": v / med["update"]} for k, v in med.items()}
    res["output_stats_marginal"] = {"median_s": statistics.median(diffs),
                                    "share_of_update": statistics.median(diffs) / med["update"]}
    res["output_stats_inside_recorder"] = {"median_s": statistics.median(inside[1:]),
                                           "share_of_update": statistics.median(inside[1:]) / med["update"]}
    payload = {"settings": {k: v for k, v in vars(args).items()}, "device": torch.cuda.get_device_name()
               if device == "cuda" else "cpu", "tokens": {"prompt_mean": float(ro.prompt_mask.sum(1).double().mean()),
                                                          "completion_mean": float(ro.completion_mask.sum(1)
                                                                                   .double().mean())},
               "times_s": times, "result": res, "environment": environment(),
               "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
               "load_average": os.getloadavg()}
    if args.generate:
        from ugrpo.lm.sampling import generate_rows

        sync()
        t0 = time.perf_counter()
        generate_rows(model, ro.prompt_ids, ro.prompt_mask, list(range(B * G)), temperature=1.0, top_p=1.0,
                      max_new_tokens=args.completion_len, eos_ids=[-1], pad_id=0)
        sync()
        gen_s = time.perf_counter() - t0
        res["sampling_hf"] = {"seconds": gen_s}
        for k in ("output_stats_marginal", "output_stats_own_forward", "sketch"):
            res[k]["share_of_update_plus_sampling"] = res[k]["median_s"] / (med["update"] + gen_s)
    print(res, flush=True)
    print(write_result(args.name, payload, os.environ.get("OUT")))


if __name__ == "__main__":
    main()
