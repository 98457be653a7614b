//! MX element formats, E8M0 block scales, scale modes, rounding and packing.
//!
//! This module is **the one place** a format is defined. A format is a row of [`FormatSpec`]
//! (name and accepted aliases, exponent/mantissa widths, bias, `emax_elem`, code width, largest
//! finite code, special values); encoding, decoding, packing and name parsing are derived from the
//! row with exact integer arithmetic. Everything else (the CPU reference, the WGSL shaders through
//! their generated constants, the CLI, the tests) asks here.
//!
//! # The contract (`docs/NUMERICS.md`, section 5 "The normative contract")
//!
//! * Blocks are 32 contiguous elements along the last (reduction) axis; that axis must be a
//!   multiple of 32.
//! * The block scale is one E8M0 byte: value `2^(byte-127)`; byte 0 is `2^-127` (an fp32
//!   subnormal, **not** zero); byte 255 is NaN. How the byte is chosen from the block's `amax` is
//!   the [`ScaleMode`] (floor / even / ceil / rceil, NUMERICS.md 5.2); all of them are computed from
//!   exponent bits, never with `log2f`.
//! * Elements: `q = x / 2^s` rounded to nearest, **ties to even** (even = code LSB 0), saturated to
//!   ± max normal, subnormals kept, the sign of zero kept (MXINT8 has no −0).
//! * A block holding NaN or ±Inf gets scale byte 0xFF, all codes 0, and decodes to NaN everywhere.
//!   An all-zero block gets scale byte 0.
//! * MXINT8: value = n/64 with n in [−127, 127] (−128 never produced), RNE on n, `emax_elem` 0;
//!   its mantissa width for `even` is 6 and its max for `rceil` is 127/64.
//!
//! # Packing (NUMERICS.md section 9)
//!
//! ```text
//! FP4:  byte i = code[2i] | code[2i+1] << 4          (element 2i in the LOW nibble)
//!       e.g. codes [0x1, 0x2] -> byte 0x21
//! FP6:  w = c0 | c1<<6 | c2<<12 | c3<<18  (24 bits), bytes [w & 0xFF, w>>8 & 0xFF, w>>16]
//!       byte0 = c0[5:0] | c1[1:0]<<6 ; byte1 = c1[5:2] | c2[3:0]<<4 ; byte2 = c2[5:4] | c3<<2
//! FP8 / INT8: one byte per code.
//! ```
//! A 32-element block is therefore 16 (FP4), 24 (FP6) or 32 (FP8/INT8) bytes: always whole u32
//! words, which is what the GPU kernels rely on.

mod bytes;
mod codec;
mod pack;
mod peers;
mod profile;
mod scale;
mod tensor;

pub use bytes::Bytes;
pub use codec::{decode_elem_f64, decode_parts, encode_elem};
pub use pack::{pack_codes, unpack_codes, Packing};
pub use profile::{
    profile_names, Engine, Fp4Layout, MsmxRound, Profile, ProfileBlock, ProfileError, ProfileId,
};
pub use scale::{e8m0_to_f32, scale_byte, ScaleMode};
pub use tensor::{
    check_parts, check_rows, check_values, dequant_elem, dequantize_block, qdq_block, qdq_slice,
    quantize_block, MxTensor,
};

use std::fmt;
use std::str::FromStr;

/// Elements per block, for every MX format (OCP MX v1.0; NUMERICS.md section 3).
pub const BLOCK: usize = 32;

/// The E8M0 byte that marks a block holding NaN or ±Inf (decodes to NaN).
pub const SCALE_NAN: u8 = 0xFF;

/// An MX element format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MxFormat {
    /// FP4 E2M1 (MXFP4).
    Fp4E2M1,
    /// FP6 E2M3 (MXFP6).
    Fp6E2M3,
    /// FP6 E3M2 (MXFP6).
    Fp6E3M2,
    /// FP8 E4M3, OCP OFP8 (MXFP8): no Inf, only `S.1111.111` is NaN.
    Fp8E4M3,
    /// FP8 E5M2, OCP OFP8 (MXFP8): IEEE-like Inf and NaN.
    Fp8E5M2,
    /// INT8 (MXINT8): two's complement, implicit scale 2^-6.
    Int8,
}

/// Whether a format's elements are minifloats or scaled integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElemKind {
    Float,
    Int,
}

/// Which codes of a format are not finite numbers (the "Inf" and "NaN" columns of NUMERICS.md
/// section 1). A quantizer never writes such a code: NaN/Inf blocks get scale byte 0xFF and codes 0
/// (NUMERICS.md 5.5); these codes only matter when decoding data written elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecialValues {
    /// Every code is a finite number (FP4 E2M1, FP6 E2M3 and E3M2, INT8).
    None,
    /// OCP OFP8 E4M3: no Inf; only the all-ones magnitude `S.1111.111` is NaN.
    AllOnesNan,
    /// IEEE-like (OCP OFP8 E5M2): an all-ones exponent field is ±Inf when the mantissa is 0 and
    /// NaN otherwise.
    Ieee,
}

/// A non-finite element value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    Nan,
    Inf { neg: bool },
}

/// One row of the format table. All numbers are those of NUMERICS.md section 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FormatSpec {
    /// Stable name used by the CLI, file metadata and reports (`mxfp4`, `mxfp6_e2m3`, ...).
    pub name: &'static str,
    /// Other names `FromStr` accepts for this format (lowercase; parsing trims and lowercases
    /// its input). Each alias names exactly one format.
    pub aliases: &'static [&'static str],
    pub kind: ElemKind,
    /// Exponent bits (0 for INT8).
    pub ebits: u32,
    /// Mantissa bits; for INT8, the fraction bits of n/64 (6), also its `even` width.
    pub mbits: u32,
    /// Exponent bias (0 for INT8).
    pub bias: i32,
    /// Unbiased exponent of the largest normal value: what the OCP scale rule subtracts.
    pub emax_elem: i32,
    /// Bits per code: 4, 6 or 8.
    pub code_bits: u32,
    /// The largest finite magnitude code (sign bit clear). Codes are sign-magnitude and monotonic
    /// in value, so saturation is `min(code, max_code)`. (INT8: 127.)
    pub max_code: u32,
    /// The largest finite value, as an exact f64 (6, 7.5, 28, 448, 57344, 127/64).
    pub max_normal: f64,
    /// Which codes are NaN or ±Inf.
    pub specials: SpecialValues,
}

impl FormatSpec {
    /// Smallest normal exponent, `1 - bias` (floats only).
    pub const fn emin(&self) -> i32 {
        1 - self.bias
    }
    /// The sign bit of a code.
    pub const fn sign_bit(&self) -> u32 {
        1 << (self.code_bits - 1)
    }
    /// Packed bytes per 32-element block.
    pub const fn block_bytes(&self) -> usize {
        BLOCK * self.code_bits as usize / 8
    }
    /// Number of distinct codes.
    pub const fn n_codes(&self) -> u32 {
        1 << self.code_bits
    }
    /// The special value a code stands for, or `None` for a finite code (the sign bit is that
    /// of the code; bits above `code_bits` are ignored).
    pub const fn special(&self, code: u32) -> Option<Special> {
        if matches!(self.kind, ElemKind::Int) {
            return None;
        }
        let c = code & (self.n_codes() - 1);
        let neg = c & self.sign_bit() != 0;
        let mag = c & (self.sign_bit() - 1);
        let mmask = (1u32 << self.mbits) - 1;
        let exp_all_ones = (mag >> self.mbits) == (1u32 << self.ebits) - 1;
        match self.specials {
            SpecialValues::None => None,
            SpecialValues::AllOnesNan => {
                if exp_all_ones && mag & mmask == mmask {
                    Some(Special::Nan)
                } else {
                    None
                }
            }
            SpecialValues::Ieee => {
                if !exp_all_ones {
                    None
                } else if mag & mmask == 0 {
                    Some(Special::Inf { neg })
                } else {
                    Some(Special::Nan)
                }
            }
        }
    }
    /// How this row's codes are packed into bytes, derived from its code width (NUMERICS.md 9).
    /// A width with no packing (anything but 4, 6 or 8) is a [`FormatError::UnsupportedCodeWidth`].
    pub fn packing(&self) -> Result<Packing, FormatError> {
        Packing::for_code_bits(self.code_bits)
    }
}

impl MxFormat {
    pub const ALL: [MxFormat; 6] = [
        MxFormat::Fp4E2M1,
        MxFormat::Fp6E2M3,
        MxFormat::Fp6E3M2,
        MxFormat::Fp8E4M3,
        MxFormat::Fp8E5M2,
        MxFormat::Int8,
    ];

    /// The format's table row.
    pub const fn spec(self) -> FormatSpec {
        use ElemKind::*;
        match self {
            MxFormat::Fp4E2M1 => FormatSpec {
                name: "mxfp4",
                aliases: &["fp4", "fp4_e2m1", "mxfp4_e2m1", "e2m1"],
                kind: Float,
                ebits: 2,
                mbits: 1,
                bias: 1,
                emax_elem: 2,
                code_bits: 4,
                max_code: 0x7,
                max_normal: 6.0,
                specials: SpecialValues::None,
            },
            MxFormat::Fp6E2M3 => FormatSpec {
                name: "mxfp6_e2m3",
                aliases: &["fp6_e2m3", "e2m3"],
                kind: Float,
                ebits: 2,
                mbits: 3,
                bias: 1,
                emax_elem: 2,
                code_bits: 6,
                max_code: 0x1F,
                max_normal: 7.5,
                specials: SpecialValues::None,
            },
            MxFormat::Fp6E3M2 => FormatSpec {
                name: "mxfp6_e3m2",
                aliases: &["fp6_e3m2", "e3m2"],
                kind: Float,
                ebits: 3,
                mbits: 2,
                bias: 3,
                emax_elem: 4,
                code_bits: 6,
                max_code: 0x1F,
                max_normal: 28.0,
                specials: SpecialValues::None,
            },
            MxFormat::Fp8E4M3 => FormatSpec {
                name: "mxfp8_e4m3",
                aliases: &["fp8_e4m3", "e4m3"],
                kind: Float,
                ebits: 4,
                mbits: 3,
                bias: 7,
                emax_elem: 8,
                code_bits: 8,
                max_code: 0x7E,
                max_normal: 448.0,
                specials: SpecialValues::AllOnesNan,
            },
            MxFormat::Fp8E5M2 => FormatSpec {
                name: "mxfp8_e5m2",
                aliases: &["fp8_e5m2", "e5m2"],
                kind: Float,
                ebits: 5,
                mbits: 2,
                bias: 15,
                emax_elem: 15,
                code_bits: 8,
                max_code: 0x7B,
                max_normal: 57344.0,
                specials: SpecialValues::Ieee,
            },
            MxFormat::Int8 => FormatSpec {
                name: "mxint8",
                aliases: &["int8"],
                kind: Int,
                ebits: 0,
                mbits: 6,
                bias: 0,
                emax_elem: 0,
                code_bits: 8,
                max_code: 127,
                max_normal: 127.0 / 64.0,
                specials: SpecialValues::None,
            },
        }
    }

    pub const fn name(self) -> &'static str {
        self.spec().name
    }

    /// How this format's codes are packed (NUMERICS.md 9). Every row's code width has a packing:
    /// a const assertion over the table checks it at compile time.
    pub const fn packing(self) -> Packing {
        match Packing::of_code_bits(self.spec().code_bits) {
            Some(p) => p,
            None => panic!("a format row has a code width with no packing"),
        }
    }

    /// Packed bytes for `k` elements (`k` a multiple of 32).
    pub const fn packed_len(self, k: usize) -> usize {
        k / BLOCK * self.spec().block_bytes()
    }

    /// A small integer id, shared with the WGSL shaders (`FMT_*` constants in mx_common.wgsl).
    pub const fn id(self) -> u32 {
        match self {
            MxFormat::Fp4E2M1 => 0,
            MxFormat::Fp6E2M3 => 1,
            MxFormat::Fp6E3M2 => 2,
            MxFormat::Fp8E4M3 => 3,
            MxFormat::Fp8E5M2 => 4,
            MxFormat::Int8 => 5,
        }
    }
}

/// Compile-time check of the table: every row's code width has a packing (4, 6 or 8 bits), so
/// [`MxFormat::packing`] cannot fail at run time.
const _: () = {
    let mut i = 0;
    while i < MxFormat::ALL.len() {
        assert!(
            Packing::of_code_bits(MxFormat::ALL[i].spec().code_bits).is_some(),
            "a format row has a code width with no packing (NUMERICS.md 9: 4, 6 or 8 bits)"
        );
        i += 1;
    }
};

/// The canonical names of every format, for error messages.
fn format_names() -> String {
    MxFormat::ALL.map(MxFormat::name).join(", ")
}

impl fmt::Display for MxFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Errors of this module: bad names, shapes and buffer sizes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("unknown format '{0}' (expected one of: {list})", list = format_names())]
    UnknownFormat(String),
    #[error("unknown scale mode '{0}' (expected one of: floor, even, ceil, rceil)")]
    UnknownScaleMode(String),
    #[error("the last dimension is {0}, which is not a multiple of the MX block size 32")]
    NotBlockMultiple(usize),
    #[error("{what}: expected {expected} bytes, got {got}")]
    BadLength {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("empty shape: an MX tensor needs at least one dimension")]
    EmptyShape,
    #[error("no packing for {0}-bit codes (known: 4 bits two per byte, 6 bits four in three bytes, 8 bits one per byte)")]
    UnsupportedCodeWidth(u32),
}

impl FromStr for MxFormat {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // The canonical name or one of the row's aliases.
        let t = s.trim().to_ascii_lowercase();
        MxFormat::ALL
            .into_iter()
            .find(|f| {
                let sp = f.spec();
                sp.name == t || sp.aliases.contains(&t.as_str())
            })
            .ok_or_else(|| FormatError::UnknownFormat(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names `FromStr` accepted before the aliases moved into the table (hand-written), so
    /// the move changes nothing a user can type.
    const HISTORICAL: [(&str, MxFormat); 17] = [
        ("mxfp4", MxFormat::Fp4E2M1),
        ("fp4", MxFormat::Fp4E2M1),
        ("fp4_e2m1", MxFormat::Fp4E2M1),
        ("mxfp4_e2m1", MxFormat::Fp4E2M1),
        ("e2m1", MxFormat::Fp4E2M1),
        ("mxfp6_e2m3", MxFormat::Fp6E2M3),
        ("fp6_e2m3", MxFormat::Fp6E2M3),
        ("e2m3", MxFormat::Fp6E2M3),
        ("mxfp6_e3m2", MxFormat::Fp6E3M2),
        ("fp6_e3m2", MxFormat::Fp6E3M2),
        ("e3m2", MxFormat::Fp6E3M2),
        ("mxfp8_e4m3", MxFormat::Fp8E4M3),
        ("fp8_e4m3", MxFormat::Fp8E4M3),
        ("e4m3", MxFormat::Fp8E4M3),
        ("mxfp8_e5m2", MxFormat::Fp8E5M2),
        ("e5m2", MxFormat::Fp8E5M2),
        ("int8", MxFormat::Int8),
    ];

    #[test]
    fn names_and_aliases_round_trip() {
        let mut seen: Vec<(&str, MxFormat)> = Vec::new();
        for f in MxFormat::ALL {
            let sp = f.spec();
            assert_eq!(f.to_string().parse::<MxFormat>(), Ok(f), "{f}: Display");
            for &n in std::iter::once(&sp.name).chain(sp.aliases) {
                // Parsing lowercases and trims its input, so a table entry must already be so.
                assert_eq!(n, n.trim().to_ascii_lowercase(), "{f}: alias '{n}'");
                assert_eq!(n.parse::<MxFormat>(), Ok(f), "'{n}'");
                assert_eq!(
                    format!("  {}\t", n.to_ascii_uppercase()).parse::<MxFormat>(),
                    Ok(f),
                    "'{n}' uppercased and padded"
                );
                if let Some((_, g)) = seen.iter().find(|(m, _)| *m == n) {
                    panic!("'{n}' names both {g} and {f}");
                }
                seen.push((n, f));
            }
        }
        for (n, f) in HISTORICAL {
            assert_eq!(n.parse::<MxFormat>(), Ok(f), "historical name '{n}'");
        }
        assert_eq!("mxint8".parse::<MxFormat>(), Ok(MxFormat::Int8));
        assert_eq!("fp8_e5m2".parse::<MxFormat>(), Ok(MxFormat::Fp8E5M2));
        for bad in ["", "mxfp5", "fp4 e2m1", "mxfp4,", "nvfp4", "int4"] {
            let e = bad.parse::<MxFormat>().unwrap_err();
            assert_eq!(e, FormatError::UnknownFormat(bad.to_string()));
            assert!(
                e.to_string()
                    .ends_with("mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2, mxint8)"),
                "{e}"
            );
        }
    }

    /// The special codes of each format, written out by hand from NUMERICS.md section 1.
    fn hand_special(f: MxFormat, code: u32) -> Option<Special> {
        match (f, code) {
            (MxFormat::Fp8E4M3, 0x7F | 0xFF) => Some(Special::Nan),
            (MxFormat::Fp8E5M2, 0x7C) => Some(Special::Inf { neg: false }),
            (MxFormat::Fp8E5M2, 0xFC) => Some(Special::Inf { neg: true }),
            (MxFormat::Fp8E5M2, 0x7D..=0x7F | 0xFD..=0xFF) => Some(Special::Nan),
            _ => None,
        }
    }

    /// The special-values column agrees with a hand-written list and with the decoder; finite
    /// codes decode to the section 1 formula, recomputed here in f64; `max_code` is the largest
    /// finite magnitude and decodes to `max_normal`.
    #[test]
    fn special_values_agree_with_decode() {
        let mut n_special = 0;
        for f in MxFormat::ALL {
            let sp = f.spec();
            for code in 0..sp.n_codes() {
                let want = hand_special(f, code);
                assert_eq!(sp.special(code), want, "{f} code {code:#x}: column");
                let v = decode_elem_f64(f, code as u8);
                match want {
                    Some(Special::Nan) => {
                        n_special += 1;
                        assert!(v.is_nan(), "{f} code {code:#x} decodes to {v}, want NaN");
                    }
                    Some(Special::Inf { neg }) => {
                        n_special += 1;
                        assert!(v.is_infinite(), "{f} code {code:#x}: {v}, want Inf");
                        assert_eq!(v.is_sign_negative(), neg, "{f} code {code:#x}: sign");
                    }
                    None => {
                        let formula = match sp.kind {
                            ElemKind::Int => code as u8 as i8 as f64 / 64.0,
                            ElemKind::Float => {
                                let s = if code & sp.sign_bit() != 0 { -1.0 } else { 1.0 };
                                let e = (code & (sp.sign_bit() - 1)) >> sp.mbits;
                                let m = (code & ((1 << sp.mbits) - 1)) as f64;
                                let frac = m / (1u32 << sp.mbits) as f64;
                                if e == 0 {
                                    s * 2f64.powi(1 - sp.bias) * frac
                                } else {
                                    s * 2f64.powi(e as i32 - sp.bias) * (1.0 + frac)
                                }
                            }
                        };
                        assert_eq!(v.to_bits(), formula.to_bits(), "{f} code {code:#x}");
                    }
                }
            }
            assert_eq!(decode_elem_f64(f, sp.max_code as u8), sp.max_normal, "{f}");
            if sp.kind == ElemKind::Float {
                // Every magnitude above max_code is special, and none at or below it.
                for mag in 0..sp.sign_bit() {
                    assert_eq!(
                        sp.special(mag).is_some(),
                        mag > sp.max_code,
                        "{f}: magnitude {mag:#x} vs max_code {:#x}",
                        sp.max_code
                    );
                }
            }
        }
        // E4M3: 2 NaN codes; E5M2: 2 Inf + 6 NaN codes.
        assert_eq!(n_special, 10);
    }

    #[test]
    fn packing_comes_from_the_code_width() {
        assert_eq!(Packing::for_code_bits(4), Ok(Packing::Nibbles));
        assert_eq!(Packing::for_code_bits(6), Ok(Packing::FourInThree));
        assert_eq!(Packing::for_code_bits(8), Ok(Packing::Bytes));
        for f in MxFormat::ALL {
            let sp = f.spec();
            assert_eq!(sp.packing(), Ok(f.packing()), "{f}");
            assert_eq!(f.packing().code_bits(), sp.code_bits, "{f}");
            assert_eq!(sp.block_bytes() * 8, BLOCK * sp.code_bits as usize, "{f}");
        }
        assert_eq!(MxFormat::Fp4E2M1.packing(), Packing::Nibbles);
        assert_eq!(MxFormat::Fp6E2M3.packing(), Packing::FourInThree);
        assert_eq!(MxFormat::Fp6E3M2.packing(), Packing::FourInThree);
        assert_eq!(MxFormat::Fp8E4M3.packing(), Packing::Bytes);
        assert_eq!(MxFormat::Fp8E5M2.packing(), Packing::Bytes);
        assert_eq!(MxFormat::Int8.packing(), Packing::Bytes);
    }

    /// A row whose code width has no packing is rejected with an error, not packed somehow.
    #[test]
    fn unknown_code_width_is_rejected() {
        for w in [0u32, 1, 2, 3, 5, 7, 9, 12, 16, 32] {
            assert_eq!(
                Packing::for_code_bits(w),
                Err(FormatError::UnsupportedCodeWidth(w))
            );
            let row = FormatSpec {
                code_bits: w,
                ..MxFormat::Fp4E2M1.spec()
            };
            let e = row.packing().unwrap_err();
            assert_eq!(e, FormatError::UnsupportedCodeWidth(w));
            assert!(e.to_string().contains(&format!("{w}-bit")), "{e}");
        }
    }
}
