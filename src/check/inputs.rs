//! Deterministic input generators of the catalog's format and routing cases. Every generator
//! depends only on its arguments (never on which other cases ran), so a case id always means
//! the same bits.

use crate::format::{pack_codes, MxFormat, MxTensor, BLOCK};
use crate::moe::synth::{synth_batch, Rng};

/// Blocks that probe every rule of the contract (the `special` input of `mxmoe check`): NaN and
/// ±Inf blocks, zero and −0 blocks, fp32 subnormals (incl. amax subnormal), ±0 inside blocks,
/// RNE ties, saturating values, binade edges, huge values near FLT_MAX (Even's carry), mixed
/// magnitudes. One 32-block per row.
pub fn special() -> Vec<f32> {
    let mut blocks: Vec<[f32; BLOCK]> = Vec::new();
    let mut b = [0f32; BLOCK];
    b[3] = f32::NAN;
    b[0] = 1.0;
    blocks.push(b);
    let mut b = [0.5f32; BLOCK];
    b[7] = f32::INFINITY;
    blocks.push(b);
    let mut b = [-2.0f32; BLOCK];
    b[31] = f32::NEG_INFINITY;
    blocks.push(b);
    blocks.push([0.0; BLOCK]);
    blocks.push([-0.0; BLOCK]);
    // fp32 subnormals only (amax subnormal).
    let mut b = [0f32; BLOCK];
    for (j, v) in b.iter_mut().enumerate() {
        *v = f32::from_bits(j as u32 * 0x1_1111 + 1) * if j % 2 == 0 { 1.0 } else { -1.0 };
    }
    blocks.push(b);
    // Normal amax with subnormal companions.
    let mut b = [0f32; BLOCK];
    b[0] = 1e-37;
    for (j, v) in b.iter_mut().enumerate().skip(1) {
        *v = f32::from_bits(0x0000_0100 * j as u32) * if j % 3 == 0 { -1.0 } else { 1.0 };
    }
    blocks.push(b);
    // FP4 ties and the G5 row (amax 5), signed zeros.
    let g5 = [
        5.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, -0.25, -0.75, -1.25, -2.5, -3.5, 0.1, -0.1,
    ];
    let mut b = [0f32; BLOCK];
    b[..g5.len()].copy_from_slice(&g5);
    b[14] = f32::from_bits(0x3E80_0001);
    b[15] = f32::from_bits(0x3E80_0004);
    b[16] = 4.75;
    b[17] = 5.5;
    b[18] = -0.0;
    blocks.push(b);
    // Saturation edges and binade edges for each format's max.
    for amax in [
        7.0f32, 6.5, 7.75, 29.0, 30.0, 480.0, 500.0, 60000.0, 1.99, 255.99998, 256.00003,
    ] {
        let mut b = [0f32; BLOCK];
        for (j, v) in b.iter_mut().enumerate() {
            *v = amax * (1.0 - j as f32 / 40.0) * if j % 2 == 1 { -1.0 } else { 1.0 };
        }
        blocks.push(b);
    }
    // Near FLT_MAX (Even's carry into the Inf exponent) and near the bottom of E8M0.
    let mut b = [0f32; BLOCK];
    b[0] = f32::MAX;
    b[1] = -3.0e38;
    b[2] = 1.0;
    blocks.push(b);
    let mut b = [0f32; BLOCK];
    b[0] = 1e-38;
    b[1] = 6e-39;
    b[2] = -3e-39;
    blocks.push(b);
    // Random heavy-tailed blocks with a wide exponent spread.
    let mut rng = Rng::new(42);
    for _ in 0..16 {
        let mut b = [0f32; BLOCK];
        let sh = (rng.normal() * 20.0) as i32;
        for v in b.iter_mut() {
            *v = (rng.heavy() * 2f64.powi(sh)) as f32;
        }
        blocks.push(b);
    }
    blocks.concat()
}

/// The per-format edge blocks (formerly `special_inputs` of the wgpu tests): NaN/Inf blocks
/// (with a payload NaN), zero and −0 blocks, fp32 subnormals at the bottom and at the normal
/// boundary, saturation at the format's `max_normal`, the scale edges near FLT_MAX, the golden
/// rows G5, G7, G8, G9, G10, ties at every scale, amax just below / above powers of two and of
/// `max_normal * 2^k` (the RCeil, Even and Ceil edges), random bit patterns over the whole
/// finite range and heavy-tailed data from 1e-30 to 1e30.
pub fn edges(fmt: MxFormat, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let mut v: Vec<f32> = Vec::new();
    fn push(v: &mut Vec<f32>, vals: &[f32], fill: f32) {
        let mut b = [fill; BLOCK];
        for (i, x) in vals.iter().enumerate().take(BLOCK) {
            b[i] = *x;
        }
        v.extend_from_slice(&b);
    }
    let maxn = fmt.spec().max_normal as f32;
    // NaN / Inf blocks, zero blocks, signed zeros.
    push(&mut v, &[1.0, f32::NAN, 3.0], 0.5);
    push(&mut v, &[f32::INFINITY, -2.0], 1.0);
    push(&mut v, &[-1.0, f32::NEG_INFINITY], -0.0);
    push(&mut v, &[f32::from_bits(0xFFC0_0001)], 0.0);
    push(&mut v, &[], 0.0);
    push(&mut v, &[], -0.0);
    push(&mut v, &[0.0, -0.0, 0.0, -0.0], 0.0);
    // fp32 subnormals: tiny amax, the smallest subnormal, the normal boundary.
    let sub = f32::from_bits;
    push(&mut v, &[sub(1), sub(2), -sub(3)], 0.0);
    push(
        &mut v,
        &[sub(0x7F_FFFF), sub(0x40_0000), -sub(0x40_0001)],
        sub(0x1234),
    );
    push(
        &mut v,
        &[sub(0x80_0000), sub(0x7F_FFFF), sub(0x3F_FFFF)],
        0.0,
    );
    // Saturation and the scale edges.
    push(
        &mut v,
        &[maxn, -maxn, maxn * 1.0625, maxn * 1.5, maxn * 1.999],
        0.0,
    );
    push(&mut v, &[f32::MAX, -f32::MAX, 1.0], 0.0);
    push(&mut v, &[sub(0x7F7F_FFFF), sub(0x7F00_0000)], 3.0);
    push(&mut v, &[sub(0x437F_FFFF), 100.0, -37.0, 3.0], 0.0); // G8
    push(&mut v, &[sub(0x4380_0001), 100.0], 0.0); // G9
    push(&mut v, &[7.0, -6.5, 3.25, 1.0], 0.0); // G7
    push(
        &mut v,
        &[
            5.0,
            0.25,
            0.75,
            1.25,
            1.75,
            2.5,
            3.5,
            -0.25,
            -0.75,
            -1.25,
            -2.5,
            -3.5,
            0.1,
            -0.1,
            sub(0x3E80_0001),
            sub(0x3E80_0004),
            4.75,
            5.5,
            -0.0,
            0.0,
        ],
        0.0,
    ); // G5
    push(&mut v, &[957.0, 957.0, 902.4, 960.0, 832.0, 291.7882], 1.0); // G10
                                                                       // Ties at every scale: odd multiples of a power of two around the element grid.
    for _ in 0..64 {
        let e = rng.below(40) as i32 - 20;
        let mut b = [0f32; BLOCK];
        for x in b.iter_mut() {
            let n = (2 * rng.below(64) + 1) as f32;
            let s = if rng.below(2) == 0 { 1.0 } else { -1.0 };
            *x = s * n * 2f32.powi(e - rng.below(6) as i32);
        }
        v.extend_from_slice(&b);
    }
    // amax just below / above powers of two and of max_normal * 2^k (RCeil, Even, Ceil edges).
    for k in -140i32..=120 {
        if k % 7 != 0 && k > -125 && k < 110 {
            continue;
        }
        let p = 2f64.powi(k);
        let a = (maxn as f64 * p) as f32;
        for d in [-2i32, -1, 0, 1, 2] {
            let bits = (a.to_bits() as i32 + d).max(1) as u32;
            let x = f32::from_bits(bits);
            let mut b = [0f32; BLOCK];
            b[0] = x;
            for (i, y) in b.iter_mut().enumerate().skip(1) {
                *y = x * ((i as f32) / 37.0) * if i % 3 == 0 { -1.0 } else { 1.0 };
            }
            v.extend_from_slice(&b);
        }
        let q = p as f32;
        if q.is_finite() && q > 0.0 {
            for d in [-1i32, 0, 1] {
                let x = f32::from_bits((q.to_bits() as i32 + d).max(1) as u32);
                push(&mut v, &[x, -x * 0.3], x * 0.01);
            }
        }
    }
    // Random bit patterns over the whole finite range (every exponent, subnormals included).
    for _ in 0..256 {
        let e = rng.below(255) as u32; // never 255: finite
        let mut b = [0f32; BLOCK];
        for x in b.iter_mut() {
            let ee = e.saturating_sub(rng.below(30) as u32);
            let bits = (rng.next_u64() as u32 & 0x807F_FFFF) | (ee << 23);
            *x = f32::from_bits(bits);
        }
        v.extend_from_slice(&b);
    }
    // Heavy-tailed data at several scales.
    for sc in [1e-30f64, 1e-3, 1.0, 37.0, 1e6, 1e30] {
        for _ in 0..32 * 16 {
            v.push((rng.heavy() * sc) as f32);
        }
    }
    v
}

/// A random heavy-tailed `[rows, k]` matrix.
pub fn random(rows: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..rows * k).map(|_| rng.heavy() as f32).collect()
}

/// 16384 blocks whose maxima sweep the whole finite fp32 range (subnormals included, every
/// binade, jittered mantissas), the other elements random fractions of the max with random
/// signs.
pub fn amax_sweep() -> Vec<f32> {
    let mut rng = Rng::new(77);
    let blocks = 16384usize;
    let mut x = Vec::with_capacity(blocks * BLOCK);
    for i in 0..blocks {
        // 0x7F7FFFFF / 16384 ~ 0x7FE0: stride through every exponent, jittered mantissas.
        let amax =
            ((i as u32).wrapping_mul(0x7FE0) ^ (rng.next_u64() as u32 & 0x1FFF)).min(0x7F7F_FFFF);
        let a = f32::from_bits(amax.max(1));
        let p = rng.below(BLOCK);
        for j in 0..BLOCK {
            let v = if j == p {
                a
            } else {
                a * f32::from_bits(rng.next_u64() as u32 & 0x3F7F_FFFF) // [0, 1)
            };
            x.push(if rng.below(2) == 0 { v } else { -v });
        }
    }
    x
}

/// A packed `[rows, k]` tensor of random bytes whose scale bytes cycle through every value
/// (including 0 = 2^-127, 254 and 255 = NaN).
pub fn random_bytes(fmt: MxFormat, rows: usize, k: usize, seed: u64) -> MxTensor {
    let mut rng = Rng::new(seed);
    let data: Vec<u8> = (0..rows * fmt.packed_len(k))
        .map(|_| rng.next_u64() as u8)
        .collect();
    let scales: Vec<u8> = (0..rows * k / BLOCK)
        .map(|i| (i * 37 % 256) as u8)
        .collect();
    MxTensor::new(fmt, vec![rows, k], data, scales).expect("consistent sizes")
}

/// Every code of the format at every scale byte: one 32-block per (scale byte, code group).
pub fn all_codes(fmt: MxFormat) -> MxTensor {
    let n = fmt.spec().n_codes() as usize;
    let mut codes = Vec::new();
    let mut sc = Vec::new();
    for s in 0..256usize {
        for g in 0..n.div_ceil(BLOCK) {
            for j in 0..BLOCK {
                codes.push(((g * BLOCK + j) % n) as u8);
            }
            sc.push(s as u8);
        }
    }
    let mut packed = vec![0u8; fmt.packed_len(codes.len())];
    pack_codes(fmt, &codes, &mut packed);
    MxTensor::new(fmt, vec![codes.len() / BLOCK, BLOCK], packed, sc).expect("consistent sizes")
}

/// Router logits `[m, e]` (skewed expert popularity, per-token noise); with `ties`, the first
/// token's logits 1 and e−1 equal logit 0 exactly (ties go to the lower index).
pub fn router_logits(m: usize, e: usize, seed: u64, ties: bool) -> Vec<f32> {
    let (_, mut logits) = synth_batch(m, 32, e, seed);
    if ties && e >= 2 {
        logits[1] = logits[0];
        logits[e - 1] = logits[0];
    }
    logits
}

/// A DeepSeek `e_score_correction_bias` of `n` entries: normal, sigma 0.1 (large enough to
/// change which experts a sigmoid router selects).
pub fn correction_bias(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| (rng.normal() * 0.1) as f32).collect()
}

/// The first and one-past-the-last bit patterns of [`sigmoid_sweep`]'s range: |x| in
/// [2^-34, 128] (and the next 256 patterns above 128).
const SWEEP_BITS: (u32, u32) = (0x2E80_0000, 0x4300_0100);

/// Edge inputs of the sigmoid: ±0, subnormals, both sides of the 2^-33 threshold (sigmoid =
/// 0.5 exactly), the saturation edge (17.33), the normal / subnormal / zero edges of the result
/// (−87.33, −103.27, −103.97), ±128 and beyond, ±FLT_MAX.
const SWEEP_EDGES: [f32; 27] = [
    0.0,
    -0.0,
    1e-40,
    -1e-40,
    5e-11,
    -5e-11,
    1.2e-10,
    -1.2e-10,
    1.0,
    -1.0,
    17.33,
    17.34,
    -87.33,
    -87.34,
    -103.27,
    -103.28,
    -103.97,
    -103.98,
    -104.0,
    127.99,
    -127.99,
    128.0,
    -128.0,
    1e30,
    -1e30,
    f32::MAX,
    f32::MIN,
];

/// The tokens of 32 logits that [`sigmoid_sweep`] with this step makes.
pub fn sigmoid_sweep_tokens(step: u32) -> usize {
    let per_sign = (SWEEP_BITS.1 - SWEEP_BITS.0).div_ceil(step) as usize;
    (SWEEP_EDGES.len() + 2 * per_sign).div_ceil(32)
}

/// A sweep of the sigmoid's inputs (formerly the wgpu test `sigmoid_matches_cpu_bit_for_bit`):
/// the edges above, then every `step`-th bit pattern with |x| in [2^-34, 128] of positive then
/// negative sign, padded with normal(0, 8) values (seed 5) to a whole number of tokens of 32
/// logits ([`sigmoid_sweep_tokens`]). Routed with sigmoid scoring, top_k = E = 32, no
/// renormalization and scaling 1, every logit comes back as a weight: its sigmoid.
pub fn sigmoid_sweep(step: u32) -> Vec<f32> {
    let mut xs = SWEEP_EDGES.to_vec();
    for sign in [0u32, 0x8000_0000] {
        for bits in (SWEEP_BITS.0..SWEEP_BITS.1).step_by(step as usize) {
            xs.push(f32::from_bits(bits | sign));
        }
    }
    let mut rng = Rng::new(5);
    while !xs.len().is_multiple_of(32) {
        xs.push((rng.normal() * 8.0) as f32);
    }
    xs
}

/// A router of [`ADVERSARIAL_ROUTERS`]: (E, top_k, (n_group, topk_group)).
pub type AdversarialRouter = (usize, usize, Option<(usize, usize)>);

/// The routers of the adversarial DeepSeek routing inputs ([`adversarial_routing`]): groups of
/// 4, 2 and 1 experts, no groups, k up to 32.
pub const ADVERSARIAL_ROUTERS: [AdversarialRouter; 7] = [
    (16, 4, Some((4, 2))),
    (16, 4, Some((16, 4))),
    (16, 1, None),
    (64, 8, Some((8, 4))),
    (64, 6, Some((32, 3))),
    (256, 8, Some((8, 4))),
    (256, 32, None),
];

/// Tokens of each adversarial input.
pub const ADVERSARIAL_TOKENS: usize = 48;

/// The names (in ids) of the correction biases of [`adversarial_routing`], in its order.
pub const ADVERSARIAL_BIASES: [&str; 5] = ["zero", "eighth", "random", "3values", "ulp-sub"];

/// Adversarial DeepSeek routing inputs for router `r` of [`ADVERSARIAL_ROUTERS`] (formerly the
/// wgpu test `routing_deepseek_adversarial_exact`; one RNG, seed 17, runs through the routers
/// in order, so router `r`'s values are the ones that test used): logits
/// `[ADVERSARIAL_TOKENS, E]` whose token t is of kind t % 8: one-ulp neighbours, saturated
/// sigmoids (the bias decides, then the index), underflowing (subnormal or zero) sigmoids, all
/// equal, |x| < 2^-33 (sigmoid 0.5 exactly), two values only, heavy tails, normal; and the five
/// biases of [`ADVERSARIAL_BIASES`]: all zero, all 0.125, normal(0, 0.1), three distinct values
/// (many equal), one-ulp differences with subnormals.
pub fn adversarial_routing(r: usize) -> (Vec<f32>, Vec<Vec<f32>>) {
    let mut rng = Rng::new(17);
    let mut out = (Vec::new(), Vec::new());
    for &(e, _, _) in &ADVERSARIAL_ROUTERS[..=r] {
        let m = ADVERSARIAL_TOKENS;
        let mut logits = Vec::with_capacity(m * e);
        for t in 0..m {
            let base = (rng.normal() * 3.0) as f32;
            for i in 0..e {
                let v = match t % 8 {
                    0 => f32::from_bits(base.to_bits().wrapping_add((i % 5) as u32)),
                    1 => 20.0 + (i % 7) as f32 * 10.0,
                    2 => -86.0 - (i % 11) as f32 * 2.0,
                    3 => base,
                    4 => (rng.normal() * 1e-11) as f32,
                    5 => [0.5f32, -0.5][i % 2],
                    6 => (rng.normal() * rng.normal() * 6.0) as f32,
                    _ => (rng.normal() * 2.0) as f32,
                };
                logits.push(v);
            }
        }
        let biases = vec![
            vec![0.0; e],
            vec![0.125; e],
            (0..e).map(|_| (rng.normal() * 0.1) as f32).collect(),
            (0..e).map(|i| [0.0f32, 0.25, -0.25][i % 3]).collect(),
            (0..e)
                .map(|i| match i % 4 {
                    0 => f32::from_bits(1 + i as u32),
                    1 => -f32::from_bits(7),
                    2 => f32::from_bits(0x3DCC_CCCD + (i % 3) as u32),
                    _ => 0.1,
                })
                .collect(),
        ];
        out = (logits, biases);
    }
    out
}
