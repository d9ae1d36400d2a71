"""Prints, per model and pipeline depth, the blocks per stage that
`loom compile --report` cuts (its roofline-balanced chunks) and those
`loom plan` assumes (FLOPs-balanced: the LM head's stage takes the number
of layers that minimises the largest stage, none when the head alone
weighs as much; the rest spread evenly, extras to the later stages since
the first also runs the embedding), and whether they agree. Interleaved
(v chunks per stage): the blocks of each stage's chunks, summed. With full
recomputation each block's backward re-runs its forward, so blocks weigh
more against the head.

Arguments: the loom binary, the examples directory, then model names
(examples/<name>.json)."""
import json
import subprocess
import sys

loom, examples, models = sys.argv[1], sys.argv[2], sys.argv[3:]
SEQ, BATCH, MICRO = 1024, 16, 16


def run(*args):
    return subprocess.run(args, check=True, capture_output=True,
                          text=True).stdout


ok = True
for model in models:
    config = f"{examples}/{model}.json"
    for pp, v, recompute in ((2, 1, "none"), (3, 1, "none"),
                             (4, 1, "none"), (6, 1, "none"), (8, 1, "none"),
                             (2, 2, "none"), (2, 3, "none"), (4, 3, "none"),
                             (2, 1, "full"), (4, 1, "full"), (2, 2, "full")):
        strategy = ["--mesh", f"dp=1,tp=1,pp={pp}", "--microbatches",
                    str(MICRO), "--recompute", recompute]
        strategy += (["--schedule", "interleaved", "--virtual-stages", str(v)]
                     if v > 1 else ["--schedule", "1f1b"])
        report = run(loom, "compile", "--config", config, "--batch",
                     str(BATCH), "--seq", str(SEQ), "--train", *strategy,
                     "--report", "-o", "/dev/null")
        compiled = [0] * pp
        for line in report.splitlines():
            if line.startswith("  chunk ") and " on stage " in line:
                stage = int(line.split(" on stage ")[1].split(":")[0])
                units = line.split(": ", 1)[1].split(";")[0].split(", ")
                compiled[stage] += sum(u.startswith("h.") for u in units)
        plan = json.loads(run(
            loom, "plan", "--config", config, "--gpus", str(pp),
            "--gpu-mem-gb", "1e6", "--batch", str(BATCH), "--seq", str(SEQ),
            *strategy, "--no-sequence-parallel", "--json"))
        planned = [st["layers"] for st in plan["memory"]["stages"]]
        same = compiled == planned
        ok &= same
        print(f"{model} pp={pp}{f' v={v}' if v > 1 else ''}"
              f"{' full' if recompute == 'full' else ''}: compiled "
              f"{compiled} plan {planned} {'same' if same else 'DIFFERENT'}")
print("the plan cuts the stages where the compiler does" if ok
      else "THE PLAN CUTS THE STAGES ELSEWHERE")
sys.exit(0 if ok else 1)
