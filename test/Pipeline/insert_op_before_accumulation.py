"""Reads a training step (loom-opt --loom-autodiff output) on stdin and
writes it with `loom.gelu` applied to the gradient accumulated into the
accumulator named NAME, just before the accumulation: an op the pipeline's
accumulation tree does not follow (for --loom-pipeline's error test)."""
import re
import sys

name = sys.argv[1]
text = sys.stdin.read()
m = re.search(r'%(arg\d+): [^{]*\{loom.name = "' + re.escape(name) +
              r'", loom.role = #loom.role<grad>\}', text)
if not m:
    sys.exit(f"no gradient accumulator named {name}")
acc = m.group(1)
add = re.compile(r'^(\s*)(%\S+) = loom.add %' + acc + r', (%\S+) : (\S+), \S+$',
                 re.M)
m = add.search(text)
if not m:
    sys.exit(f"no accumulation into %{acc}")
indent, result, grad, ty = m.groups()
text = (text[:m.start()] + f"{indent}%odd = loom.gelu {grad} : {ty}\n" +
        f"{indent}{result} = loom.add %{acc}, %odd : {ty}, {ty}" +
        text[m.end():])
sys.stdout.write(text)
