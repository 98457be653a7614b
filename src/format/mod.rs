//! MX element formats, E8M0 block scales, scale modes, rounding and packing.
//!
//! This module is **the one place** a format is defined. A format is a row of [`FormatSpec`]
//! (exponent/mantissa widths, bias, `emax_elem`, code width, largest finite code); encoding and
//! decoding are derived from the row with exact integer arithmetic. Everything else (the CPU
//! reference, the WGSL shaders through their generated constants, the CLI, the tests) asks here.
//!
//! # The contract (`shared/NUMERICS.md`, section "Proposed normative contract")
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

mod codec;
mod pack;
mod scale;
mod tensor;

pub use codec::{decode_elem_f64, decode_parts, encode_elem};
pub use pack::{pack_codes, unpack_codes};
pub use scale::{e8m0_to_f32, scale_byte, ScaleMode};
pub use tensor::{
    check_parts, check_rows, check_values, dequantize_block, qdq_block, qdq_slice, quantize_block,
    MxTensor,
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

/// One row of the format table. All numbers are those of NUMERICS.md section 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FormatSpec {
    /// Stable name used by the CLI, file metadata and reports (`mxfp4`, `mxfp6_e2m3`, ...).
    pub name: &'static str,
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
                kind: Float,
                ebits: 2,
                mbits: 1,
                bias: 1,
                emax_elem: 2,
                code_bits: 4,
                max_code: 0x7,
                max_normal: 6.0,
            },
            MxFormat::Fp6E2M3 => FormatSpec {
                name: "mxfp6_e2m3",
                kind: Float,
                ebits: 2,
                mbits: 3,
                bias: 1,
                emax_elem: 2,
                code_bits: 6,
                max_code: 0x1F,
                max_normal: 7.5,
            },
            MxFormat::Fp6E3M2 => FormatSpec {
                name: "mxfp6_e3m2",
                kind: Float,
                ebits: 3,
                mbits: 2,
                bias: 3,
                emax_elem: 4,
                code_bits: 6,
                max_code: 0x1F,
                max_normal: 28.0,
            },
            MxFormat::Fp8E4M3 => FormatSpec {
                name: "mxfp8_e4m3",
                kind: Float,
                ebits: 4,
                mbits: 3,
                bias: 7,
                emax_elem: 8,
                code_bits: 8,
                max_code: 0x7E,
                max_normal: 448.0,
            },
            MxFormat::Fp8E5M2 => FormatSpec {
                name: "mxfp8_e5m2",
                kind: Float,
                ebits: 5,
                mbits: 2,
                bias: 15,
                emax_elem: 15,
                code_bits: 8,
                max_code: 0x7B,
                max_normal: 57344.0,
            },
            MxFormat::Int8 => FormatSpec {
                name: "mxint8",
                kind: Int,
                ebits: 0,
                mbits: 6,
                bias: 0,
                emax_elem: 0,
                code_bits: 8,
                max_code: 127,
                max_normal: 127.0 / 64.0,
            },
        }
    }

    pub const fn name(self) -> &'static str {
        self.spec().name
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

impl fmt::Display for MxFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Errors of this module: bad names, shapes and buffer sizes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("unknown format '{0}' (expected one of: mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2, mxint8)")]
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
}

impl FromStr for MxFormat {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        // Accept a few common aliases as well as the canonical names.
        let f = match t.as_str() {
            "mxfp4" | "fp4" | "fp4_e2m1" | "mxfp4_e2m1" | "e2m1" => MxFormat::Fp4E2M1,
            "mxfp6_e2m3" | "fp6_e2m3" | "e2m3" => MxFormat::Fp6E2M3,
            "mxfp6_e3m2" | "fp6_e3m2" | "e3m2" => MxFormat::Fp6E3M2,
            "mxfp8_e4m3" | "fp8_e4m3" | "e4m3" => MxFormat::Fp8E4M3,
            "mxfp8_e5m2" | "fp8_e5m2" | "e5m2" => MxFormat::Fp8E5M2,
            "mxint8" | "int8" => MxFormat::Int8,
            _ => return Err(FormatError::UnknownFormat(s.to_string())),
        };
        Ok(f)
    }
}
