//! Host checks of the mma GEMM's data layout (hip/gemm_mma.h), which no GPU-less test can run:
//! the k permutation that gives every lane whole code words, its mirror on the activations
//! (`mx_to_bf16_p8`), the swizzled shared ring, and the exact FP4 -> bf16 decode. The kernel's
//! index formulas are restated here one for one (`swz`, `perm8`, `pair_raw`, the lane loops);
//! the MMA itself is modelled from the PTX ISA's fragment tables for mma.m16n8k16 (A: row
//! g + 8 (i / 2 % 2)... see `a_at`), not from our code, and the expected product is a plain
//! triple loop over the unpermuted operands with the E2M1 values written out by hand.

/// E2M1 magnitudes by code & 7 (OCP MX spec, table of FP4 E2M1 values), sign in bit 3.
const E2M1: [f64; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

fn e2m1(code: u32) -> f64 {
    let v = E2M1[(code & 7) as usize];
    if code & 8 != 0 {
        -v
    } else {
        v
    }
}

/// bf16 bits -> f64 (exact, subnormals included).
fn bf16(bits: u32) -> f64 {
    f32::from_bits((bits & 0xFFFF) << 16) as f64
}

// ---- hip/gemm_mma.h, restated ----
fn swz(r: u32, c: u32) -> u32 {
    c ^ ((c >> 2) & 2) ^ (r & 1)
}
fn perm8(q: u32) -> u32 {
    if q < 4 {
        2 * q
    } else {
        2 * (q - 4) + 1
    }
}
/// hip/nv4.h nv4_word: a stored word's codes in the layout the kernels decode.
fn nv4_word(w: u32) -> u32 {
    ((w & 0x0008_0008) << 12)
        | ((w & 0x0007_0007) << 6)
        | ((w & 0x0080_0080) << 5)
        | ((w & 0x0070_0070) >> 1)
        | ((w & 0x0800_0800) >> 2)
        | ((w & 0x0700_0700) >> 8)
        | ((w & 0x8000_8000) >> 5)
        | (w & 0x6000_6000)
        | ((w & 0x1000_1000) >> 1)
}
/// fp4_bf16_pair_raw::<J> on an nv4 word.
fn pair_raw(j: u32, v: u32) -> u32 {
    if j < 3 {
        (v << (3 * j)) & 0x81C0_81C0
    } else {
        ((v >> 6) & 0x0180_0180) | ((v >> 5) & 0x0040_0040) | ((v << 5) & 0x8000_8000)
    }
}
/// The step's single multiplier when every scale byte is <= 128: 2^(s - 1) as a bf16.
fn one_multiplier(s: u32) -> u32 {
    (s + 126) << 7
}
fn e8m0_bf16(s: u32) -> u32 {
    if s == 0 {
        0x0040
    } else if s == 255 {
        0x7FC0
    } else {
        s << 7
    }
}

/// The PTX ISA's m16n8k16 fragments (bf16): which lane / register / half holds A[row][k],
/// B[k][col]; C[row][col] is lane 4 (row % 8) + col / 2, element col % 2 + 2 (row / 8).
fn a_at(row: u32, k: u32) -> (u32, u32, u32) {
    (4 * (row % 8) + (k % 8) / 2, row / 8 + 2 * (k / 8), k % 2)
}
fn b_at(k: u32, col: u32) -> (u32, u32, u32) {
    (4 * col + (k % 8) / 2, k / 8, k % 2)
}
fn half(r: u32, h: u32) -> u32 {
    (r >> (16 * h)) & 0xFFFF
}
/// D += A B from the per-lane registers (f64: the test's values make every sum exact).
fn mma(d: &mut [[f64; 8]; 16], a: &[[u32; 4]; 32], b: &[[u32; 2]; 32]) {
    for (row, dr) in d.iter_mut().enumerate() {
        for (col, dv) in dr.iter_mut().enumerate() {
            for k in 0..16 {
                let (la, ra, ha) = a_at(row as u32, k);
                let (lb, rb, hb) = b_at(k, col as u32);
                *dv += bf16(half(a[la as usize][ra as usize], ha))
                    * bf16(half(b[lb as usize][rb as usize], hb));
            }
        }
    }
}

/// A little deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 32) as u32
    }
}

/// nv4_word moves every bit of a word to a bit of its own (a bijection: nothing is lost or
/// doubled).
#[test]
fn nv4_word_is_a_bit_permutation() {
    let mut seen = 0u32;
    for b in 0..32 {
        let r = nv4_word(1 << b);
        assert_eq!(r.count_ones(), 1, "bit {b} -> {r:#x}");
        assert_eq!(seen & r, 0, "bit {b} lands where another did");
        seen |= r;
    }
    assert_eq!(seen, u32::MAX);
}

/// The exact decode: every code in every position J of a word, and scale bytes over the whole
/// E8M0 range, give the bf16 of code x 2^(s - 127) (Inf past bf16's range, NaN for 255).
#[test]
fn fp4_pairs_decode_exactly() {
    for j in 0..4u32 {
        for lo in 0..16u32 {
            for hi in 0..16u32 {
                let v = (lo << (4 * j)) | (hi << (4 * j + 16));
                // Other nibbles set too: they must not leak into the pair.
                let noise = !((0xFu32 << (4 * j)) | (0xF << (4 * j + 16)));
                for w in [v, v | noise] {
                    let r = pair_raw(j, nv4_word(w));
                    for (h, code) in [(0, lo), (1, hi)] {
                        let got = bf16(half(r, h));
                        assert_eq!(
                            got,
                            e2m1(code) * 2f64.powi(-126),
                            "J {j} code {code:#x} w {w:#x}"
                        );
                        assert_eq!(got.is_sign_negative(), code & 8 != 0, "sign of {code:#x}");
                        for s in [0u32, 1, 100, 127, 128, 129, 200, 254, 255] {
                            // bf16 products, as fma.rn.bf16x2 makes them: exact values here.
                            let scaled = got * 2f64.powi(126) * bf16(e8m0_bf16(s));
                            if s == 255 {
                                assert!(bf16(e8m0_bf16(s)).is_nan());
                                continue;
                            }
                            let want = e2m1(code) * 2f64.powi(s as i32 - 127);
                            assert_eq!(scaled, want, "code {code:#x} scale {s}");
                            // The one-multiply decode of steps whose scale bytes are <= 128.
                            if s <= 128 {
                                assert_eq!(
                                    got * bf16(one_multiplier(s)),
                                    want,
                                    "code {code:#x} scale {s}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    // bf16 scale bytes: 2^-127 is the subnormal 0x0040, 2^0 is 0x3F80.
    assert_eq!(bf16(e8m0_bf16(0)), 2f64.powi(-127));
    assert_eq!(e8m0_bf16(127), 0x3F80);
}

/// The swizzled ring: the 8 lanes of each quarter warp read 8 distinct 16-byte bank groups (no
/// conflict), and chunk placement is a bijection within each row.
#[test]
fn ring_reads_are_conflict_free() {
    for w in 0..4u32 {
        for j in 0..8u32 {
            for quarter in 0..4u32 {
                let mut banks = std::collections::BTreeSet::new();
                for lane in 8 * quarter..8 * quarter + 8 {
                    let (g, t) = (lane / 4, lane % 4);
                    let row = 8 * j + g;
                    let byte = row * 256 + swz(row, 4 * t + w) * 16;
                    banks.insert((byte / 16) % 8);
                }
                assert_eq!(banks.len(), 8, "w {w} fragment {j} quarter {quarter}");
            }
        }
    }
    for r in 0..64u32 {
        let mut seen = [false; 16];
        for c in 0..16 {
            seen[swz(r, c) as usize] = true;
        }
        assert!(seen.iter().all(|&b| b));
    }
}

/// One warp's 16 weight rows x 8 pair columns over two K steps (256 k, 8 blocks): the lanes'
/// registers built as the kernel builds them (codes from each lane's 16-byte block loads,
/// decoded pairs (J, J + 4); activations permuted by mx_to_bf16_p8, copied into the swizzled
/// ring, read back as 16-byte chunks), multiplied with the PTX fragment model, equal the plain
/// product of the unpermuted operands.
#[test]
fn swapped_operands_multiply_to_the_plain_product() {
    assert_eq!(swapped_product_mismatches(perm8), 0);
    // The check can fail: activations left in their stored order give wrong sums.
    assert!(swapped_product_mismatches(|q| q) > 64);
}

/// How many of the 16 x 8 results differ from the plain product when the activations are
/// written in the order `perm` (the kernel: perm8).
fn swapped_product_mismatches(perm: fn(u32) -> u32) -> usize {
    const K: usize = 256;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // Weights: 16 rows x K codes (4-bit, little-endian in words), a scale byte per row and block.
    let codes: Vec<Vec<u32>> = (0..16)
        .map(|_| (0..K).map(|_| rng.next() & 0xF).collect())
        .collect();
    let scales: Vec<Vec<u32>> = (0..16)
        .map(|_| (0..K / 32).map(|_| 120 + rng.next() % 12).collect())
        .collect();
    let words: Vec<Vec<u32>> = codes
        .iter()
        .map(|r| {
            (0..K / 8)
                .map(|q| (0..8).fold(0u32, |w, i| w | (r[8 * q + i] << (4 * i))))
                .collect()
        })
        .collect();
    // Activations: 8 pair columns x K small integers (exact in bf16 and in every sum).
    let x: Vec<Vec<i32>> = (0..8)
        .map(|_| (0..K).map(|_| (rng.next() % 15) as i32 - 7).collect())
        .collect();
    let xbits = |v: i32| (f32::to_bits(v as f32) >> 16) & 0xFFFF;
    // mx_to_bf16_p8: element i of a group of 8 goes to position perm8(i).
    let xg: Vec<Vec<u32>> = x
        .iter()
        .map(|r| {
            let mut o = vec![0u32; K];
            for (i, &v) in r.iter().enumerate() {
                o[(i & !7) | perm((i & 7) as u32) as usize] = xbits(v);
            }
            o
        })
        .collect();
    let mut d = [[0f64; 8]; 16];
    for s in 0..K / 128 {
        // The ring stage: row r, chunk c (8 bf16 from k 128 s + 8 c) at chunk swz(r, c).
        let mut ring = vec![0u32; 8 * 128];
        for (r, row) in xg.iter().enumerate() {
            for c in 0..16u32 {
                let at = r * 128 + swz(r as u32, c) as usize * 8;
                let from = 128 * s + 8 * c as usize;
                ring[at..at + 8].copy_from_slice(&row[from..from + 8]);
            }
        }
        for w in 0..4usize {
            let mut a0 = [[0u32; 4]; 32];
            let mut a1 = [[0u32; 4]; 32];
            let mut b0 = [[0u32; 2]; 32];
            let mut b1 = [[0u32; 2]; 32];
            for lane in 0..32u32 {
                let (g, t) = ((lane / 4) as usize, (lane % 4) as usize);
                let blk = 4 * s + t;
                let dec = |row: usize, j: u32| {
                    let r = pair_raw(j, nv4_word(words[row][4 * blk + w]));
                    let sc = e8m0_bf16(scales[row][blk]);
                    // The two fma.rn.bf16x2 (exact: the values are representable).
                    let mut out = 0u32;
                    for h in 0..2 {
                        let v = bf16(half(r, h)) * 2f64.powi(126) * bf16(sc);
                        out |= (f32::to_bits(v as f32) >> 16) << (16 * h);
                    }
                    out
                };
                let l = lane as usize;
                a0[l] = [dec(g, 0), dec(g + 8, 0), dec(g, 1), dec(g + 8, 1)];
                a1[l] = [dec(g, 2), dec(g + 8, 2), dec(g, 3), dec(g + 8, 3)];
                // One 16-byte shared load: row g, chunk 4t + w.
                let at = g * 128 + swz(g as u32, (4 * t + w) as u32) as usize * 8;
                let q: Vec<u32> = (0..4)
                    .map(|i| ring[at + 2 * i] | (ring[at + 2 * i + 1] << 16))
                    .collect();
                b0[l] = [q[0], q[1]];
                b1[l] = [q[2], q[3]];
            }
            mma(&mut d, &a0, &b0);
            mma(&mut d, &a1, &b1);
        }
    }
    let mut bad = 0;
    for row in 0..16 {
        for col in 0..8 {
            let want: f64 = (0..K)
                .map(|k| {
                    e2m1(codes[row][k])
                        * 2f64.powi(scales[row][k / 32] as i32 - 127)
                        * x[col][k] as f64
                })
                .sum();
            bad += (d[row][col] != want) as usize;
        }
    }
    bad
}
