#!/usr/bin/env python3
"""Totals the suites' machine-readable results for scripts/test.

Reads lit's --output JSON and GoogleTest's --gtest_output JSON from the
results folder, prints one line per suite and then the closing line
`N passed, N failed[, N skipped]`. Exits 1 when anything failed or a suite
left no results (a suite that did not run counts as one failure).
"""
import json
import os
import sys

LIT_PASS = {"PASS", "XFAIL", "FLAKYPASS"}
LIT_SKIP = {"UNSUPPORTED", "SKIPPED", "EXCLUDED"}


def lit_counts(path):
    with open(path) as f:
        tests = json.load(f)["tests"]
    passed = sum(t["code"] in LIT_PASS for t in tests)
    skipped = sum(t["code"] in LIT_SKIP for t in tests)
    return passed, len(tests) - passed - skipped, skipped


def gtest_counts(path):
    with open(path) as f:
        report = json.load(f)
    passed = failed = skipped = 0
    for suite in report.get("testsuites", []):
        for test in suite.get("testsuite", []):
            if test.get("result") == "SKIPPED" or test.get("status") == "NOTRUN":
                skipped += 1
            elif test.get("failures"):
                failed += 1
            else:
                passed += 1
    return passed, failed, skipped


def main():
    results = sys.argv[1]
    suites = [("lit", "lit.json", lit_counts),
              ("gtest", "gtest.json", gtest_counts),
              ("gtest-cuda-emulated", "gtest-cuda-emulated.json", gtest_counts),
              ("gtest-mpi", "gtest-mpi.json", gtest_counts)]
    total = [0, 0, 0]
    for name, file, count in suites:
        path = os.path.join(results, file)
        try:
            p, f, s = count(path)
        except (OSError, ValueError, KeyError) as e:
            print(f"{name}: no results ({e}); counted as 1 failure")
            p, f, s = 0, 1, 0
        print(f"{name}: {p} passed, {f} failed, {s} skipped")
        total = [total[0] + p, total[1] + f, total[2] + s]
    line = f"{total[0]} passed, {total[1]} failed"
    if total[2]:
        line += f", {total[2]} skipped"
    print(line)
    return 1 if total[1] else 0


if __name__ == "__main__":
    sys.exit(main())
