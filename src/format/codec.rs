//! Exact element encode/decode, derived from the format row with integer arithmetic only.
//!
//! Encoding works on the fp32 bit pattern: `|x| = m * 2^e` with an integer significand `m`
//! (< 2^24), so `q = x / 2^s = m * 2^(e-s)` is exact whatever `s` is (no fp32 underflow, no
//! subnormal flushing). Rounding is one integer right shift with round-to-nearest-even.

use super::{ElemKind, MxFormat, Special};

/// Right shift with round to nearest, ties to even (a negative shift is a left shift).
#[inline]
fn shift_rne(m: u64, shift: i64) -> u64 {
    if shift >= 0 {
        // Callers clamp the result; cap the shift so it cannot overflow.
        if shift >= 40 {
            return u64::MAX >> 1;
        }
        return m << shift;
    }
    let r = (-shift) as u32;
    if r >= 63 {
        return 0; // m < 2^24: far below half an ulp.
    }
    let q = m >> r;
    let rem = m & ((1u64 << r) - 1);
    let half = 1u64 << (r - 1);
    if rem > half || (rem == half && (q & 1) == 1) {
        q + 1
    } else {
        q
    }
}

/// Split finite fp32 bits into `(m, e)` with `|x| = m * 2^e` (m = 0 for ±0).
#[inline]
fn split_f32(bits: u32) -> (u64, i64) {
    let exp = ((bits >> 23) & 0xFF) as i64;
    let frac = (bits & 0x7F_FFFF) as u64;
    if exp == 0 {
        (frac, -149)
    } else {
        (frac | 0x80_0000, exp - 150)
    }
}

/// Encode one finite fp32 value (given as bits) with block scale exponent `s` (the unbiased
/// E8M0 exponent, `byte - 127`). Round to nearest even, saturate, keep subnormals and the sign
/// of zero. The caller handles NaN/Inf blocks (NUMERICS.md 5.5): this function must not see them.
#[inline]
pub fn encode_elem(fmt: MxFormat, bits: u32, s: i32) -> u8 {
    let spec = fmt.spec();
    let neg = bits >> 31 == 1;
    let (m, e) = split_f32(bits & 0x7FFF_FFFF);
    match spec.kind {
        ElemKind::Int => {
            // n = RNE(|x| / 2^s * 64), clamped to 127 (symmetric: -128 never produced).
            let n = if m == 0 {
                0
            } else {
                shift_rne(m, e - s as i64 + 6).min(127)
            } as i32;
            (if neg { -n } else { n }) as i8 as u8
        }
        ElemKind::Float => {
            let sign = if neg { spec.sign_bit() } else { 0 };
            if m == 0 {
                return sign as u8;
            }
            let mbits = spec.mbits as i64;
            let emin = spec.emin() as i64;
            // floor(log2(q)) for q = m * 2^(e - s).
            let p = (63 - m.leading_zeros() as i64) + e - s as i64;
            let p = p.max(emin);
            // The grid step in binade p is 2^(p - mbits) (subnormals share emin's step).
            let t = p - mbits;
            let n = shift_rne(m, e - s as i64 - t) as i64;
            // Codes are monotonic: code = (p - emin) << mbits + n covers subnormals, normals and
            // the carry into the next binade (n == 2^(mbits+1)).
            let code = ((p - emin) << mbits).saturating_add(n);
            let code = code.min(spec.max_code as i64) as u32;
            (code | sign) as u8
        }
    }
}

/// A decoded code: `value = (-1)^neg * n * 2^exp`, or a special value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    Finite { neg: bool, n: u32, exp: i32 },
    Inf { neg: bool },
    NaN,
}

/// Decode a code into integer parts (exact).
#[inline]
pub fn decode_parts(fmt: MxFormat, code: u8) -> Decoded {
    let spec = fmt.spec();
    match spec.kind {
        ElemKind::Int => {
            let v = code as i8 as i32;
            Decoded::Finite {
                neg: v < 0,
                n: v.unsigned_abs(),
                exp: -6,
            }
        }
        ElemKind::Float => {
            let c = code as u32 & (spec.n_codes() - 1);
            let neg = c & spec.sign_bit() != 0;
            let mag = c & (spec.sign_bit() - 1);
            let mmask = (1u32 << spec.mbits) - 1;
            let be = (mag >> spec.mbits) as i32;
            let mant = mag & mmask;
            // NaN/Inf codes come from the row's special-values column.
            match spec.special(c) {
                Some(Special::Nan) => return Decoded::NaN,
                Some(Special::Inf { neg }) => return Decoded::Inf { neg },
                None => {}
            }
            let mb = spec.mbits as i32;
            if be == 0 {
                Decoded::Finite {
                    neg,
                    n: mant,
                    exp: spec.emin() - mb,
                }
            } else {
                Decoded::Finite {
                    neg,
                    n: mant | (1 << mb),
                    exp: be - spec.bias - mb,
                }
            }
        }
    }
}

/// `2^k` as an exact f64 (k within the normal f64 range).
#[inline]
pub(crate) fn pow2_f64(k: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&k));
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// The element value of a code (no block scale), exactly, as f64.
pub fn decode_elem_f64(fmt: MxFormat, code: u8) -> f64 {
    match decode_parts(fmt, code) {
        Decoded::Finite { neg, n, exp } => {
            let v = n as f64 * pow2_f64(exp);
            if neg {
                -v
            } else {
                v
            }
        }
        Decoded::Inf { neg } => {
            if neg {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        }
        Decoded::NaN => f64::NAN,
    }
}
