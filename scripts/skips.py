#!/usr/bin/env python3
"""Lists every test that skipped in a scripts/test.sh run, and fails on a skip that
scripts/expected-skips does not expect on CI's machines.

Reads, from the directory given:
  rust.tsv   the Rust tests' records (hull_testkit::skip writes them to HULL_SKIP_LOG):
             RUNNER<TAB>BINARY::TEST[#PART]<TAB>REASON, RUNNER being root or rootless;
  SUITE.xml  JUnit reports (pytest --junitxml, node --test's junit reporter), run as root;
             their skips are named SUITE:CLASSNAME::NAME;
  SUITE.rootless.xml  the same from a run as the unprivileged user (scripts/sdk-rootless.sh).

Set HULL_ALLOW_SKIPS=1 to list skips without failing (a machine with fewer kernel features).
"""
import fnmatch
import os
import re
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))


def expected():
    """(runner, pattern) pairs: a line is `RUNNER PATTERN  # why`; PATTERN is an fnmatch glob."""
    out = []
    with open(os.path.join(HERE, "expected-skips")) as f:
        for line in f:
            # A comment is a line starting with `#`, or ` # ...` after the entry (a test name
            # holds `#` only before a part's name, never followed by a space).
            line = re.split(r"\s#\s", " " + line.strip() + " ", maxsplit=1)[0].strip()
            if line:
                runner, pattern = line.split(None, 1)
                out.append((runner, pattern.strip()))
    return out


def skips(d):
    """(runner, test, reason) for every skip recorded in d."""
    found = []
    rust = os.path.join(d, "rust.tsv")
    if os.path.exists(rust):
        with open(rust) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t", 2)
                if len(parts) == 3:
                    found.append(tuple(parts))
    for name in sorted(os.listdir(d)):
        if not name.endswith(".xml"):
            continue
        suite = name[: -len(".xml")]
        runner = "root"
        if suite.endswith(".rootless"):
            suite, runner = suite[: -len(".rootless")], "rootless"
        for case in ET.parse(os.path.join(d, name)).iter("testcase"):
            for s in case.findall("skipped"):
                test = "%s:%s::%s" % (suite, case.get("classname", ""), case.get("name", ""))
                found.append((runner, test, s.get("message") or (s.text or "").strip()))
    return found


def main():
    d = sys.argv[1]
    allow = expected()
    found = skips(d)
    unexpected = []
    print("== skipped tests: %d" % len(found))
    for runner, test, reason in found:
        ok = any(r == runner and fnmatch.fnmatchcase(test, p) for r, p in allow)
        print("  %-10s %-8s %s: %s" % ("expected" if ok else "UNEXPECTED", runner, test, reason))
        if not ok:
            unexpected.append(test)
    if not unexpected:
        print("skips: all %d expected on this machine kind (scripts/expected-skips)" % len(found))
        return 0
    if os.environ.get("HULL_ALLOW_SKIPS") == "1":
        print("skips: %d not expected, allowed by HULL_ALLOW_SKIPS=1" % len(unexpected))
        return 0
    print("skips: FAILED: %d skipped test(s) that CI's machines should run: a missing package, kernel "
          "feature or service (see the reasons above), or a new skip to list in scripts/expected-skips "
          "with why" % len(unexpected), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
