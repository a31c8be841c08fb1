"""Fail when a JUnit XML report holds no test, or a test skipped for a missing package.

Every `pytest.importorskip` in tests/ gives a reason with "pip install" (tests/test_suite_conventions.py
keeps it so), a test that needs Debian's chromium one with "apt-get install" (.ci/run installs it); on
CI no such skip may happen.
"""

import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
cases = list(root.iter("testcase"))
missing = [
    f"{case.get('classname')}::{case.get('name')}: {skip.get('message')}"
    for case in cases
    for skip in case.iter("skipped")
    if any(install in (skip.get("message") or "") for install in ("pip install", "apt-get install"))
]
skipped = sum(1 for case in cases for _ in case.iter("skipped"))
print(f"{len(cases)} tests reported, {skipped} skipped, {len(missing)} of them for a missing package")
if not cases:
    sys.exit("no test ran")
if missing:
    sys.exit("skipped for a missing package:\n  " + "\n  ".join(missing[:50]))
