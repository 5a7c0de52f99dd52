# The shared start of the tests/gpu-*.sh scripts, sourced after `cd` to the repository root with `out` set: the
# wheels of .whl/ installed into a private folder whose bin/ (their commands: snakemake, ...) goes on PATH, the code
# run from src/ with an `rnnsearch` command there too (the project need not be installed), the device named in
# OUT/device.txt (exit 1 where torch sees no CUDA GPU), and `step` and `pack` (see gpu-check.sh's header). With
# BUDGET=<seconds>, the steps share that many seconds from here: each runs for at most what is left, and one with
# less than half its limit left is skipped, saying so (a skipped or cut step is named on stdout and in
# OUT/budget.txt; the exit status stays that of the steps that ran to their end).
mkdir -p "$out"
site=$(mktemp -d)
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl || exit
fi
export PYTHONPATH="$PWD/src:$site" PYTHONUNBUFFERED=1
mkdir -p "$site/bin"
if ! command -v rnnsearch > /dev/null; then  # what `pip install -e .` would put on PATH
    printf '#!/bin/sh\nexec python3 -m rnnsearch.cli "$@"\n' > "$site/bin/rnnsearch"
    chmod +x "$site/bin/rnnsearch"
fi
export PATH="$site/bin:$PATH"
python3 -c 'import sys, torch
torch.cuda.is_available() or sys.exit(f"no CUDA GPU visible to torch {torch.__version__}")
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")' | tee "$out/device.txt"
[ -s "$out/device.txt" ] || exit 1
nvidia-smi > "$out/nvidia-smi.txt" 2>&1

status=0
[ -z "${PACK:-}" ] || PACK=$(realpath -m "$PACK")
deadline=${BUDGET:+$((SECONDS + BUDGET))}
: > "$out/budget.txt"
pack() {  # OUT into PACK, of a rehearsal's workspace only its logs (its data and models are gigabytes)
    [ -n "${PACK:-}" ] || return 0
    (cd "$out" && tar czf "$PACK" --exclude=./rehearse . $(ls -d rehearse/snakemake.log rehearse/results/logs \
        2>/dev/null)) 2>/dev/null
}
step() {  # step NAME SECONDS COMMAND...: the command's output in OUT/NAME.log
    local name=$1 limit=$2 rc left
    shift 2
    if [ -n "$deadline" ]; then
        left=$((deadline - SECONDS))
        if [ $((2 * left)) -lt "$limit" ]; then
            echo "[$(date +%T)] $name: skipped, ${left} s left of BUDGET=$BUDGET (its limit $limit s)" |
                tee -a "$out/budget.txt"
            return
        fi
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    echo "[$(date +%T)] $name"
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    rc=$?
    if [ $rc -eq 124 ] && [ -n "$deadline" ] && [ $SECONDS -ge "$deadline" ]; then
        echo "  $name: cut at the end of BUDGET=$BUDGET s: $out/$name.log" | tee -a "$out/budget.txt"
    elif [ $rc -ne 0 ]; then
        status=1
        echo "  $name failed (exit $rc; 124: over its $limit s): $out/$name.log"
        tail -n 4 "$out/$name.log" | cut -c1-300 | sed 's/^/    /'
    fi
    pack
}
rehearse() {  # rehearse DATA LIMIT ARGS...: paper.yaml's five trainings in bf16, the projection on stdout
    local data=$1 limit=$2
    shift 2
    rm -rf "$out/rehearse"
    step rehearse_bf16 "$limit" python3 -m rnnsearch.cli rehearse --dev "$data/newstest2012" "$data/newstest2013" \
        --test "$data/newstest2014" --out-dir "$out/rehearse" --cores "$(nproc)" "$@"
    [ -s "$out/rehearse/rehearsal.json" ] || return
    cp "$out/rehearse/rehearsal.json" "$out/rehearsal-bf16.json"
    python3 - "$out/rehearsal-bf16.json" <<'PY' || status=1
import json, sys
r = json.load(open(sys.argv[1]))
p = r["projection"]
for m, x in p["models"].items():
    table2 = f"; at Table 2's {x['table2_updates']:,}: {x['table2_hours']} h" if "table2_hours" in x else ""
    print(f"{m}: {x.get('updates_per_s')} updates/s, {x.get('hours')} h ({x.get('trains', x['budget'])} updates)"
          f"{table2}")
print(f"{r['machine'].get('gpu')}: {p['one_device_hours']} h on one GPU (goal 6), "
      f"{p['one_model_per_device_hours']} h with one GPU per model; at Table 2's updates "
      f"{p['table2_one_device_hours']} h and {p['table2_one_model_per_device_hours']} h")
PY
}
