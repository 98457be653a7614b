//! An independent oracle for the MX numerics contract (NUMERICS.md sections 1, 5.2, 5.3), shared
//! by `tests/exhaustive.rs` and `tests/props.rs`.
//!
//! Nothing here calls `mxmoe::format`'s codec: element values come from the bit definitions of
//! NUMERICS.md section 1 with plain f64 arithmetic, rounding is a brute-force nearest search
//! over the sorted value list (ties to the even code LSB), and scale bytes come from exact
//! comparisons with powers of two (Floor, Ceil, RCeil) or the contract's literal bit formula
//! (Even). The per-format parameters are written out by hand for the six formats; a format
//! without a hand-written row falls back to its `spec()` row (so a new format is still covered
//! by every generic test), and `hand_rows_match_spec` pins the hand rows against `spec()`.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use mxmoe::format::{MxFormat, ScaleMode};

/// Special-value rule of a float format's top binade.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Specials {
    /// No Inf/NaN codes (FP4, FP6).
    None,
    /// OCP E4M3: only `S.1111.111` is NaN, no Inf.
    E4M3,
    /// IEEE-like (E5M2): exponent all ones is Inf (mantissa 0) or NaN.
    Ieee,
    /// Fallback: every magnitude code above `max_code` is non-finite.
    AboveMaxCode(u32),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Float {
        ebits: u32,
        mbits: u32,
        bias: i32,
        specials: Specials,
    },
    /// Two's complement, value n / 64, |n| <= 127.
    Int8,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    pub kind: Kind,
    pub code_bits: u32,
    /// Unbiased exponent of the largest normal (what the scale rules subtract).
    pub emax_elem: i32,
    /// Mantissa width used by the `even` scale rule (MXINT8: 6).
    pub even_mbits: u32,
    /// The largest finite value.
    pub max: f64,
}

/// Hand-written rows (NUMERICS.md section 1 table and decisions 4).
pub fn hand_params(fmt: MxFormat) -> Option<Params> {
    let fl = |ebits, mbits, bias, specials| Kind::Float {
        ebits,
        mbits,
        bias,
        specials,
    };
    Some(match fmt.name() {
        "mxfp4" => Params {
            kind: fl(2, 1, 1, Specials::None),
            code_bits: 4,
            emax_elem: 2,
            even_mbits: 1,
            max: 6.0,
        },
        "mxfp6_e2m3" => Params {
            kind: fl(2, 3, 1, Specials::None),
            code_bits: 6,
            emax_elem: 2,
            even_mbits: 3,
            max: 7.5,
        },
        "mxfp6_e3m2" => Params {
            kind: fl(3, 2, 3, Specials::None),
            code_bits: 6,
            emax_elem: 4,
            even_mbits: 2,
            max: 28.0,
        },
        "mxfp8_e4m3" => Params {
            kind: fl(4, 3, 7, Specials::E4M3),
            code_bits: 8,
            emax_elem: 8,
            even_mbits: 3,
            max: 448.0,
        },
        "mxfp8_e5m2" => Params {
            kind: fl(5, 2, 15, Specials::Ieee),
            code_bits: 8,
            emax_elem: 15,
            even_mbits: 2,
            max: 57344.0,
        },
        "mxint8" => Params {
            kind: Kind::Int8,
            code_bits: 8,
            emax_elem: 0,
            even_mbits: 6,
            max: 127.0 / 64.0,
        },
        _ => return None,
    })
}

/// The oracle parameters of a format: the hand-written row, else derived from `spec()`.
pub fn params(fmt: MxFormat) -> Params {
    if let Some(p) = hand_params(fmt) {
        return p;
    }
    let s = fmt.spec();
    let kind = match s.kind {
        mxmoe::format::ElemKind::Int => Kind::Int8,
        mxmoe::format::ElemKind::Float => Kind::Float {
            ebits: s.ebits,
            mbits: s.mbits,
            bias: s.bias,
            specials: Specials::AboveMaxCode(s.max_code),
        },
    };
    Params {
        kind,
        code_bits: s.code_bits,
        emax_elem: s.emax_elem,
        even_mbits: s.mbits,
        max: s.max_normal,
    }
}

/// 2^k exactly, for k in the normal f64 range.
pub fn pow2(k: i32) -> f64 {
    assert!((-1022..=1023).contains(&k));
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// The element value of a code from the bit definitions (NaN / ±Inf for special codes).
pub fn decode(p: &Params, code: u8) -> f64 {
    match p.kind {
        Kind::Int8 => (code as i8) as f64 / 64.0,
        Kind::Float {
            ebits,
            mbits,
            bias,
            specials,
        } => {
            let c = code as u32 & ((1 << p.code_bits) - 1);
            let neg = (c >> (ebits + mbits)) & 1 == 1;
            let e = (c >> mbits) & ((1 << ebits) - 1);
            let m = c & ((1 << mbits) - 1);
            let eall = (1 << ebits) - 1;
            let mall = (1 << mbits) - 1;
            let mag_code = c & ((1 << (ebits + mbits)) - 1);
            let special = match specials {
                Specials::None => None,
                Specials::E4M3 => (e == eall && m == mall).then_some(f64::NAN),
                Specials::Ieee => {
                    (e == eall).then_some(if m == 0 { f64::INFINITY } else { f64::NAN })
                }
                Specials::AboveMaxCode(mc) => (mag_code > mc).then_some(f64::NAN),
            };
            let v = match special {
                Some(s) => s,
                None if e == 0 => m as f64 * pow2(1 - bias - mbits as i32),
                None => ((1 << mbits) + m) as f64 * pow2(e as i32 - bias - mbits as i32),
            };
            if neg {
                -v
            } else {
                v
            }
        }
    }
}

/// Whether a code is canonical: finite, and not MXINT8's −128 (never produced, NUMERICS.md 4).
pub fn is_canonical(p: &Params, code: u8) -> bool {
    match p.kind {
        Kind::Int8 => code != 0x80,
        Kind::Float { .. } => (code as u32) < (1 << p.code_bits) && decode(p, code).is_finite(),
    }
}

/// The non-negative finite grid: (value, magnitude code), ascending by value.
pub fn grid(p: &Params) -> Vec<(f64, u8)> {
    let mut g: Vec<(f64, u8)> = match p.kind {
        Kind::Int8 => (0..=127u8).map(|n| (n as f64 / 64.0, n)).collect(),
        Kind::Float { ebits, mbits, .. } => (0..(1u32 << (ebits + mbits)))
            .map(|c| (decode(p, c as u8), c as u8))
            .filter(|(v, _)| v.is_finite())
            .collect(),
    };
    g.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    g
}

/// The code of the representable value nearest to `x / 2^s` (ties to the even code LSB),
/// saturating to ± max, with the sign of `x` (−0 for negative values that round to zero; MXINT8
/// has no −0). `x` must be finite.
pub fn nearest_code(p: &Params, g: &[(f64, u8)], x: f32, s: i32) -> u8 {
    assert!(x.is_finite());
    let q = (x as f64).abs() * pow2(-s); // exact in f64
    let i = g.partition_point(|&(v, _)| v < q);
    let (v, c) = if i == g.len() {
        g[g.len() - 1] // beyond the max: saturate
    } else if i == 0 {
        g[0]
    } else {
        let (lo, hi) = (g[i - 1], g[i]);
        let (dl, dh) = (q - lo.0, hi.0 - q);
        if dl < dh {
            lo
        } else if dh < dl {
            hi
        } else if lo.1 & 1 == 0 {
            lo
        } else {
            hi
        }
    };
    let _ = v;
    let neg = x.is_sign_negative();
    match p.kind {
        Kind::Int8 => {
            let n = c as i32;
            (if neg { -n } else { n }) as i8 as u8
        }
        Kind::Float { ebits, mbits, .. } => c | if neg { 1 << (ebits + mbits) } else { 0 },
    }
}

/// Exact floor(log2(a)) for a finite a > 0 (f64 comparisons with exact powers of two).
pub fn floor_log2(a: f64) -> i32 {
    assert!(a > 0.0 && a.is_finite());
    let mut k = 0i32;
    while pow2(k) > a {
        k -= 1;
    }
    while pow2(k + 1) <= a {
        k += 1;
    }
    k
}

/// The scale byte of NUMERICS.md 5.2 for a block whose largest magnitude is `amax`.
/// Returns `None` only for RCeil where `amax / max` lies within fp32 rounding of 2^-127 (an fp32
/// subnormal d: there the contract's exact rule and the torchao fp32 form may differ by one).
pub fn scale_byte(p: &Params, mode: ScaleMode, amax: f32) -> Option<u8> {
    let a = amax.abs();
    if !a.is_finite() {
        return Some(0xFF);
    }
    if a == 0.0 {
        return Some(0);
    }
    let af = a as f64;
    let fl = floor_log2(af);
    let s: i32 = match mode {
        ScaleMode::Floor => fl - p.emax_elem,
        ScaleMode::Ceil => {
            let cl = if pow2(fl) == af { fl } else { fl + 1 };
            cl - p.emax_elem
        }
        ScaleMode::Even => {
            // The contract's literal formula: r = (bits + (1 << (22 - mbits))) & 0xFF800000.
            let r = (a.to_bits() as u64 + (1u64 << (22 - p.even_mbits))) & 0xFF80_0000;
            ((r >> 23) as i32 - 127) - p.emax_elem
        }
        ScaleMode::RCeil => {
            // The smallest k with 2^k >= amax / max, i.e. 2^k * max >= amax (exact in f64).
            let d = af / p.max;
            if (d - pow2(-127)).abs() <= pow2(-147) {
                return None;
            }
            let mut k = fl - p.emax_elem - 2;
            while pow2(k) * p.max < af {
                k += 1;
            }
            k
        }
    };
    Some((s.clamp(-127, 127) + 127) as u8)
}

/// A small deterministic generator for test inputs (xorshift64*).
pub struct Gen(u64);
impl Gen {
    pub fn new(seed: u64) -> Self {
        Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.u64() % n
    }
    pub fn unit(&mut self) -> f64 {
        (self.u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// A finite f32 from random bits (any sign, exponent, subnormals included).
    pub fn any_finite_f32(&mut self) -> f32 {
        loop {
            let v = f32::from_bits(self.u64() as u32);
            if v.is_finite() {
                return v;
            }
        }
    }
}
