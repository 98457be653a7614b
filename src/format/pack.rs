//! Packing of element codes into bytes (layouts in the module docs of `format`, NUMERICS.md 9).
//!
//! The layout is derived from a format row's code width: 4 bits two per byte, 6 bits four in
//! three bytes, 8 bits one per byte. Any other width has no packing and is a
//! [`FormatError::UnsupportedCodeWidth`]; there is no fallback layout.

use super::{FormatError, MxFormat};

/// How codes of one width are laid out in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Packing {
    /// 4-bit codes, two per byte: element 2i in the low nibble of byte i, 2i+1 in the high one.
    Nibbles,
    /// 6-bit codes, four in three bytes: `w = c0 | c1<<6 | c2<<12 | c3<<18`, little-endian.
    FourInThree,
    /// 8-bit codes, one per byte.
    Bytes,
}

impl Packing {
    /// The packing of `code_bits`-wide codes, or `None` for a width we do not know.
    pub const fn of_code_bits(code_bits: u32) -> Option<Packing> {
        match code_bits {
            4 => Some(Packing::Nibbles),
            6 => Some(Packing::FourInThree),
            8 => Some(Packing::Bytes),
            _ => None,
        }
    }

    /// The packing of `code_bits`-wide codes; an unknown width is an error.
    pub fn for_code_bits(code_bits: u32) -> Result<Packing, FormatError> {
        Packing::of_code_bits(code_bits).ok_or(FormatError::UnsupportedCodeWidth(code_bits))
    }

    /// The code width this packing holds.
    pub const fn code_bits(self) -> u32 {
        match self {
            Packing::Nibbles => 4,
            Packing::FourInThree => 6,
            Packing::Bytes => 8,
        }
    }

    /// Pack codes (one per byte, `codes.len()` a multiple of the group: 2, 4 or 1) into `out`
    /// (`codes.len() * code_bits / 8` bytes). Bits above the code width are dropped.
    pub fn pack(self, codes: &[u8], out: &mut [u8]) {
        debug_assert_eq!(out.len() * 8, codes.len() * self.code_bits() as usize);
        match self {
            Packing::Nibbles => {
                for (o, pair) in out.iter_mut().zip(codes.chunks_exact(2)) {
                    *o = (pair[0] & 0xF) | (pair[1] & 0xF) << 4;
                }
            }
            Packing::FourInThree => {
                for (o, q) in out.chunks_exact_mut(3).zip(codes.chunks_exact(4)) {
                    let w = (q[0] as u32 & 0x3F)
                        | (q[1] as u32 & 0x3F) << 6
                        | (q[2] as u32 & 0x3F) << 12
                        | (q[3] as u32 & 0x3F) << 18;
                    o[0] = w as u8;
                    o[1] = (w >> 8) as u8;
                    o[2] = (w >> 16) as u8;
                }
            }
            Packing::Bytes => out.copy_from_slice(codes),
        }
    }

    /// Unpack `out.len()` codes from packed bytes.
    pub fn unpack(self, packed: &[u8], out: &mut [u8]) {
        debug_assert_eq!(packed.len() * 8, out.len() * self.code_bits() as usize);
        match self {
            Packing::Nibbles => {
                for (pair, &b) in out.chunks_exact_mut(2).zip(packed) {
                    pair[0] = b & 0xF;
                    pair[1] = b >> 4;
                }
            }
            Packing::FourInThree => {
                for (q, b) in out.chunks_exact_mut(4).zip(packed.chunks_exact(3)) {
                    let w = b[0] as u32 | (b[1] as u32) << 8 | (b[2] as u32) << 16;
                    q[0] = (w & 0x3F) as u8;
                    q[1] = ((w >> 6) & 0x3F) as u8;
                    q[2] = ((w >> 12) & 0x3F) as u8;
                    q[3] = ((w >> 18) & 0x3F) as u8;
                }
            }
            Packing::Bytes => out.copy_from_slice(packed),
        }
    }
}

/// Pack codes (one per byte, `codes.len()` a multiple of 32) into `out`
/// (`fmt.packed_len(codes.len())` bytes).
pub fn pack_codes(fmt: MxFormat, codes: &[u8], out: &mut [u8]) {
    debug_assert_eq!(out.len(), fmt.packed_len(codes.len()));
    fmt.packing().pack(codes, out);
}

/// Unpack `out.len()` codes from packed bytes.
pub fn unpack_codes(fmt: MxFormat, packed: &[u8], out: &mut [u8]) {
    debug_assert_eq!(packed.len(), fmt.packed_len(out.len()));
    fmt.packing().unpack(packed, out);
}
