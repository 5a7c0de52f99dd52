"""`python -m rnnsearch.bench.peak OUT STAGE [ARGS …]`: `rnnsearch STAGE ARGS …` run in this process, then its
peak resident memory written to OUT (JSON), for the benchmarks that measure a stage's memory.

The peak is VmHWM of /proc/self/status: the high-water mark of this process image alone. The peak that `wait4`
or `getrusage` give for a child (ru_maxrss) is no lower than the parent's resident size when it forked (Linux
carries it across exec), so a benchmark process holding 400 MB would make every stage it starts look that large.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rnnsearch.cli import main as rnnsearch
from rnnsearch.runtime import proc_mb


def main(argv: list[str]) -> int:
    out, stage = Path(argv[0]), argv[1:]
    code = rnnsearch(stage)
    out.write_text(json.dumps({"stage": stage[0], "exit": code, "peak_rss_mb": proc_mb("VmHWM")}))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
