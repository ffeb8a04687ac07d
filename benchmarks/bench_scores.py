"""Cost of per-sample scores and their sketches relative to one ordinary batched backward (issue 4).

For each model (the tiny 1M model and the built-in 4M config, random weights) and the same batch
of N rows (prompt P tokens + completion T tokens, random tokens, ragged masks), timed in
alternation (``benchmarks/common.py``), medians over repeats:

* ``backward``: one ordinary batched forward + backward of sum_n log pi(Y_n) (the training
  gradient; parameter grads are written): the reference, ratio 1;
* ``linear_trick_k{k}``: :func:`ugrpo.lm.sketch.sketch_scores` with ``method="linear_trick"``;
* ``per_sample_backward_k{k}``: the same sketch by one forward/backward per row;
* ``exact``: :func:`ugrpo.lm.scores.per_sample_scores` (N x D floats; 1M model only).

The two per-row methods cost exactly N independent row passes, so they are run on the first
``--per-sample-rows`` rows and their time (and the exact scores' memory) scaled by N / rows
(``measured_rows`` in the JSON).

Peak memory: each method runs once in a forked child process (copy-on-write, so the child starts
with the parent's model and batch); the child's ``ru_maxrss`` (Linux: the high-water RSS, which
a fork resets to the current RSS) minus its RSS when it started is the method's extra peak
memory. ``tracemalloc`` does not see torch's CPU allocations and torch has no CPU allocator
stats, hence this. Glibc may reuse memory the parent freed, so small numbers are rough (~MB).

Written to ``benchmarks/results/local/bench_scores.json`` (reference: ``benchmarks/results/bench_scores.json``):
per model, the median seconds, the seconds
per row, ``time_ratio`` (median method time / median backward time, same N rows and tokens) and
``mem_ratio`` (extra peak RSS / that of the backward). Goal: the linear trick <= 3x.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_scores.py`` (about 1-2 minutes on
the shared 2-core machine; ``--help`` for sizes). Torch runs on ``--threads`` threads (default 1:
on the shared, loaded 2-core machine one thread is faster and far steadier for these sizes).
"""

from __future__ import annotations

import argparse
import os
import pickle
import resource
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import time_alternating, write_result  # noqa: E402
from ugrpo.lm.logprobs import completion_logprobs  # noqa: E402
from ugrpo.lm.scores import per_sample_scores, select_parameters  # noqa: E402
from ugrpo.lm.sketch import sketch_scores  # noqa: E402
from ugrpo.lm.tiny import build_tiny_model  # noqa: E402
from ugrpo.lm.tokenizer import build_char_tokenizer  # noqa: E402


def make_batch(tokenizer, n: int, p: int, t: int, seed: int = 0):
    """n rows: left-padded prompts of 3..p tokens (starting with <bos>), right-padded completions of 2..t tokens."""
    gen = torch.Generator().manual_seed(seed)
    V = len(tokenizer)
    p_ids = torch.full((n, p), tokenizer.pad_token_id, dtype=torch.long)
    p_mask = torch.zeros(n, p, dtype=torch.long)
    c_ids = torch.randint(3, V, (n, t), generator=gen)
    c_mask = torch.zeros(n, t, dtype=torch.long)
    for i in range(n):
        plen, clen = 3 + i % (p - 2), 2 + (i * 7) % (t - 1)
        p_ids[i, p - plen] = tokenizer.bos_token_id
        p_ids[i, p - plen + 1:] = torch.randint(3, V, (plen - 1,), generator=gen)
        p_mask[i, p - plen:] = 1
        c_mask[i, :clen] = 1
        c_ids[i, clen - 1] = tokenizer.eos_token_id
        c_ids[i, clen:] = tokenizer.pad_token_id
    return p_ids, p_mask, c_ids, c_mask


def _backward(model, batch):
    def run():
        model.zero_grad(set_to_none=True)
        completion_logprobs(model, *batch).sum().backward()
    return run


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def peak_extra_mb(fn) -> float:
    """Extra peak RSS (MB) of ``fn()`` run once in a forked child (Linux)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            start = max(_rss_kb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
            fn()
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            os.write(w, pickle.dumps((peak - start) / 1024))
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return pickle.loads(data) if data else float("nan")


def bench_model(size: str, args, tokenizer) -> dict:
    model = build_tiny_model(tokenizer, size=size, seed=0)
    model.eval()
    batch = make_batch(tokenizer, args.rows, args.prompt_len, args.completion_len)
    D = select_parameters(model).dim
    fns = {"backward": _backward(model, batch)}
    for k in args.k:
        fns[f"linear_trick_k{k}"] = lambda k=k: sketch_scores(model, batch, k, seed=0, method="linear_trick")
    # per-row methods cost exactly N independent passes: timed on the first n_sub rows, scaled by N / n_sub
    n_sub = min(args.per_sample_rows, args.rows)
    sub = tuple(x[:n_sub] for x in batch)
    scaled = {f"per_sample_backward_k{args.k[-1]}", "exact"}
    fns[f"per_sample_backward_k{args.k[-1]}"] = lambda: sketch_scores(model, sub, args.k[-1], seed=0,
                                                                      method="per_sample_backward")
    if size == "1m":
        fns["exact"] = lambda: per_sample_scores(model, sub)
    times = time_alternating(fns, repeats=args.repeats, warmup=1)
    model.zero_grad(set_to_none=True)
    mem = {name: peak_extra_mb(fn) for name, fn in tqdm(fns.items(), desc=f"{size} peak memory", unit="method")}
    for name in scaled & set(times):  # per-row cost x N rows (the memory of N exact scores is scaled too)
        f = args.rows / n_sub
        times[name] = {"median_s": times[name]["median_s"] * f, "times_s": [t * f for t in times[name]["times_s"]],
                       "measured_rows": n_sub}
    if "exact" in mem:
        mem["exact"] *= args.rows / n_sub
    base_t, base_m = times["backward"]["median_s"], mem["backward"]
    tokens = int(batch[1].sum() + batch[3].sum())
    return {
        "size": size, "params_D": D, "rows_N": args.rows, "real_tokens": tokens,
        "prompt_len": args.prompt_len, "completion_len": args.completion_len,
        "methods": {
            name: {
                "median_s": t["median_s"], "per_row_s": t["median_s"] / args.rows, "times_s": t["times_s"],
                "time_ratio": t["median_s"] / base_t, "peak_extra_mb": mem[name],
                "mem_ratio": mem[name] / base_m if base_m > 0 else float("nan"),
                "measured_rows": t.get("measured_rows", args.rows),
            }
            for name, t in times.items()
        },
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=64, help="N completions (B*G)")
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--completion-len", type=int, default=8)
    ap.add_argument("--k", type=int, nargs="+", default=[64, 256], help="sketch dimensions (the last also for "
                    "per-sample backward)")
    ap.add_argument("--per-sample-rows", type=int, default=16, help="rows timed for the per-row methods (scaled to N)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sizes", nargs="+", default=["1m", "4m"], choices=["1m", "4m"])
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tokenizer = build_char_tokenizer()
    results = [bench_model(size, args, tokenizer) for size in args.sizes]
    for r in results:
        print(f"{r['size']}: D={r['params_D']:,} N={r['rows_N']} tokens={r['real_tokens']}")
        for name, m in r["methods"].items():
            print(f"  {name:28s} {m['median_s']:8.3f} s  {m['per_row_s'] * 1e3:7.2f} ms/row  time "
                  f"x{m['time_ratio']:5.2f}  "
                  f"peak +{m['peak_extra_mb']:7.1f} MB  mem x{m['mem_ratio']:5.2f}")
    path = write_result("bench_scores", {
        "load_average": os.getloadavg(), "threads": args.threads, "repeats": args.repeats,
        "memory_method": "ru_maxrss of a forked child minus its RSS at fork (Linux)", "models": results,
    })
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
