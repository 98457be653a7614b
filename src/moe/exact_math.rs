//! Routing math that every backend computes to the same bits: integer arithmetic only.
//!
//! DeepSeek-V3/R1 routers rank experts by `sigmoid(logit) + e_score_correction_bias`, a float
//! that a GPU's `exp` (and its division, which WGSL lets be 2.5 ulp off) cannot reproduce bit for
//! bit, so the selected ids could differ between backends. [`sigmoid`] is defined by integer
//! operations on the fp32 bit pattern, which are exact everywhere; `shaders/exact_math.wgsl` is
//! the same algorithm in WGSL (64-bit products emulated with 16-bit halves; WGSL has no u64), and
//! `tests/wgpu_backend.rs` compares the two bit for bit. Then `score + bias` is one correctly
//! rounded f32 add on both sides ([`add_ftz`]: no multiply precedes it that a driver could fuse,
//! and subnormals, which a GPU may flush, are flushed on both sides). [`exp_neg_bits`] and the
//! [`softmax`] built on it do the same for softmax routers with a correction bias.
//!
//! The algorithm, for `a = |x|`, `u = e^-a = 2^-y`, `y = a log2(e)`:
//! 1. `y` in fixed point Q.32: the 24-bit significand times `log2(e)` in Q.63 (an 88-bit product,
//!    truncated): absolute error < 2^-32.
//! 2. `y = n + f` (integer and fraction); `2^-f = 2^(-j/64) * e^(-r ln 2)` with a 64-entry table
//!    (Q1.31, rounded) and the degree-4 Taylor polynomial of `1 - e^-z` in Q0.38 (`z < 0.011`):
//!    `m = 2^-f` in Q1.31, so `u = m 2^-n`.
//! 3. `sigmoid(x) = 1 / (1 + u)` for `x >= 0` and `u / (1 + u)` for `x < 0`: an exact long
//!    division of Q1.31 numbers (`1 + u` rounded to Q1.31), then one round-to-nearest-even of the
//!    quotient (its remainder as the sticky bit) to an f32, subnormals included.
//!
//! |x| < 2^-33 gives exactly 0.5, |x| >= 128 gives 1.0 or +0.0 (both the correctly rounded
//! values), NaN gives NaN.
//!
//! Accuracy against the f64 sigmoid, measured over EVERY finite f32 input
//! (`exhaustive_accuracy`, an ignored test: `cargo test --release --lib -- --ignored
//! exhaustive`): at most **0.5146 ulp** (so faithfully rounded; 99.984 % of the results are the
//! correctly rounded f32, the rest one ulp off next to a rounding boundary), and monotonic
//! (non-decreasing in x) over all f32. The error budget is ~2^-30 relative before the final
//! rounding: `y`'s truncation, the table and the `m` product (each half a Q1.31 unit) and `u`
//! rounded to Q1.31. The default test run checks a dense sample (every 61st bit pattern: max
//! 0.5132 ulp) against the same bounds. [`exp_neg_bits`] rounds the same `m 2^-n` directly: max
//! 0.5097 ulp on the dense sample.

/// `log2(e)` in Q1.63, rounded.
pub const LOG2E_Q63: u64 = 0xB8AA_3B29_5C17_F0BC;
/// `ln(2)` in Q0.32, rounded.
pub const LN2_Q32: u32 = 2_977_044_472;
/// `2^(-j/64)` in Q1.31, rounded, j = 0..63.
pub const EXP2_NEG_Q31: [u32; 64] = [
    0x80000000, 0x7e9f0606, 0x7d41d96e, 0x7be86fba, 0x7a92be8b, 0x7940bb9e, 0x77f25cce, 0x76a7980f,
    0x75606374, 0x741cb528, 0x72dc8374, 0x719fc4b9, 0x70666f76, 0x6f307a41, 0x6dfddbcc, 0x6cce8ae1,
    0x6ba27e65, 0x6a79ad56, 0x69540ec9, 0x683199ed, 0x6712460b, 0x65f60a7f, 0x64dcdec3, 0x63c6ba64,
    0x62b39509, 0x61a3666d, 0x60962665, 0x5f8bccdb, 0x5e8451d0, 0x5d7fad59, 0x5c7dd7a4, 0x5b7ec8f2,
    0x5a82799a, 0x5988e209, 0x5891fac1, 0x579dbc57, 0x56ac1f75, 0x55bd1cdb, 0x54d0ad5a, 0x53e6c9da,
    0x52ff6b55, 0x521a8ad7, 0x51382182, 0x50582888, 0x4f7a9930, 0x4e9f6cd4, 0x4dc69cdd, 0x4cf022ca,
    0x4c1bf829, 0x4b4a169c, 0x4a7a77d4, 0x49ad1598, 0x48e1e9ba, 0x4818ee22, 0x47521cc6, 0x468d6fae,
    0x45cae0f2, 0x450a6abb, 0x444c0740, 0x438fb0cb, 0x42d561b4, 0x421d1462, 0x4166c34c, 0x40b268fa,
];

const HALF: u32 = 0x3F00_0000;
const ONE: u32 = 0x3F80_0000;

/// The high 32 bits of a 32 x 32-bit product.
fn mul_hi(a: u32, b: u32) -> u32 {
    ((a as u64 * b as u64) >> 32) as u32
}

/// `mant * 2^(lead - 31)` (`mant` in [2^31, 2^32), `sticky`: nonzero bits below `mant`) rounded
/// to the nearest f32, ties to even, subnormals included.
fn round_to_f32(mant: u32, lead: i32, sticky: bool) -> u32 {
    // Bits dropped from `mant`, and the exponent field's base (biased exponent - 1, so that the
    // significand's leading bit, and a carry out of it, add into the exponent).
    let (shift, base) = if lead >= -126 {
        (8, ((lead + 126) as u32) << 23)
    } else {
        ((8 - 126 - lead) as u32, 0)
    };
    if shift > 32 {
        return 0; // below 2^-150: rounds to +0
    }
    let m = mant as u64;
    let kept = (m >> shift) as u32;
    let round = (m >> (shift - 1)) & 1 != 0;
    let rest = m & ((1 << (shift - 1)) - 1) != 0 || sticky;
    let up = round && (rest || kept & 1 != 0);
    base + kept + up as u32
}

/// `e^-a` for `2^-33 <= a < 128` (`a`: the bits of a positive f32) as `(m, n)`:
/// `e^-a = m 2^(-31 - n)` with `m` in (2^30, 2^31] (Q1.31) and `n = floor(a log2 e)`.
fn exp_neg_parts(a: u32) -> (u32, u32) {
    let e = a >> 23;
    // y = a log2(e) in Q8.32 (y < 185), truncated: significand (24 bits) x LOG2E_Q63 (64 bits)
    // is a log2(e) 2^(213 - e); keep 32 fraction bits.
    let sig = (a & 0x7F_FFFF) | 0x80_0000;
    let y = ((sig as u128 * LOG2E_Q63 as u128) >> (181 - e)) as u64;
    let n = (y >> 32) as u32;
    let f = y as u32;
    // 2^-f = 2^(-j/64) e^-z, z = r ln 2 < ln 2 / 64.
    let j = (f >> 26) as usize;
    let r = f & 0x03FF_FFFF;
    // z in Q0.38 and its powers in Q0.44, Q0.50, Q0.56.
    let z = mul_hi(r << 6, LN2_Q32);
    let z2 = mul_hi(z, z);
    let z3 = mul_hi(z2, z);
    let z4 = mul_hi(z3, z);
    // 1 - e^-z by its Taylor polynomial, Q0.38; then m = 2^-f in Q1.31, rounded.
    let one_minus_exp = z - (z2 >> 7) + ((z3 / 6) >> 12) - ((z4 / 24) >> 18);
    let t = EXP2_NEG_Q31[j];
    let m = t - ((t as u64 * one_minus_exp as u64 + (1 << 37)) >> 38) as u32;
    (m, n)
}

/// The sigmoid of an f32 given as bits, as f32 bits (see the module docs).
pub fn sigmoid_bits(x: u32) -> u32 {
    let a = x & 0x7FFF_FFFF;
    let neg = x >> 31 != 0;
    if a > 0x7F80_0000 {
        return 0x7FC0_0000; // NaN
    }
    if a >= 0x4300_0000 {
        return if neg { 0 } else { ONE }; // |x| >= 128 (and +-Inf)
    }
    if a >> 23 < 94 {
        return HALF; // |x| < 2^-33
    }
    let (m, n) = exp_neg_parts(a);
    // u = e^-|x| = m 2^(-31 - n); 1 + u in Q1.31 (u rounded to 2^-31).
    let u = if n >= 32 {
        0
    } else {
        (m + ((1u32 << n) >> 1)) >> n
    };
    if u == 1 << 31 {
        return HALF; // u = 1
    }
    let den = (1u32 << 31) + u;
    let num = if neg { m } else { 1 << 31 };
    // q = num / den in (1/4, 1] as a normalized significand, exponent and sticky bit.
    let (mant, lead, sticky) = if num >= den {
        (1u32 << 31, 0, false)
    } else {
        let wide = (num as u64) << 32;
        let q = (wide / den as u64) as u32;
        let sticky = !wide.is_multiple_of(den as u64);
        if q >> 31 != 0 {
            (q, -1, sticky)
        } else {
            (q << 1, -2, sticky)
        }
    };
    let lead = if neg { lead - n as i32 } else { lead };
    round_to_f32(mant, lead, sticky)
}

/// `e^-|x|` of an f32 given as bits, as f32 bits: the same `(m, n)` as [`sigmoid_bits`], rounded
/// once (so within ~2^-30 relative before the rounding, like the sigmoid).
pub fn exp_neg_bits(x: u32) -> u32 {
    let a = x & 0x7FFF_FFFF;
    if a > 0x7F80_0000 {
        return 0x7FC0_0000; // NaN
    }
    if a >= 0x4300_0000 {
        return 0; // |x| >= 128: below 2^-184
    }
    if a >> 23 < 94 {
        return ONE; // |x| < 2^-33
    }
    let (m, n) = exp_neg_parts(a);
    if m == 1 << 31 {
        round_to_f32(m, -(n as i32), false)
    } else {
        round_to_f32(m << 1, -1 - n as i32, false)
    }
}

/// Softmax probabilities that every backend computes bit for bit (the scores of a softmax router
/// with a correction bias): `e_i = e^-(max - x_i)` by [`exp_neg_bits`] of the f32 difference
/// (subnormals flushed), their sequential [`add_ftz`] sum, one IEEE division each.
pub fn softmax(row: &[f32]) -> Vec<f32> {
    let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = row
        .iter()
        .map(|&v| f32::from_bits(exp_neg_bits(ftz(v - mx).to_bits())))
        .collect();
    let sum = e.iter().fold(0.0, |s, &v| add_ftz(s, v));
    e.iter().map(|&v| v / sum).collect()
}

/// The sigmoid every backend computes bit for bit (see the module docs for its accuracy).
pub fn sigmoid(x: f32) -> f32 {
    f32::from_bits(sigmoid_bits(x.to_bits()))
}

/// `x` with a subnormal flushed to zero (keeping its sign).
fn ftz(x: f32) -> f32 {
    if x.is_subnormal() {
        f32::from_bits(x.to_bits() & 0x8000_0000)
    } else {
        x
    }
}

/// The f32 sum `a + b` as every backend computes it: a GPU may flush subnormal operands and
/// results, so both operands and the result are flushed here (and in WGSL); on normal numbers
/// this is the correctly rounded IEEE add, which WGSL guarantees.
pub fn add_ftz(a: f32, b: f32) -> f32 {
    ftz(ftz(a) + ftz(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Error of `got` in units in the last place of the f32 nearest to `exact`.
    fn ulp_err(got: f32, exact: f64) -> f64 {
        let e = exact.abs().max(f64::MIN_POSITIVE);
        let ulp = 2f64.powi((e.log2().floor() as i32 - 23).max(-149));
        (got as f64 - exact).abs() / ulp
    }

    fn reference(x: f32) -> f64 {
        1.0 / (1.0 + (-(x as f64)).exp())
    }

    /// e^-|x| against f64 on every 61st bit pattern below 128 (max ulp error).
    #[test]
    fn exp_neg_accuracy() {
        let mut worst = 0f64;
        for b in (0..0x4300_0000u32).step_by(61) {
            let x = f32::from_bits(b);
            let got = f32::from_bits(exp_neg_bits(b));
            worst = worst.max(ulp_err(got, (-(x as f64)).exp()));
        }
        eprintln!("exp_neg: max {worst:.4} ulp");
        assert!(worst < 0.52, "max error {worst} ulp");
        assert_eq!(exp_neg_bits(0), 0x3F80_0000);
        assert_eq!(exp_neg_bits(200f32.to_bits()), 0);
    }

    #[test]
    fn softmax_sums_to_one() {
        let row = [1.0f32, 2.0, 3.0, -50.0, 3.0, 0.0];
        let p = softmax(&row);
        let want: Vec<f64> = {
            let e: Vec<f64> = row.iter().map(|&v| (v as f64 - 3.0).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|v| v / s).collect()
        };
        for (g, w) in p.iter().zip(&want) {
            assert!((*g as f64 - w).abs() <= 1e-7 * w.max(1e-30), "{g} vs {w}");
        }
        assert_eq!(p[2], p[4]);
    }

    /// (max ulp error, correctly rounded count, total, monotonicity violations) over the bit
    /// patterns `0, step, 2 step, ..` of each sign.
    fn sweep(step: usize) -> (f64, u64, u64, u64) {
        let mut worst = 0f64;
        let mut exact = 0u64;
        let mut total = 0u64;
        let mut nonmono = 0u64;
        for sign in [0u32, 0x8000_0000] {
            let mut prev: Option<f32> = None;
            for b in (0..0x7F80_0001u32).step_by(step) {
                let x = f32::from_bits(b | sign);
                let s = sigmoid(x);
                let r = reference(x);
                let err = ulp_err(s, r);
                worst = worst.max(err);
                exact += (s == r as f32) as u64;
                total += 1;
                // |x| increases along the sweep: sigmoid increases for x > 0, decreases for x < 0.
                if let Some(p) = prev {
                    if (sign == 0 && s < p) || (sign != 0 && s > p) {
                        nonmono += 1;
                    }
                }
                prev = Some(s);
            }
        }
        (worst, exact, total, nonmono)
    }

    #[test]
    fn dense_accuracy() {
        let (worst, exact, total, nonmono) = sweep(61);
        eprintln!("sigmoid: max {worst:.4} ulp, {exact}/{total} correctly rounded");
        assert!(worst < 0.515, "max error {worst} ulp");
        assert_eq!(nonmono, 0, "monotonicity violations");
        assert!(exact as f64 >= 0.999 * total as f64);
    }

    /// Every finite f32 (minutes in release: `cargo test --release --lib -- --ignored`).
    #[test]
    #[ignore]
    fn exhaustive_accuracy() {
        let (worst, exact, total, nonmono) = sweep(1);
        eprintln!("sigmoid: max {worst:.4} ulp, {exact}/{total} correctly rounded");
        assert!(worst < 0.515, "max error {worst} ulp");
        assert_eq!(nonmono, 0, "monotonicity violations");
    }

    #[test]
    fn special_values() {
        assert_eq!(sigmoid(0.0), 0.5);
        assert_eq!(sigmoid(-0.0), 0.5);
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY).to_bits(), 0);
        assert!(sigmoid(f32::NAN).is_nan());
        assert_eq!(sigmoid(20.0), 1.0);
        assert_eq!(sigmoid(-200.0).to_bits(), 0);
        // The smallest subnormal results and the underflow edge.
        let tiny = sigmoid(-103.0);
        assert!(tiny > 0.0 && tiny.is_subnormal());
        assert_eq!(sigmoid(-104.0).to_bits(), 0);
        // Symmetry: sigmoid(x) + sigmoid(-x) = 1 within rounding.
        for x in [0.25f32, 1.0, 3.5, 9.0] {
            assert!((sigmoid(x) + sigmoid(-x) - 1.0).abs() <= f32::EPSILON);
        }
    }

    #[test]
    fn keys_flush_subnormals() {
        let sub = f32::from_bits(1);
        assert_eq!(add_ftz(sub, 0.0), 0.0);
        assert_eq!(add_ftz(1.0, sub), 1.0);
        assert_eq!(
            add_ftz(1.5 * f32::MIN_POSITIVE, -f32::MIN_POSITIVE).to_bits(),
            0
        );
        assert_eq!(add_ftz(sigmoid(0.0), 0.25), 0.75);
    }
}
