#!/usr/bin/env python3
"""Checks the summary line of a pipeline-parallel loom-run log: on every
rank the bytes sent per step and the model state equal the compiler's
predictions, the most bytes of activations each stage stashed equal the
simulated activations in flight, and the measured idle fraction (of the slowest stage's phase),
the share of the stage's own phase blocked in receives and the predicted
idle fraction are present and in [0, 1]."""
import json
import sys

summary = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][0]
ranks = summary["ranks"]
for r in ranks:
    assert r["sent_bytes_per_step"] == r["predicted_sent_bytes_per_step"], r
    assert r["model_state_bytes"] == r["predicted_model_state_bytes"], r
    for key in ("pipeline_idle_fraction", "pipeline_wait_fraction",
                "predicted_pipeline_idle_fraction"):
        assert 0.0 <= r[key] <= 1.0, (key, r)
    assert r["pipeline_stash_peak_bytes"] == \
        r["predicted_pipeline_stash_peak_bytes"], r
print(f"ranks {len(ranks)} sent == predicted, model state == predicted, "
      "activations in flight == predicted, "
      "idle measured and predicted on every rank")
print("stash peak bytes per rank: " +
      " ".join(str(r["pipeline_stash_peak_bytes"]) for r in ranks))
