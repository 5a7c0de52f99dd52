"""The tables of tests/gpu-check.sh and OUT/gpu.json, from the JSON files its steps wrote into OUT.

    python3 tests/gpu_report.py OUT
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path


def load(out: Path, pattern: str) -> list[dict]:
    return [json.loads(p.read_text()) | {"file": p.name} for p in sorted(out.glob(pattern))
            if not p.name.endswith(".trace.json")]


def pytest_summary(out: Path) -> str:
    log = out / "pytest.log"
    lines = [x for x in log.read_text().splitlines() if " passed" in x or " failed" in x] if log.exists() else []
    return lines[-1].strip("= ") if lines else "no summary (see pytest.log)"


def train_table(runs: list[dict]) -> list[str]:
    rows = ["| model | precision | batch | CUDA graph | Triton kernels | pairs/s | target words/s | s/update | GFLOP/s | GEMM GFLOP/s "
            "| utilisation | peak MB |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r["arch"], r["batch"], r["precision"], r.get("cuda_graph", False),
                                         r.get("triton_kernels", False))):
        rows.append(f"| {r['arch']} | {r['precision']} | {r['batch']} | {'yes' if r.get('cuda_graph') else 'no'} | "
                    f"{'yes' if r.get('triton_kernels') else 'no'} | "
                    f"{r['sentences_per_s']:,.0f} | {r['target_words_per_s']:,.0f} | {r['seconds_per_update']} | "
                    f"{r['gflops_per_s']:,.0f} | {r['gemm_peak_gflops']:,.0f} | {r['utilisation']:.1%} | "
                    f"{r.get('peak_cuda_mb', 0):,.0f} |")
    return rows


def profile_lines(profiles: list[dict]) -> list[str]:
    rows = ["| profile | precision | s/update | kernels | busy s | GEMM s | launch gap s | floor: arithmetic s | "
            "floor: launches s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in profiles:
        rows.append(f"| {r['arch']} | {r['precision']} | {r['seconds_per_update']:.4f} | "
                    f"{r['operations_per_update']:,.0f} | {r['busy_seconds_per_update']:.4f} | "
                    f"{r['gemm_seconds_per_update']:.4f} | {r['launch_gap_seconds_per_update']:.4f} | "
                    f"{r['floor_arithmetic_seconds']:.4f} | {r['floor_launch_seconds']:.4f} |")
        rows.append("  top: " + "; ".join(f"{o['name'][:60]} {o['ms_per_update']} ms" for o in r["top_operations"][:6]))
    return rows


def search_lines(searches: list[dict]) -> list[str]:
    rows = ["| model | precision | sentences | output length | beam | sentences/s | output words/s |",
            "|---|---|---|---|---|---|---|"]
    for r in searches:
        for run in r["runs"]:
            rows.append(f"| {r['arch']} | {r['precision']} | {r['sentences']} | {r['fixed_output_length']} | "
                        f"{run['beam']} | {run['sentences_per_s']:,.1f} | {run['output_words_per_s']:,.0f} |")
    return rows


def main(out: Path) -> None:
    device = (out / "device.txt").read_text().strip()
    train, profiles, searches = load(out, "train_*.json"), load(out, "profile_*.json"), load(out, "search_*.json")
    peer = json.loads((out / "peer.json").read_text()) if (out / "peer.json").exists() else None
    report = {"date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"), "device": device,
              "pytest_cuda": pytest_summary(out), "train": train, "profile": profiles, "search": searches,
              "peer": {k: v for k, v in peer.items() if k != "datasets"} | {
                  "summary": {d: ds["summary"] for d, ds in peer["datasets"].items()}} if peer else None}
    (out / "gpu.json").write_text(json.dumps(report, indent=1))
    print(f"\n{device}\npytest -m cuda: {report['pytest_cuda']}\n")
    for lines in (train_table(train), profile_lines(profiles), search_lines(searches)):
        print("\n".join(lines) + "\n")
    if peer:
        print((out / "peer.md").read_text())


if __name__ == "__main__":
    main(Path(sys.argv[1]))
