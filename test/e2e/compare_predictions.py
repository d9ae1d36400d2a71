#!/usr/bin/env python3
"""Compares what loom-run measured with what the compiler predicted.

    compare_predictions.py REPORT.json RUN.jsonl --ranks N

REPORT.json is `loom-opt --loom-report=json=true` of the compiled IR;
RUN.jsonl the `--log-json` of a run of the same program. For a pipelined
program the report holds one figure set per stage ("pipeline_stages") and
each rank is compared with the set of its stage (its "pp" coordinate). On
every rank of the run's summary line, exactly (DESIGN.md §7.3):

* sent_bytes_per_step == predicted_sent_bytes_per_step (the figures the
  program carries) == the report's sent_bytes_per_step, per collective kind;
* model_state_bytes == predicted_model_state_bytes == the report's
  model_state_bytes;
* predicted_peak_bytes == the report's predicted_peak_bytes;
* the report's sent_bytes_by_phase (executions per step x bytes per
  execution, by collective and axes) adds up to its sent_bytes_per_step;
and the measured peak_bytes (arena + runtime temporaries) == the predicted
peak (the planned arena): every tensor a step holds is in the plan (kernel
statistics, a collective's blocks moved rank by rank), so the runtime
allocates nothing beside it. A bf16 mixed-precision run's peak is
taken without its bf16_staging_bytes: the fp32 copies the CPU executor
makes of an instruction's bf16 operands to run its fp32 kernel, sized at
load from the program (largest instruction), which the compiler's arena
does not plan (a native bf16 kernel needs none); the staging is printed.

Prints PASS with the figures, or FAIL with every mismatch; exit 1 on FAIL.
"""
import argparse
import json
import sys


def summary_of(path):
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if record.get("summary"):
                return record
    raise SystemExit(f"FAIL: {path} has no summary line")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("run")
    parser.add_argument("--ranks", type=int, required=True)
    args = parser.parse_args()

    with open(args.report) as f:
        full_report = json.load(f)
    stages = full_report.get("pipeline_stages")
    reports = stages if stages else [full_report]
    ranks = summary_of(args.run)["ranks"]
    bad = []
    if len(ranks) != args.ranks:
        bad.append(f"{len(ranks)} ranks in the summary, expected {args.ranks}")
    for report in reports:
        if report["ranks"] != args.ranks:
            bad.append(f"the report is for {report['ranks']} ranks, "
                       f"expected {args.ranks}")
    for i, report in enumerate(reports):
        phases = report.get("sent_bytes_by_phase")
        if phases is None:
            bad.append(f"report {i}: no sent_bytes_by_phase")
            continue
        total = {}
        for phase in phases.values():
            for key, n in phase["sent_bytes_per_execution"].items():
                kind = key.split("[")[0]
                total[kind] = total.get(kind, 0) + \
                    n * phase["executions_per_step"]
        for kind, want in report["sent_bytes_per_step"].items():
            if total.get(kind, 0) != want:
                bad.append(f"report {i}: the phases send {total.get(kind, 0)} "
                           f"bytes of {kind} per step, the total says {want}")
    for r in ranks:
        where = f"rank {r['rank']}"
        if stages:
            stage = r.get("coords", {}).get("pp")
            if stage is None or not 0 <= stage < len(stages):
                bad.append(f"{where}: no pipeline stage (coords "
                           f"{r.get('coords')}) among the report's "
                           f"{len(stages)}")
                continue
            report = stages[stage]
            where += f" (stage {stage})"
        else:
            report = full_report
        for key in ("predicted_model_state_bytes",
                    "predicted_sent_bytes_per_step"):
            if key not in r:
                bad.append(f"{where}: no {key} (the program carries no "
                           "predictions)")
        if bad:
            continue
        want_state = report["model_state_bytes"]
        for key in ("model_state_bytes", "predicted_model_state_bytes"):
            if r[key] != want_state:
                bad.append(f"{where}: {key} {r[key]} != report {want_state}")
        if r["predicted_peak_bytes"] != report["predicted_peak_bytes"]:
            bad.append(f"{where}: predicted_peak_bytes "
                       f"{r['predicted_peak_bytes']} != report "
                       f"{report['predicted_peak_bytes']}")
        peak = r["peak_bytes"] - r.get("bf16_staging_bytes", 0)
        planned = report["predicted_peak_bytes"]
        if peak != planned:
            bad.append(f"{where}: measured peak {peak} bytes != the "
                       f"predicted {planned} ({peak - planned:+d}: memory "
                       f"the runtime allocated beside the planned arena)")
        kinds = set(report["sent_bytes_per_step"]) | set(
            r["sent_bytes_per_step"]) | set(r["predicted_sent_bytes_per_step"])
        for kind in sorted(kinds):
            want = report["sent_bytes_per_step"].get(kind)
            for key in ("sent_bytes_per_step", "predicted_sent_bytes_per_step"):
                got = r[key].get(kind)
                if got != want:
                    bad.append(f"{where}: {key}.{kind} {got} != report {want}")
    if bad:
        print("FAIL:\n  " + "\n  ".join(bad))
        return 1
    staging = max(r.get("bf16_staging_bytes", 0) for r in ranks)
    print("measured peak equals predicted" +
          (f" (without {staging} bytes of bf16 staging)" if staging else ""))
    for i, report in enumerate(reports):
        sent = report["sent_bytes_per_step"]
        print(f"PASS: {len(ranks)} ranks, " +
              (f"stage {i}: " if stages else "") + "model state "
              f"{report['model_state_bytes']} bytes, sent per step " +
              ", ".join(f"{k} {sent[k]}" for k in sorted(sent)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
