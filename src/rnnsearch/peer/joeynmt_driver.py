"""JoeyNMT's own command line under a wall-clock training budget; run by the *peer's* Python, not ours.

    PEER_PYTHON peer_joeynmt.py STATS_JSON SECONDS train CONFIG -t
    PEER_PYTHON peer_joeynmt.py STATS_JSON 0 test CONFIG -o OUT

Imports only the standard library, torch and joeynmt (2.3.0), so it runs in the peer's environment. In `train`
mode it wraps `TrainManager._train_step` to time every update and count its source and target words, and once
SECONDS have passed since the first update began it raises KeyboardInterrupt there: JoeyNMT's own handler stops
the loop and saves the current weights as `latest.ckpt`. Nothing in the model, data or optimisation changes.
In `test` mode it times JoeyNMT's `predict`. Statistics go to STATS_JSON.
"""

import json
import os
import resource
import sys
import time


def main() -> None:
    stats_path, budget, argv = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    import joeynmt.prediction as jpred
    import joeynmt.training as jtrain
    from joeynmt.__main__ import main as joey_main

    st = {"mode": argv[0], "budget_seconds": budget, "torch": torch.__version__, "threads": torch.get_num_threads(),
          "updates": 0, "source_words": 0, "target_words": 0, "first_update": None, "last_update_end": None,
          "predict_seconds": 0.0, "stopped_by_budget": False}
    clock = time.perf_counter

    step = jtrain.TrainManager._train_step

    def timed_step(self, batch):
        now = clock()
        if st["first_update"] is None:
            st["first_update"] = now
        elif budget and now - st["first_update"] >= budget:
            st["stopped_by_budget"] = True
            raise KeyboardInterrupt  # JoeyNMT saves latest.ckpt and returns
        out = step(self, batch)
        st["updates"] += 1
        st["source_words"] += int(batch.src_length.sum()) - int(batch.nseqs)  # words, without </s>
        st["target_words"] += int(batch.ntokens) - int(batch.nseqs)
        st["last_update_end"] = clock()
        return out

    jtrain.TrainManager._train_step = timed_step

    predict = jpred.predict

    def timed_predict(*args, **kwargs):
        t0 = clock()
        try:
            return predict(*args, **kwargs)
        finally:
            st["predict_seconds"] += clock() - t0

    jpred.predict = timed_predict

    sys.argv = ["joeynmt", *argv]
    try:
        joey_main()
    finally:
        if st["first_update"] is not None:
            st["train_seconds"] = st["last_update_end"] - st["first_update"]
        st.pop("first_update"), st.pop("last_update_end")
        st["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        with open(stats_path, "w", encoding="utf-8") as f:
            json.dump(st, f, indent=2)


if __name__ == "__main__":
    main()
