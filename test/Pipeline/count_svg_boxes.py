"""Parses an SVG schedule drawing (fails on malformed XML) and prints how
many forward, backward and idle-row boxes it has, and whether every action
box lies inside its row."""
import sys
import xml.etree.ElementTree as ET

ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == ns + "svg", root.tag
rects = list(root.iter(ns + "rect"))
rows = [r for r in rects if r.get("class") == "idle"]
counts = {"fwd": 0, "bwd": 0}
inside = True
for r in rects:
    kind = r.get("class")
    if kind not in counts:
        continue
    counts[kind] += 1
    x, w = float(r.get("x")), float(r.get("width"))
    row = [q for q in rows if q.get("y") == r.get("y")]
    if len(row) != 1 or x < float(row[0].get("x")) - 1e-6 or \
            x + w > float(row[0].get("x")) + float(row[0].get("width")) + 1e-3:
        inside = False
print(f"rows {len(rows)} forward {counts['fwd']} backward {counts['bwd']} "
      f"inside {inside}")
