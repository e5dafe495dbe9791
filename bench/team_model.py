"""A longer run of the team-vault state machine (tests/support/team_model.py): two clones and a bare remote driven through
the real command line, with the invariants checked after every step. CI runs a bounded version
(tests/test_team_model.py); this explores further and prints how many steps ran and what it found.

    python bench/team_model.py [--examples 50] [--steps 30] [--seed N]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=50)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    import os

    from hypothesis import HealthCheck, seed, settings
    from hypothesis.stateful import run_state_machine_as_test

    os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    import team_model

    steps = {"n": 0}
    original = team_model.TeamVault.cmd

    def counting(self, clone, *a):
        steps["n"] += 1
        return original(self, clone, *a)

    team_model.TeamVault.cmd = counting
    kills = {"n": 0, "killed": 0}
    original_kill = team_model.run_killed

    def counting_kill(*a):
        code = original_kill(*a)
        kills["n"] += 1
        kills["killed"] += code == -9
        return code

    team_model.run_killed = counting_kill
    with tempfile.TemporaryDirectory(prefix="acpmem-team-") as tmp:
        team_model.TeamVault.base = Path(tmp)
        machine = team_model.TeamVault
        if args.seed is not None:
            machine = seed(args.seed)(machine)
        t0 = time.monotonic()
        try:
            run_state_machine_as_test(machine, settings=settings(
                max_examples=args.examples, stateful_step_count=args.steps, deadline=None, database=None,
                suppress_health_check=list(HealthCheck)))
            found = "no invariant broken"
        except AssertionError as exc:
            found = f"FOUND: {str(exc).splitlines()[0][:300]}"
        except Exception as exc:   # e.g. hypothesis's Flaky: a failure that did not replay
            found = f"FOUND ({type(exc).__name__}): {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        print(f"team model: {args.examples} examples of up to {args.steps} steps, {steps['n']} commands and "
              f"{kills['n']} writes with a kill point ({kills['killed']} killed), {time.monotonic() - t0:.0f} s: "
              f"{found}")


if __name__ == "__main__":
    main()
