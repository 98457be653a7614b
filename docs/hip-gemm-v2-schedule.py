#!/usr/bin/env python3
"""A model of the v2 GEMM's pipeline (hip/gemm_v2.h gemm_v2_body; docs/hip-gemm-v2.md): ring
slots of activations (A) and raw weight codes (W), the two bf16 B buffers, cp.async groups that
land only when waited for. Checks that no slot is overwritten before it is consumed and that every
read sees the right step. Run: python3 docs/hip-gemm-v2-schedule.py"""


def run(stages, steps):
    slot_a, slot_w, b, pending = {}, {}, {}, []

    def issue(t):
        return [("A", t % stages, t), ("W", t % stages, t)]

    def wait(n):  # cp.async.wait_group n: the oldest groups land
        while len(pending) > n:
            for kind, slot, t in pending.pop(0):
                (slot_a if kind == "A" else slot_w)[slot] = t

    for t in range(stages - 1):  # prologue
        pending.append(issue(t) if t < steps else [])
    wait(stages - 2)
    assert slot_w.get(0) == 0
    b[0] = 0  # decode(0), barrier
    for s in range(steps):
        t = s + stages - 1
        if t < steps:
            sl = t % stages
            assert sl != s % stages, ("activation slot overwritten while read", s)
            if s + 1 < steps:
                assert sl != (s + 1) % stages, ("code slot overwritten while decoded", s)
        pending.append(issue(t) if t < steps else [])
        assert slot_a.get(s % stages) == s, ("A not ready", s)
        assert b[s % 2] == s, ("B not ready", s)
        if s + 1 < steps:
            wait(stages - 2)
            assert slot_w.get((s + 1) % stages) == s + 1, ("W not ready", s)
            assert slot_a.get((s + 1) % stages) == s + 1, ("next A not ready", s)
            b[(s + 1) % 2] = s + 1  # decode(s + 1), then the barrier publishes it
    wait(0)


for stages in (3, 4, 5):
    for steps in range(1, 12):
        run(stages, steps)
print("schedule ok for STAGES 3..5, 1..11 steps")
try:
    run(2, 5)
    raise SystemExit("STAGES 2 should fail")
except AssertionError as e:
    print("STAGES 2 fails as expected:", e)
