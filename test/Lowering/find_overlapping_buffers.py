#!/usr/bin/env python3
"""find_overlapping_buffers: checks a program's buffer plan from the outside.

Reads the text of `loom-translate --loom-program-dump PROGRAM` (a file, or
stdin with "-") and re-derives, independently of the planner, when each
buffer is alive in the instruction stream the runtime executes; then checks
that no two buffers alive at the same time share a byte, that every buffer
lies inside the arena (or its chunk's stash slot), and that no buffer is
read before it is written.

Lifetimes, per instruction list (the micro-batch list and the update list
run at different times and share the bytes above the arguments; so do a
pipeline stage's chunk actions, each chunk's forward and backward list):
* arguments (parameters, their gradients and AdamW moments, tokens,
  targets, lr, step) are alive throughout;
* any other buffer lives from the instruction that first writes it to the
  last one that reads it, both included (an instruction's outputs and
  scratch never share bytes with its inputs, but for an in-place output,
  below); the loss and the gradient norm, which the runtime reads after the
  list, live to its end;
* in place: the output of an Add, GeluGrad, Softmax, CrossEntropyGrad or
  CrossEntropySumsGrad may be exactly the bytes of its lhs, incoming
  gradient, input or logits (IN_PLACE_INPUT: the kernels read each element
  before writing it) when that instruction is the input's last reader; the
  output then continues the input's storage;
* a pipeline chunk's stash: what the forward keeps for the backward is in
  the micro-batch's stash slot ("stash@N", bytes outside the arena, one slot
  per micro-batch in flight): the forward's kept buffers live to the end of
  its list (and so does its loss, which the runtime reads after it), the
  backward's stash inputs are alive from the start of its list, each pair
  at the same bytes of the slot, and only a chunk's lists name slot bytes,
  inside that chunk's slot;
* a buffer read but never written in the list is a view (a reshape): it
  shares the storage of the buffer at the same offset with the same size
  (an argument, or the latest one written before the view is read; the
  dump does not say which value a view reshapes), and extends that
  buffer's lifetime.

Prints one line per stage ("stage 0: 211 buffers, 82 + 29 instructions:
no overlaps") and exits 0; otherwise prints each problem (at most 20) and
exits 1. With --count-in-place, also one line per stage counting the
outputs that continue an input's storage, by opcode ("stage 0: in place:
Add 25, CrossEntropyGrad 1, GeluGrad 12", or "none"). Runs in O(n log n), so a 96-layer GPT-3 plan takes a moment.
"""
import bisect
import collections
import heapq
import re
import sys

DTYPE_BYTES = {"F32": 4, "I32": 4, "BF16": 2}

STAGE = re.compile(r"^stage (\d+): arena (\d+) bytes")
HEADER = re.compile(r"^  tokens %(-?\d+) targets %(-?\d+) loss %(-?\d+)"
                    r"(?: lr %(-?\d+) step %(-?\d+) grad_norm %(-?\d+))?")
BUFFER = re.compile(r"^  buffer %(\d+) (stash@|@)(\d+) (\w+) \[([^\]]*)\] ?"
                    r"(.*)$")
PARAM = re.compile(r"^  param \S+ \[[^\]]*\] slice \[[^\]]*\] %(\d+) ")
PARAM_STATE = re.compile(r" grad %(\d+) m %(\d+) v %(\d+)")
INSTRUCTION = re.compile(r"^  (update |chunk\d+ (?:forward|backward) )?\d+: "
                         r"(\w+) \[([^\]]*)\] -> \[([^\]]*)\]"
                         r"(?: scratch \[([^\]]*)\])?")
CHUNK = re.compile(r"^  chunk (\d+): loss %(-?\d+), stash \[([^\]]*)\] -> "
                   r"\[([^\]]*)\](?: in a (\d+)-byte slot)?")
MAX_PROBLEMS = 20
# Opcode -> the input its output may be written over (the runtime's
# table, runtime/program/in_place.h, as the planner uses it; kept apart
# here so the check does not share the code it checks).
IN_PLACE_INPUT = {"Add": 0, "GeluGrad": 0, "Softmax": 0,
                  "CrossEntropyGrad": 1, "CrossEntropySumsGrad": 1}


def indices(text):
    return [int(x.strip().lstrip("%")) for x in text.split(",") if x.strip()]


class Stage:
    def __init__(self, index, arena):
        self.index = index
        self.arena = arena
        # id -> (offset, bytes, name); a stash buffer's offset is arena + its
        # slot offset, so slot bytes never seem to share arena bytes (only
        # one chunk's action, and its slot, runs at a time).
        self.buffers = {}
        self.in_stash = set()
        self.persistent = set()
        self.live_to_end = {"": set(), "update ": set()}
        self.lists = {"": [], "update ": []}  # [(opcode, reads, writes)]
        # Buffers written before a list runs (a backward's stash inputs,
        # which its forward wrote into the slot): alive from its start.
        self.prewritten = {}
        self.chunks = []  # (chunk, loss, stash out, stash in, slot bytes)
        self.in_place = collections.Counter()  # opcode -> outputs in place

    def where(self, b):
        """Buffer b's bytes, as 'slot [lo, hi)' or '[lo, hi)'."""
        offset, size, _ = self.buffers[b]
        if b in self.in_stash:
            return f"slot [{offset - self.arena}, {offset - self.arena + size})"
        return f"[{offset}, {offset + size})"

    def add_stash_lifetimes(self):
        """Around each chunk action: the forward's kept values (and loss)
        are read after its list, the backward's stash inputs were written
        before its list."""
        for k, loss, out, into, _ in self.chunks:
            forward = f"chunk{k} forward "
            self.lists.setdefault(forward, [])
            self.live_to_end.setdefault(forward, set()).update(
                out + ([loss] if loss >= 0 else []))
            backward = f"chunk{k} backward "
            self.lists.setdefault(backward, [])
            self.prewritten.setdefault(backward, set()).update(into)


def parse(lines):
    stages = []
    for line in lines:
        line = line.rstrip("\n")
        if m := STAGE.match(line):
            stages.append(Stage(int(m.group(1)), int(m.group(2))))
            continue
        if not stages:
            continue
        st = stages[-1]
        if m := HEADER.match(line):
            tokens, targets, loss, lr, step, norm = m.groups()
            for b in (tokens, targets, lr, step):
                if b is not None and int(b) >= 0:
                    st.persistent.add(int(b))
            if int(loss) >= 0:
                st.live_to_end[""].add(int(loss))
            if norm is not None and int(norm) >= 0:
                st.live_to_end["update "].add(int(norm))
        elif m := BUFFER.match(line):
            b, stash = int(m.group(1)), m.group(2) == "stash@"
            size = DTYPE_BYTES[m.group(4)]
            for d in indices(m.group(5)):
                size *= d
            st.buffers[b] = ((st.arena if stash else 0) + int(m.group(3)),
                             size, m.group(6).strip())
            if stash:
                st.in_stash.add(b)
        elif m := PARAM.match(line):
            st.persistent.add(int(m.group(1)))
            if s := PARAM_STATE.search(line):
                st.persistent.update(int(x) for x in s.groups())
        elif m := CHUNK.match(line):
            st.chunks.append((int(m.group(1)), int(m.group(2)),
                              indices(m.group(3)), indices(m.group(4)),
                              int(m.group(5) or 0)))
        elif m := INSTRUCTION.match(line):
            kind = m.group(1) or ""
            writes = indices(m.group(4)) + indices(m.group(5) or "")
            st.lists.setdefault(kind, []).append(
                (m.group(2), indices(m.group(3)), writes))
    for st in stages:
        st.add_stash_lifetimes()
    return stages


def lifetimes(st, kind, problems):
    """{buffer: [first, last]} of the transients of one instruction list."""
    instructions = st.lists[kind]
    written, last_read, first_read = {}, {}, {}
    for b in st.prewritten.get(kind, ()):
        written[b] = last_read[b] = -1
    for pos, (_, reads, writes) in enumerate(instructions):
        for b in reads:
            last_read[b] = pos
            first_read.setdefault(b, pos)
        for b in writes:
            written.setdefault(b, pos)
            last_read[b] = max(last_read.get(b, pos), pos)
    span = {b: [w, last_read[b]] for b, w in written.items()
            if b not in st.persistent}
    for b in sorted(span):
        if first_read.get(b, span[b][0]) < span[b][0]:
            problems.append(f"stage {st.index}: {kind}buffer %{b} "
                            f"'{st.buffers[b][2]}' is read (instruction "
                            f"{first_read[b]}) before instruction "
                            f"{span[b][0]} writes it")
    # Views: read, never written here, not an argument.
    owner_of = {}
    for view in sorted(set(first_read) - set(written) - st.persistent,
                       key=lambda b: first_read[b]):
        offset, size, name = st.buffers[view]
        owners = [b for b in list(span) + sorted(st.persistent)
                  if st.buffers[b][:2] == (offset, size) and
                  (b in st.persistent or span[b][0] < first_read[view])]
        if not owners:
            problems.append(f"stage {st.index}: {kind}buffer %{view} "
                            f"'{name}' is read (instruction "
                            f"{first_read[view]}) before anything writes it")
            continue
        owner = max(owners, key=lambda b: -1 if b in st.persistent
                    else span[b][0])
        owner_of[view] = owner
        if owner not in st.persistent:
            span[owner][1] = max(span[owner][1], last_read[view])
    end = max(len(instructions) - 1, 0)
    for b in st.live_to_end.get(kind, ()):
        if b in span:
            span[b][1] = end
    # In place: an output first written at `pos` over the very bytes of its
    # in-place input, whose storage nothing reads after `pos`, joins that
    # storage (any other sharing of bytes is left to the sweep to report).
    joined = {}

    def storage(b):
        b = owner_of.get(b, b)
        while b in joined:
            b = joined[b]
        return b
    for pos, (opcode, reads, writes) in enumerate(instructions):
        k = IN_PLACE_INPUT.get(opcode)
        if k is None or k >= len(reads) or not writes:
            continue
        x, out = storage(reads[k]), writes[0]
        if (x in span and out in span and span[out][0] == pos and
                span[x][1] == pos and
                st.buffers[reads[k]][:2] == st.buffers[out][:2] and
                sum(storage(b) == x for b in reads) == 1):
            span[x][1] = max(pos, span[out][1])
            del span[out]
            joined[out] = x
            st.in_place[opcode] += 1
    return span


def check_stash(st, problems):
    """Slot bytes: named by a chunk's lists only, inside that chunk's slot;
    each kept value in the slot, read by the backward at the same bytes."""
    slot_of = {f"chunk{k} {part} ": slot for k, _, _, _, slot in st.chunks
               for part in ("forward", "backward")}
    for kind, instructions in st.lists.items():
        named = {b for _, reads, writes in instructions
                 for b in reads + writes}
        for b in sorted(named & st.in_stash):
            name = st.buffers[b][2]
            if kind not in slot_of:
                problems.append(f"stage {st.index}: {kind or 'micro-batch '}"
                                f"list names buffer %{b} '{name}' in a stash "
                                f"slot, but runs with none")
            elif st.buffers[b][0] + st.buffers[b][1] > st.arena + slot_of[kind]:
                problems.append(f"stage {st.index}: {kind}buffer %{b} "
                                f"'{name}' {st.where(b)} ends past the "
                                f"chunk's stash slot ({slot_of[kind]} bytes)")
    for k, _, out, into, _ in st.chunks:
        for kept, read in zip(out, into):
            for b in (kept, read):
                if b not in st.in_stash:
                    problems.append(f"stage {st.index}: chunk {k} keeps "
                                    f"%{b} '{st.buffers[b][2]}' in the arena, "
                                    f"not in its stash slot")
            if st.buffers[kept][:2] != st.buffers[read][:2]:
                problems.append(f"stage {st.index}: chunk {k} keeps %{kept} "
                                f"at {st.where(kept)} but its backward reads "
                                f"%{read} at {st.where(read)}")


def check_stage(st, problems):
    for b, (offset, size, name) in st.buffers.items():
        if b not in st.in_stash and offset + size > st.arena:
            problems.append(f"stage {st.index}: buffer %{b} '{name}' "
                            f"[{offset}, {offset + size}) ends past the arena "
                            f"({st.arena} bytes)")
    check_stash(st, problems)
    forever = float("inf")
    for kind in st.lists:
        span = lifetimes(st, kind, problems)
        alive = [(-1, forever, b) for b in st.persistent if b in st.buffers]
        alive += [(s, e, b) for b, (s, e) in span.items()]
        alive = [a for a in alive if st.buffers[a[2]][1] > 0]
        alive.sort(key=lambda a: (a[0], a[2]))
        # Sweep over time; `active` holds the buffers alive now, sorted by
        # offset and (while no problem is found) disjoint, so a new buffer
        # overlaps one of them exactly when it overlaps a neighbour.
        active, expiry = [], []
        for start, end, b in alive:
            while expiry and expiry[0][0] < start:
                _, gone = heapq.heappop(expiry)
                offset = st.buffers[gone][0]
                active.pop(bisect.bisect_left(active, (offset, gone)))
            lo, size, name = st.buffers[b]
            hi = lo + size
            i = bisect.bisect_left(active, (lo, b))
            for j in (i - 1, i):
                if 0 <= j < len(active):
                    other = active[j][1]
                    olo, osize, oname = st.buffers[other]
                    if olo < hi and lo < olo + osize:
                        when = lambda x: ("always" if x in st.persistent else
                                          "[%d, %d]" % tuple(span[x]))
                        problems.append(
                            f"stage {st.index}: {kind}buffer %{b} '{name}' "
                            f"{st.where(b)} alive {when(b)} overlaps buffer "
                            f"%{other} '{oname}' {st.where(other)} "
                            f"alive {when(other)}")
            active.insert(i, (lo, b))
            heapq.heappush(expiry, (end, b))


def main():
    args = sys.argv[1:]
    count_in_place = "--count-in-place" in args
    if count_in_place:
        args.remove("--count-in-place")
    if len(args) != 1:
        sys.exit("usage: find_overlapping_buffers.py [--count-in-place] "
                 "PROGRAM_DUMP.txt|-")
    source = sys.stdin if args[0] == "-" else open(args[0])
    stages = parse(source)
    if not stages:
        sys.exit("find_overlapping_buffers: no 'stage N: arena ...' line; "
                 "is this loom-translate --loom-program-dump output?")
    problems = []
    for st in stages:
        before = len(problems)
        check_stage(st, problems)
        if len(problems) == before:
            chunked = sum(len(v) for k, v in st.lists.items()
                          if k.startswith("chunk"))
            print(f"stage {st.index}: {len(st.buffers)} buffers, "
                  f"{len(st.lists[''])} + {len(st.lists['update '])} "
                  f"instructions"
                  f"{f' + {chunked} in pipeline chunks' if chunked else ''}"
                  f": no overlaps")
        if count_in_place:
            counts = ", ".join(f"{op} {n}"
                               for op, n in sorted(st.in_place.items()))
            print(f"stage {st.index}: in place: {counts or 'none'}")
    for p in problems[:MAX_PROBLEMS]:
        print(p)
    if len(problems) > MAX_PROBLEMS:
        print(f"... and {len(problems) - MAX_PROBLEMS} more")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
