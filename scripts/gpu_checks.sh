python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit;
# Every GPU check of tritoncheck in one device call (issue 22), about 7.5 minutes at most:
#   ../shared/gpu/prepare.sh                    # here, once: pydantic wheels into .whl/
#   run(command="bash scripts/gpu_checks.sh", carry=[".whl"], timeout_s=500)
# Steps, each bounded by `timeout` and never stopping the ones after it:
#   1. the GPU tests: tests marked gpu and every backend-parity test whose `device` fixture now
#      gives CUDA tensors (tests/conftest.py leaves TRITON_INTERPRET unset where CUDA is present);
#      failures.txt gets each failure as it happens;
#   2. the differential fuzz on CUDA tensors, its own step: every example compiles a kernel for the
#      device (the 150 examples of a CPU run took past 60 s there on 2026-11-27);
#   3. the profiler: kernels, copies and syncs per check, the kernel's device time and bandwidth
#      (benchmarks/gpu_profile.py);
#   4. benchmarks/run.py --device cuda, every scenario, its rows appended as each one finishes.
# Everything comes back under $OUT (8 files at most: the benchmark's folder comes back as one
# bench.tgz, its results.csv included); the summary is printed last.
set -u
OUT=${OUT:-$PWD/gpu-checks-out}
BENCH=$(mktemp -d)  # tarred into $OUT at the end: results.csv, the page and the plots
unset TRITON_INTERPRET  # the compiled kernel on the device, not the interpreter
# the built-in specs are the package `tritoncheck.specs` only once installed (pyproject maps it to
# specs/); this copy of the tree is run from PYTHONPATH, so give it that package in place
python3 -c "import tritoncheck.specs" 2>/dev/null || { cp -r specs tritoncheck/specs && touch tritoncheck/specs/__init__.py; }
export PYTHONUNBUFFERED=1 TRITONCHECK_CACHE_DIR=/tmp/tritoncheck-cache TORCHINDUCTOR_COMPILE_THREADS=8
SUMMARY=$OUT/summary.txt

step() {  # step NAME SECONDS LOG COMMAND...: the command bounded by SECONDS, its rc and time in the summary
  local name=$1 limit=$2 log=$3 t0 rc
  shift 3
  t0=$(date +%s)
  timeout -s INT -k 10 "$limit" "$@" >>"$log" 2>&1  # SIGINT: pytest still prints its summary
  rc=$?
  printf '%-10s rc=%-3s %4ss%s\n' "$name" "$rc" "$(($(date +%s) - t0))" \
    "$([ "$(($(date +%s) - t0))" -ge "$limit" ] && echo "  TIMED OUT after ${limit}s")" >>"$SUMMARY"
}

{
  echo "== device"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| triton', triton.__version__,
'|', torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO CUDA DEVICE')" 2>&1
  echo "C compiler: $(cc --version 2>/dev/null | head -1 || echo none)"
  # what was tested: the tree travels with uncommitted edits (another session's too, if mid-edit)
  echo "tree: $(git log -1 --format='%h %ad' --date=iso 2>/dev/null || echo 'no .git here'), $(git status --short 2>/dev/null | wc -l) paths differ from it"
  git status --short 2>/dev/null | head -20
  echo "== steps (rc 124: timed out)"
} >"$SUMMARY"

# 1. the GPU tests, spread over pytest-xdist's workers where it is installed; one test at most 60 s.
# Each failure is written to failures.txt as it happens (scripts/pytest_failures.py): on 2026-11-26
# every test had run after 150 s, but pytest hung at its session's end and its summary was lost.
PAR=$(python3 -c "import xdist" 2>/dev/null && echo "-n 12")
TMO=$(python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout=60")
TMO_FUZZ=$(python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout=110")
# shellcheck disable=SC2086
step tests 140 "$OUT/tests.log" env GPU_FAILURES="$OUT/failures.txt" PYTHONPATH="$PYTHONPATH:$PWD/scripts" \
  TORCHINDUCTOR_COMPILE_THREADS=1 python3 -m pytest -q -p pytest_failures -p no:benchmark -rfE --tb=short \
  --durations=15 $PAR $TMO \
  tests/test_triton_gpu.py tests/test_triton_backend.py tests/test_triton_split.py tests/test_backends.py \
  tests/test_hostile_codegen.py tests/test_hostile_runtime.py tests/test_inputs.py tests/test_bench.py

# 2. The differential fuzz on every backend, 40 examples on CUDA tensors
# (a fresh seed, printed in fuzz.log to replay it)
step fuzz 100 "$OUT/fuzz.log" env TRITONCHECK_FUZZ_EXAMPLES=40 TRITONCHECK_FUZZ_SEED=random TORCHINDUCTOR_COMPILE_THREADS=1 \
  python3 -m pytest -q -p no:benchmark -s -rfE --tb=short tests/test_differential_fuzz.py -k "all" $TMO_FUZZ

# 3. the profiler: one kernel and one device-to-host copy per check, and what the kernel costs
step profile 80 "$OUT/profile.log" python3 benchmarks/gpu_profile.py --out "$OUT/gpu-profile-cuda.md"

# 3b. the same small batches with the small-batch split off (WAVE=1): its gain against its second launch
step unsplit 50 "$OUT/profile.log" python3 benchmarks/gpu_profile.py --no-big --wave 1 --out "$BENCH/gpu-profile-cuda-wave1.md"

# 4. the benchmarks: small scenarios first, the 254 MB batch last (a run cut short keeps the rest)
step bench 150 "$OUT/bench.log" python3 benchmarks/run.py --device cuda --no-startup --results-dir "$BENCH" \
  --scenario bert --scenario bart --scenario layoutlmv3 --scenario ctc --scenario bert-b1 --scenario big

{
  echo "== tests"
  grep -E "^[0-9]+ (passed|failed)|^=+ .*(passed|failed)" "$OUT/tests.log" | tail -n 1
  # pytest's progress characters (. passed, F failed, E error, s skipped, x/X xfail/xpass): the tally
  # even where pytest hung at its session's end and its summary line is missing (2026-11-26 and -27)
  echo "progress: $(grep -oE '^[.FEsxX]+ +\[ *[0-9]+%\]' "$OUT/tests.log" | sed 's/ *\[.*//' | tr -cd '.FEsxX' | fold -w1 | sort | uniq -c | tr -s ' \n' ' ')"
  echo "failed: $(cat "$OUT/failures.txt" 2>/dev/null | grep -c "^FAILED ")"
  grep "^FAILED " "$OUT/failures.txt" 2>/dev/null | cut -c1-200 | head -40
  echo "== differential fuzz on CUDA tensors"
  grep -E "TRITONCHECK_FUZZ_SEED=|passed|failed" "$OUT/fuzz.log" | tail -n 3
  echo "== profiler (per check)"
  if [ -s "$OUT/gpu-profile-cuda.md" ]; then grep -E "^\| " "$OUT/gpu-profile-cuda.md"; else tail -n 5 "$OUT/profile.log"; fi
  echo "== profiler, small batches not split (WAVE=1), valid rows"
  grep -E "^\| [a-z].* \| valid \|" "$BENCH/gpu-profile-cuda-wave1.md" 2>/dev/null || echo "(no page)"
  echo "== benchmarks (do_bench median ms; wall: one call with its sync)"
  [ -s "$BENCH/results.csv" ] || tail -n 5 "$OUT/bench.log"
  [ -s "$BENCH/results.csv" ] && python3 - "$BENCH/results.csv" <<'PY'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if r["contender"] in ("floor-read", "hand-assert", "hand-compiled", "tc-torch", "tc-triton", "train-step"):
        print(f"{r['scenario']:28s} {r['contender']:14s} {r['median_ms'] or '-':>10s} ms {r['gb_per_s'] or '':>10s} GB/s"
              f" launches {r['launches'] or '-':>3s} syncs {r['syncs'] or '-':>3s}  {r['note'][:70]}")
PY
} >>"$SUMMARY"
tar -czf "$OUT/bench.tgz" -C "$BENCH" .
cat "$SUMMARY"
