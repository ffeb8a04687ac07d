#!/usr/bin/env bash
# The one-GPU check of issue 25: at most 8 minutes on one NVIDIA GPU, nothing downloaded.
#
#   bash benchmarks/gpu_check.sh            # needs torch with CUDA, vllm and trl installed (README, section "GPU")
#
# Parts, each under its own timeout (the smaller of its budget and what is left of UGRPO_GPU_CHECK_BUDGET seconds,
# 470 by default), so one part that fails or hangs still leaves the others' results:
#   preflight   versions, the GPU, whether vllm and trl import; without CUDA or vllm the script stops here (exit 2)
#   make-model  a random Qwen2.5-0.5B-shaped model + ugrpo's character tokenizer (benchmarks/gpu_parts.py)
#   gen         tokens/s of sampling.backend hf vs vllm at N = 256 completions of 256 tokens; the seeds contract
#               measured on the real engine
#   train_step  one `ugrpo train` step (N = 128, G = 8, 128 tokens, bf16, backend vllm; median of steps 2-4)
#   trl         TRL's GRPOTrainer, use_vllm colocate, on the same model folder and batch (median of steps 2-4)
#   ustat       a 20-step `ugrpo train --allocation ustat` run (float32 training weights, bf16 engine)
#   plan        `ugrpo plan --model` pilots (B0 = 8 x G0 = 4, 16 tokens) with --sampling-backend vllm (policy on the
#               GPU), then hf (policy on the CPU, as plan --model keeps it): the command's pilot seconds side by side.
#               Last, and only with what the earlier parts left of the budget (often skipped: their caps sum to more)
# Results: benchmarks/results/local/gpu_check/<part>.json, joined in benchmarks/results/local/gpu_check.json
# (with the ratios trl_over_ugrpo_s_per_step, vllm_over_hf_tokens_per_s and plan_hf_cpu_over_vllm_pilot_s).
# Logs and runs: $UGRPO_GPU_CHECK_WORK.
#
# The script's own code on a CPU (measures nothing about GPUs):
#   UGRPO_GPU_CHECK_SIZE=tiny UGRPO_GPU_CHECK_NO_VLLM=1 UGRPO_GPU_CHECK_B=4 UGRPO_GPU_CHECK_TOKENS=8 \
#   UGRPO_GPU_CHECK_TRAIN_B=2 UGRPO_GPU_CHECK_TRAIN_TOKENS=8 UGRPO_GPU_CHECK_USTAT_STEPS=3 \
#   UGRPO_GPU_CHECK_USTAT_TOKENS=8 UGRPO_GPU_CHECK_PLAN_TOKENS=8 bash benchmarks/gpu_check.sh
set -u
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
# per-request seeds make vLLM sample with its PyTorch sampler anyway; this also skips FlashInfer's sampler build
export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}

OUT=benchmarks/results/local/gpu_check
MERGED=benchmarks/results/local/gpu_check.json
WORK=${UGRPO_GPU_CHECK_WORK:-$(mktemp -d /tmp/ugrpo-gpu-check.XXXXXX)}
BUDGET=${UGRPO_GPU_CHECK_BUDGET:-470}
NO_VLLM=${UGRPO_GPU_CHECK_NO_VLLM:-0}
G=8
B_GEN=${UGRPO_GPU_CHECK_B:-32}
T_GEN=${UGRPO_GPU_CHECK_TOKENS:-256}
B_TRAIN=${UGRPO_GPU_CHECK_TRAIN_B:-16}
T_TRAIN=${UGRPO_GPU_CHECK_TRAIN_TOKENS:-128}
USTAT_STEPS=${UGRPO_GPU_CHECK_USTAT_STEPS:-20}
T_USTAT=${UGRPO_GPU_CHECK_USTAT_TOKENS:-64}
T_PLAN=${UGRPO_GPU_CHECK_PLAN_TOKENS:-16}
MODEL="$WORK/model"
START=$(date +%s)
rm -rf "$OUT" "$MERGED"
mkdir -p "$OUT" "$WORK"
if [ "$NO_VLLM" = 1 ]; then BACKEND=hf; NOVLLM_FLAG=--no-vllm; else BACKEND=vllm; NOVLLM_FLAG=; fi

status_json() {  # status_json NAME STATUS DETAIL: NAME.json for a part that did not finish, with its log's tail
  "$PY" - "$OUT/$1.json" "$1" "$2" "$3" "$WORK/$1.log" <<'EOF'
import json, sys
path, name, status, detail, log = sys.argv[1:6]
try:
    tail = open(log, errors="replace").read().splitlines()[-40:]
except OSError:
    tail = []
json.dump({"part": name, "status": status, "detail": detail, "log_tail": tail}, open(path, "w"), indent=1)
EOF
}

part() {  # part NAME MAX_SECONDS COMMAND...
  local name=$1 max=$2
  shift 2
  local left=$((BUDGET - ($(date +%s) - START) - 15))
  local t=$((max < left ? max : left))
  if [ "$t" -lt 20 ]; then
    echo "== $name: skipped, ${left} s left"
    status_json "$name" skipped "not started: ${left} s of the ${BUDGET} s budget left"
    return 1
  fi
  echo "== $name (timeout ${t} s)"
  local t0 rc
  t0=$(date +%s)
  timeout --kill-after=15 "$t" "$@" >"$WORK/$name.log" 2>&1
  rc=$?
  echo "   exit $rc after $(($(date +%s) - t0)) s (log: $WORK/$name.log)"
  tail -n 3 "$WORK/$name.log" | sed 's/^/   | /'
  if [ "$rc" -ne 0 ]; then
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      status_json "$name" timeout "killed after ${t} s"
    else
      status_json "$name" error "exit status $rc"
    fi
    return 1
  fi
}

part preflight 40 "$PY" - "$OUT/preflight.json" <<'EOF'
import importlib, json, sys
import torch
info = {"part": "preflight", "status": "ok", "torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
for pkg in ("transformers", "trl", "vllm", "flashinfer"):
    try:
        info[pkg] = importlib.import_module(pkg).__version__
    except Exception as e:
        info[pkg] = f"not importable: {type(e).__name__}: {e}"[:300]
json.dump(info, open(sys.argv[1], "w"), indent=1)
print(info)
EOF

if [ "$NO_VLLM" != 1 ]; then  # a machine without CUDA or vllm: say so now, not after minutes of failing parts
  "$PY" - "$OUT/preflight.json" "$WORK/preflight.log" <<'EOF' || exit 2
import json, sys
try:
    info = json.load(open(sys.argv[1]))
except OSError:
    sys.exit(f"gpu_check: error: the preflight failed (log: {sys.argv[2]})")
missing = ["no CUDA GPU (torch.cuda.is_available() is False)"] if not info["cuda_available"] else []
if str(info["vllm"]).startswith("not importable"):
    missing.append(f"vllm is {info['vllm']}")
if missing:
    sys.exit("gpu_check: error: " + "; ".join(missing) + ". This check measures vLLM on a GPU: install it as README "
             "section 'GPU' says, on a GPU machine. To run the script's own code on a CPU, use the UGRPO_GPU_CHECK_* "
             "recipe at the top of benchmarks/gpu_check.sh.")
EOF
fi

part make-model 60 "$PY" benchmarks/gpu_parts.py make-model --model "$MODEL" || {
  echo "no model: nothing else can run"
  "$PY" benchmarks/gpu_parts.py merge --out "$OUT" --merged "$MERGED"
  exit 1
}

part gen 120 "$PY" benchmarks/gpu_parts.py gen --model "$MODEL" --out "$OUT" --prompts "$B_GEN" --group-size "$G" \
  --max-new-tokens "$T_GEN" --repeats 2 $NOVLLM_FLAG

TRAIN=(--model.name "$MODEL" --task.name arithmetic --budget.samples-per-step $((B_TRAIN * G)) --budget.group-size "$G"
  --budget.micro-batch 32 --sampling.backend "$BACKEND" --optim.lr 1e-6 --seed 0 --log-every 1 --eval.n-problems 0)
part train_step_run 90 "$PY" -m ugrpo.cli train --out "$WORK/runs/train_step" "${TRAIN[@]}" --steps 4 \
  --sampling.max-new-tokens "$T_TRAIN" --model.dtype bfloat16
part train_step 20 "$PY" benchmarks/gpu_parts.py collect --run "$WORK/runs/train_step" --part-name train_step \
  --out "$OUT" --warmup 1

part trl 120 "$PY" benchmarks/gpu_parts.py trl --model "$MODEL" --out "$OUT" --prompts "$B_TRAIN" --group-size "$G" \
  --max-new-tokens "$T_TRAIN" --steps 4 --warmup 1 --lr 1e-6 $NOVLLM_FLAG

part ustat_run 120 "$PY" -m ugrpo.cli train --out "$WORK/runs/ustat" "${TRAIN[@]}" --steps "$USTAT_STEPS" \
  --allocation ustat --sampling.max-new-tokens "$T_USTAT" --model.dtype float32 --sampling.vllm-dtype bfloat16 \
  --eval.n-problems 32 --eval.pass1-samples 0 --eval.every 0
part ustat 20 "$PY" benchmarks/gpu_parts.py collect --run "$WORK/runs/ustat" --part-name ustat --out "$OUT" --warmup 1

PLAN=(--model "$MODEL" --task arithmetic --pilot-batch 8 --pilot-group 4 --budget 256 --sketch-dim 64 --n-boot 200
  --max-new-tokens "$T_PLAN" --seed 0)
PLAN_RUNS=()
if [ "$NO_VLLM" != 1 ]; then
  part plan_vllm 90 "$PY" -m ugrpo.cli plan "${PLAN[@]}" --sampling-backend vllm --out "$WORK/runs/plan_vllm"
  PLAN_RUNS+=("vllm=$WORK/runs/plan_vllm")
fi
part plan_hf 60 "$PY" -m ugrpo.cli plan "${PLAN[@]}" --sampling-backend hf --out "$WORK/runs/plan_hf"
PLAN_RUNS+=("hf=$WORK/runs/plan_hf")
part plan 20 "$PY" benchmarks/gpu_parts.py plan --out "$OUT" --runs "${PLAN_RUNS[@]}"

"$PY" benchmarks/gpu_parts.py merge --out "$OUT" --merged "$MERGED"
echo "total $(($(date +%s) - START)) s; results: $MERGED"
