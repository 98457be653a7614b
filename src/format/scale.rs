//! E8M0 scale bytes and the four scale modes of NUMERICS.md 5.2, from exponent bits only.

use super::codec::pow2_f64;
use super::{ElemKind, FormatError, MxFormat, SCALE_NAN};
use std::fmt;
use std::str::FromStr;

/// How a block's E8M0 scale is chosen from its `amax` (NUMERICS.md 5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum ScaleMode {
    /// OCP §6.3: `floor(log2(amax)) - emax_elem`, exact exponent bits. Saturates amax in
    /// (max, 2^(emax+1)) * 2^k.
    Floor,
    /// AMD Quark / vLLM `even_round` (the default for activation QDQ): round amax half-up at the
    /// element mantissa width, then floor.
    #[default]
    Even,
    /// Exact `ceil(log2(amax)) - emax_elem` (torchao CEIL).
    Ceil,
    /// NVIDIA cuBLAS/cuDNN "round up" (torchao RCEIL, AITER): the smallest 2^e >= amax / max.
    RCeil,
}

impl ScaleMode {
    pub const ALL: [ScaleMode; 4] = [
        ScaleMode::Floor,
        ScaleMode::Even,
        ScaleMode::Ceil,
        ScaleMode::RCeil,
    ];
    pub const fn name(self) -> &'static str {
        match self {
            ScaleMode::Floor => "floor",
            ScaleMode::Even => "even",
            ScaleMode::Ceil => "ceil",
            ScaleMode::RCeil => "rceil",
        }
    }
    /// A small integer id shared with the WGSL shaders.
    pub const fn id(self) -> u32 {
        match self {
            ScaleMode::Floor => 0,
            ScaleMode::Even => 1,
            ScaleMode::Ceil => 2,
            ScaleMode::RCeil => 3,
        }
    }
}

impl fmt::Display for ScaleMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ScaleMode {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "floor" => Ok(ScaleMode::Floor),
            "even" | "even_round" => Ok(ScaleMode::Even),
            "ceil" => Ok(ScaleMode::Ceil),
            "rceil" | "round_up" => Ok(ScaleMode::RCeil),
            _ => Err(FormatError::UnknownScaleMode(s.to_string())),
        }
    }
}

/// Exact floor(log2(a)) for a finite, positive fp32 given as bits (normal or subnormal).
fn floor_log2_bits(b: u32) -> i32 {
    let e = ((b >> 23) & 0xFF) as i32;
    let m = b & 0x7F_FFFF;
    if e == 0 {
        (31 - m.leading_zeros() as i32) - 149
    } else {
        e - 127
    }
}

/// Exact ceil(log2(a)) for a finite, positive fp32 given as bits.
fn ceil_log2_bits(b: u32) -> i32 {
    let e = ((b >> 23) & 0xFF) as i32;
    let m = b & 0x7F_FFFF;
    if e == 0 {
        let fl = floor_log2_bits(b);
        fl + (m & (m - 1) != 0) as i32
    } else {
        e - 127 + (m != 0) as i32
    }
}

/// The E8M0 scale byte for a block whose largest magnitude is `amax` (given as fp32 bits with
/// the sign cleared). `amax` must be finite; NaN/Inf blocks get [`SCALE_NAN`] from the caller.
pub fn scale_byte(fmt: MxFormat, mode: ScaleMode, amax_bits: u32) -> u8 {
    let a = amax_bits & 0x7FFF_FFFF;
    if a >= 0x7F80_0000 {
        return SCALE_NAN;
    }
    if a == 0 {
        return 0; // all-zero block (every mode): byte 0.
    }
    let spec = fmt.spec();
    let emax = spec.emax_elem;
    let s = match mode {
        ScaleMode::Floor => floor_log2_bits(a) - emax,
        ScaleMode::Ceil => ceil_log2_bits(a) - emax,
        ScaleMode::Even => {
            // Quark even_round / torchao EVEN: r = (bits + (1 << (22 - mbits))) & 0xFF800000.
            // The carry may reach the Inf exponent (255): then s = 128 - emax, clamped below.
            let mbits = match spec.kind {
                ElemKind::Int => 6,
                ElemKind::Float => spec.mbits,
            };
            let r = (a as u64 + (1u64 << (22 - mbits))) & 0xFF80_0000;
            let er = (r >> 23) as i32;
            if er == 0 {
                // amax stays an fp32 subnormal: its (exact) exponent is below -126.
                floor_log2_bits(a) - emax
            } else {
                er - 127 - emax
            }
        }
        ScaleMode::RCeil => {
            // NUMERICS.md 5.2: the smallest e with 2^e >= amax / max, decided exactly: 2^e * max
            // and amax are both exact in f64 (max has at most 7 significant bits). torchao's fp32
            // form `d = f32(amax * f32(1/max))`, byte = E(d) + (M(d) != 0), equals this for every
            // normal amax of the five float formats (NUMERICS.md 5.2), but not for MXINT8, whose
            // f32(64/127) is inexact: amax a few ulps above 127/64 * 2^k got 2^k and saturated.
            let af = f32::from_bits(a) as f64;
            let max = spec.max_normal;
            // Start where 2^s * max < amax surely holds (max < 2^(emax + 1)).
            let mut s = floor_log2_bits(a) - emax - 2;
            while pow2_f64(s) * max < af {
                s += 1;
            }
            s
        }
    };
    (s.clamp(-127, 127) + 127) as u8
}

/// The value of an E8M0 byte as f32: `2^(byte-127)`, byte 0 = 2^-127 (fp32 bits 0x00400000),
/// byte 255 = NaN. Exact.
#[inline]
pub fn e8m0_to_f32(byte: u8) -> f32 {
    match byte {
        0 => f32::from_bits(0x0040_0000),
        255 => f32::NAN,
        b => f32::from_bits((b as u32) << 23),
    }
}
