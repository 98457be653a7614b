#!/usr/bin/env python3
"""Is hip/nv4.h's decode (11 instructions per 32-bit word of 8 FP4 codes) the cheapest that
shifts and masks allow? An exhaustive search over code placements says yes.

The decode turns a word into 4 bf16x2 registers; register j holds codes j (low half) and j + 4
(high half), each as sign -> bit 15, magnitude -> bits 8..6 of its half (hip/nv4.h). Both halves
go through the same instructions, so a placement is one 16-bit half: for each of the 4 codes a
sign bit and 3 contiguous magnitude bits (modulo 16: a rotation may wrap), all 16 bits used once.
Register j then costs:
  - one mask (LOP3) if its sign and magnitude need the same shift (the shift is 15 - sign
    position = 6 - magnitude position, mod 16), else two (mask each, then or: LOP3 takes one
    immediate);
  - the shifted words it needs, each shift amount computed once per word and shared between
    registers (0: the word itself).
(A magnitude split into non-contiguous bits needs a third shift and mask, so it is never
cheaper.) Output: the cheapest cost and the placements that reach it.
"""
import itertools

MAG = (6, 7, 8)  # the magnitude's bits in a bf16 half (value x 2^-126); the sign at 15


def main():
    results = []
    for mag_shift in itertools.product(range(16), repeat=4):
        used = set()
        for b in mag_shift:
            bits = {(p - b) % 16 for p in MAG}
            if used & bits:
                break
            used |= bits
        else:
            free = sorted(set(range(16)) - used)
            for signs in itertools.permutations(free):
                shifts, masks = set(), 0
                for b, s in zip(mag_shift, signs):
                    a = (15 - s) % 16
                    shifts |= {a, b}
                    masks += 1 if a == b else 2
                results.append((masks + len(shifts - {0}), mag_shift, signs))
    best = min(r[0] for r in results)
    print(f"{len(results)} placements; the cheapest costs {best} instructions per word:")
    for cost, mag_shift, signs in sorted(results)[:8]:
        if cost == best:
            print(f"  magnitude shifts {mag_shift}, sign bits {signs}")
    # hip/nv4.h: codes 0..2 at shifts 0, 3, 6 (1 + 2 + 2), code 3 split (6): 11.
    print("hip/nv4.h: 11")


if __name__ == "__main__":
    main()
