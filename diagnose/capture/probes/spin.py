"""How long torch's idle intra-op threads spin after a parallel op before they sleep.

torch's CPU wheels run GNU OpenMP: after each parallel region a pool thread spin-waits for
the next one (``GOMP_SPINCOUNT`` iterations: a few ms on a current core; none with
``OMP_WAIT_POLICY=PASSIVE``; without end with ``ACTIVE``) and only then sleeps. The main
thread runs one op torch splits across its threads, then sleeps :data:`SPIN_SLEEP_S`; the
process's CPU time over that sleep, per pool thread, is the spin. Beside busy DataLoader
workers those spins hold CPUs the workers need (the step model's CPU sharing reads it).
"""

from __future__ import annotations

import statistics
import time

from .common import timed

#: the sleep after the op (s): longer than a default spin on a current core (about 5 ms of
#: 300,000 spins), so that the spin ends inside it; a spin that does not (ACTIVE, a slow
#: core) reads as the whole sleep, which is longer than the idle spells it holds anyway
SPIN_SLEEP_S = 0.02
#: rounds, of which the median: a round the host's other work slowed reads long alone
SPIN_ROUNDS = 3
#: elements of the op: above torch's grain (32,768), so that every thread takes a part
SPIN_ELEMENTS = 1 << 20


@timed("threads_spin")
def time_spin() -> float | None:
    """CPU ms each of torch's idle intra-op threads spins after a parallel op (module
    doc), the median of :data:`SPIN_ROUNDS`; None on one thread."""
    import torch

    n = torch.get_num_threads()
    if n < 2:
        return None
    x = torch.ones(SPIN_ELEMENTS)
    got = []
    for _ in range(SPIN_ROUNDS):
        x.mul_(1.0)
        c0 = time.process_time()
        time.sleep(SPIN_SLEEP_S)
        got.append((time.process_time() - c0) * 1e3 / (n - 1))
    return round(statistics.median(got), 3)
