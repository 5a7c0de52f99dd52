# The shared start of the tests/gpu-*.sh scripts, sourced after `cd` to the repository root with `out` set: the
# wheels of .whl/ installed into a private folder whose bin/ (their commands: snakemake, ...) goes on PATH, the code
# run from src/ with an `rnnsearch` command there too (the project need not be installed), the device named in
# OUT/device.txt (exit 1 where torch sees no CUDA GPU), and `step` and `pack` (see gpu-check.sh's header).
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
pack() { if [ -n "${PACK:-}" ]; then tar czf "$PACK" -C "$out" . 2>/dev/null; fi; }
step() {  # step NAME SECONDS COMMAND...: the command's output in OUT/NAME.log
    local name=$1 limit=$2 rc
    shift 2
    echo "[$(date +%T)] $name"
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
        status=1
        echo "  $name failed (exit $rc; 124: over its $limit s): $out/$name.log"
        tail -n 4 "$out/$name.log" | cut -c1-300 | sed 's/^/    /'
    fi
    pack
}
