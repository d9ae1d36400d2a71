#!/usr/bin/env python3
"""The placement `loom compile --report` prints is the one the runtime uses.

Reads the rank table of the report (rank, node, pp, dp, tp) and the summary
line of a loom-run JSON log (per rank: its mesh coordinates as the
communicator derived them) and checks that every rank has the same
coordinates in both. Prints one PASS line or exits non-zero naming the rank.
"""
import json
import re
import sys


def report_table(path):
    rows = {}
    for line in open(path):
        m = re.match(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", line)
        if m:
            rank, node, pp, dp, tp = map(int, m.groups())
            rows[rank] = {"pp": pp, "dp": dp, "tp": tp, "node": node}
    if not rows:
        sys.exit(f"{path}: no rank table (rank node pp dp tp) in the report")
    return rows


def summary_coords(path):
    summary = None
    for line in open(path):
        entry = json.loads(line)
        if entry.get("summary"):
            summary = entry
    if summary is None:
        sys.exit(f"{path}: no summary line")
    return {r["rank"]: r["coords"] for r in summary["ranks"]}


def main():
    table = report_table(sys.argv[1])
    coords = summary_coords(sys.argv[2])
    if sorted(table) != sorted(coords):
        sys.exit(f"report has ranks {sorted(table)}, the run {sorted(coords)}")
    for rank, row in sorted(table.items()):
        for axis in ("pp", "dp", "tp"):
            ran = coords[rank].get(axis, 0)
            if ran != row[axis]:
                sys.exit(f"rank {rank}: the report places it at {axis}="
                         f"{row[axis]}, the runtime ran it at {axis}={ran}")
    nodes = len({row["node"] for row in table.values()})
    print(f"PASS: {len(table)} ranks on {nodes} nodes, runtime coordinates "
          f"equal the report's placement")


if __name__ == "__main__":
    main()
