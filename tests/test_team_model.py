"""A team's vault as a state machine (``tests/team_model.py``): two clones — one made by ``init``, one by a plain
``git clone`` without a git identity — and a bare remote, driven through the real command line with fork writes,
human edits (valid, invalid, conflict markers), ``edit``, ``forget``, ``sync`` from either side, conflicts and their
resolution (including a person staging a file that still has its markers), ``doctor --fix`` and writes killed with
SIGKILL; after every step the invariants hold. Bounded for CI; ``bench/team_model.py`` runs it longer."""
from __future__ import annotations

from hypothesis import HealthCheck, settings

import team_model

STEPS = 12
EXAMPLES = 6


def test_a_team_vault_keeps_its_invariants(tmp_path):
    team_model.TeamVault.base = tmp_path
    machine = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=False,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])(team_model.TeamVault)
    machine.TestCase().runTest()
