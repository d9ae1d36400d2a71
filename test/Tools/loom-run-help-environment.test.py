"""Checks that loom-run --help names every environment variable the
runtime and tools read: the string literals "LOOM_..." in runtime/ and
tools/ C++ sources, less those the tools set for themselves (INTERNAL).

Arguments: the saved --help text, the source root."""
import pathlib
import re
import sys

# Set by one Loom tool for another (loom for the loom-run it starts), and a
# debugging check of the MPI transport's message order: not for users.
INTERNAL = {"LOOM_STOP_EXIT_STATUS", "LOOM_CHECK_P2P_ORDER"}

help_text = open(sys.argv[1]).read()
root = pathlib.Path(sys.argv[2])
names = set()
for d in ("runtime", "tools"):
    for f in (root / d).rglob("*"):
        if f.suffix in (".cpp", ".h", ".cu"):
            names |= set(re.findall(r'"(LOOM_[A-Z0-9_]+)"', f.read_text()))
missing = sorted(n for n in names - INTERNAL
                 if not re.search(rf"\b{n}\b", help_text))
if len(names) < 10:
    sys.exit(f"found only {len(names)} LOOM_ names in {root}: wrong root?")
if missing:
    sys.exit("not in loom-run --help: " + ", ".join(missing))
print("every LOOM_ variable the runtime reads is in loom-run --help")
