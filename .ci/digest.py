"""Print what a failed `make test` needs a reader to see, as the last lines of CI's output.

Why: CI keeps only the tail of a run's output, and a pytest-xdist worker's internal error prints a long
traceback after pytest's own summary, so the one failed run we had (session 65's) showed neither which tests
failed nor why. This reads the JUnit file `make test` writes and prints, last: the free disk (a full disk
fails builds in many tests at once), then one line per failed or erroring test with the first line of its
message, grouped by that message so a hundred tests that failed the same way take one line.

Usage: python .ci/digest.py build/test-report.xml
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

MAX_GROUPS = 25  # distinct failure messages printed; the rest are counted


def first_line(text: str | None, width: int = 200) -> str:
    """The first non-empty line of ``text``, cut to ``width`` characters."""
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:width]
    return "(no message)"


def failures(report: Path) -> list[tuple[str, str, str]]:
    """(kind, test id, message) for every failed or erroring test case in a JUnit file."""
    out = []
    for case in ET.parse(report).getroot().iter("testcase"):
        for kind in ("failure", "error"):
            for node in case.findall(kind):
                test = f"{case.get('classname', '')}::{case.get('name', '')}"
                out.append((kind, test, first_line(node.get("message") or node.text)))
    return out


def main(argv: list[str]) -> int:
    report = Path(argv[1]) if len(argv) > 1 else Path("build/test-report.xml")
    print("\n=== digest of the failed test run (.ci/digest.py) ===")
    for where in (Path.cwd(), Path(tempfile.gettempdir()), Path("~").expanduser()):
        try:
            usage = shutil.disk_usage(where)
        except OSError as e:
            print(f"disk: {where}: {e}")
            continue
        print(f"disk: {usage.free / 2**30:.1f} GiB free of {usage.total / 2**30:.0f} under {where}")
    if not report.is_file():
        print(f"no test report at {report}: the run stopped before pytest wrote it")
        return 0
    try:
        found = failures(report)
    except ET.ParseError as e:
        print(f"the test report {report} does not parse: {e}")
        return 0
    groups: dict[str, list[str]] = defaultdict(list)
    for kind, test, message in found:
        groups[f"{kind}: {message}"].append(test)
    print(f"{len(found)} failed or erroring tests, {len(groups)} distinct messages")
    for i, (message, tests) in enumerate(sorted(groups.items(), key=lambda kv: -len(kv[1]))):
        if i == MAX_GROUPS:
            print(f"... and {len(groups) - MAX_GROUPS} more messages")
            break
        more = f" and {len(tests) - 1} more" if len(tests) > 1 else ""
        print(f"- {len(tests)}x {message}\n    e.g. {tests[0]}{more}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
