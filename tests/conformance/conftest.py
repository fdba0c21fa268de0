"""Conformance against PyTorch's OpInfo database.

    pytest tests/conformance                # the fast subset (part of the normal test run)
    pytest tests/conformance --full-sweep   # every op_db entry; writes docs/op-coverage.md
"""

from __future__ import annotations

import os

from harness import REPO, RESULTS


def pytest_addoption(parser):
    parser.addoption("--full-sweep", action="store_true", default=False,
                     help="run every OpInfo of op_db and write docs/op-coverage.md")
    parser.addoption("--coverage-out", default=os.path.join(REPO, "docs", "op-coverage.md"),
                     help="where the full sweep writes its table")


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not config.getoption("--full-sweep", default=False) or not RESULTS:
        return
    from report import write_report

    path = config.getoption("--coverage-out")
    write_report(RESULTS, path)
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(f"conformance table written to {path}")
