//! Packing of element codes into bytes (layouts in the module docs of `format`).

use super::MxFormat;

/// Pack codes (one per byte, `codes.len()` a multiple of 32) into `out`
/// (`fmt.packed_len(codes.len())` bytes).
pub fn pack_codes(fmt: MxFormat, codes: &[u8], out: &mut [u8]) {
    debug_assert_eq!(out.len(), fmt.packed_len(codes.len()));
    match fmt.spec().code_bits {
        4 => {
            for (o, pair) in out.iter_mut().zip(codes.chunks_exact(2)) {
                *o = (pair[0] & 0xF) | (pair[1] & 0xF) << 4;
            }
        }
        6 => {
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
        _ => out.copy_from_slice(codes),
    }
}

/// Unpack `out.len()` codes from packed bytes.
pub fn unpack_codes(fmt: MxFormat, packed: &[u8], out: &mut [u8]) {
    debug_assert_eq!(packed.len(), fmt.packed_len(out.len()));
    match fmt.spec().code_bits {
        4 => {
            for (pair, &b) in out.chunks_exact_mut(2).zip(packed) {
                pair[0] = b & 0xF;
                pair[1] = b >> 4;
            }
        }
        6 => {
            for (q, b) in out.chunks_exact_mut(4).zip(packed.chunks_exact(3)) {
                let w = b[0] as u32 | (b[1] as u32) << 8 | (b[2] as u32) << 16;
                q[0] = (w & 0x3F) as u8;
                q[1] = ((w >> 6) & 0x3F) as u8;
                q[2] = ((w >> 12) & 0x3F) as u8;
                q[3] = ((w >> 18) & 0x3F) as u8;
            }
        }
        _ => out.copy_from_slice(packed),
    }
}
