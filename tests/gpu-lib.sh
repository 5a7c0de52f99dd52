# The shared start of tests/gpu-check.sh and tests/gpu-dp-check.sh, sourced after `cd` to the repository root with
# `out` set: the wheels of .whl/ installed into a private folder, the code run from src/, the device named in
# OUT/device.txt (exit 1 where torch sees no CUDA GPU), and `step` and `pack` (see gpu-check.sh's header).
mkdir -p "$out"
site=$(mktemp -d)
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl || exit
fi
export PYTHONPATH="$PWD/src:$site" PYTHONUNBUFFERED=1
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
