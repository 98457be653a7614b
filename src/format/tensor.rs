//! Block quantize / dequantize / QDQ and the packed [`MxTensor`].

use super::{
    decode_parts, e8m0_to_f32, encode_elem, pack_codes, scale_byte, unpack_codes, FormatError,
    MxFormat, Packing, ScaleMode, BLOCK, SCALE_NAN,
};
use crate::format::codec::Decoded;
use crate::format::Bytes;
use rayon::prelude::*;

/// Quantize one 32-element block: returns the scale byte and writes 32 codes.
pub fn quantize_block(fmt: MxFormat, mode: ScaleMode, x: &[f32], codes: &mut [u8]) -> u8 {
    debug_assert_eq!(x.len(), BLOCK);
    // amax and the NaN/Inf test on bit patterns (exact, order-independent).
    let mut amax = 0u32;
    for v in x {
        amax = amax.max(v.to_bits() & 0x7FFF_FFFF);
    }
    if amax >= 0x7F80_0000 {
        codes.iter_mut().for_each(|c| *c = 0);
        return SCALE_NAN;
    }
    let byte = scale_byte(fmt, mode, amax);
    let s = byte as i32 - 127;
    for (c, v) in codes.iter_mut().zip(x) {
        *c = encode_elem(fmt, v.to_bits(), s);
    }
    byte
}

/// A table of element values as f32 for every code of a format (exact: at most 8 significant
/// bits, all within f32's normal range). Built once per process.
pub(crate) fn code_lut(fmt: MxFormat) -> &'static [f32; 256] {
    static LUTS: std::sync::OnceLock<Vec<[f32; 256]>> = std::sync::OnceLock::new();
    let luts = LUTS.get_or_init(|| {
        MxFormat::ALL
            .iter()
            .map(|&f| {
                let mut t = [0f32; 256];
                for (c, v) in t.iter_mut().enumerate().take(f.spec().n_codes() as usize) {
                    *v = super::decode_elem_f64(f, c as u8) as f32;
                }
                t
            })
            .collect()
    });
    &luts[fmt.id() as usize]
}

/// `decode(code) * 2^(byte-127)` as f32, exactly (NUMERICS.md 5.4). Computed in f64 from the
/// integer parts, which is exact, then rounded once to f32 (exact too except for byte values a
/// quantizer never writes, where IEEE overflow gives ±Inf).
#[inline]
pub fn dequant_elem(fmt: MxFormat, code: u8, byte: u8) -> f32 {
    if byte == SCALE_NAN {
        return f32::NAN;
    }
    match decode_parts(fmt, code) {
        Decoded::Finite { neg, n, exp } => {
            let v = n as f64 * super::codec::pow2_f64(exp + byte as i32 - 127);
            (if neg { -v } else { v }) as f32
        }
        Decoded::Inf { neg } => {
            if neg {
                f32::NEG_INFINITY
            } else {
                f32::INFINITY
            }
        }
        Decoded::NaN => f32::NAN,
    }
}

/// Dequantize one block of codes with its scale byte.
pub fn dequantize_block(fmt: MxFormat, codes: &[u8], byte: u8, out: &mut [f32]) {
    for (o, &c) in out.iter_mut().zip(codes) {
        *o = dequant_elem(fmt, c, byte);
    }
}

/// Quantize-dequantize one block in place semantics: `out = dequant(quant(x))`.
pub fn qdq_block(fmt: MxFormat, mode: ScaleMode, x: &[f32], out: &mut [f32]) {
    let mut codes = [0u8; BLOCK];
    let byte = quantize_block(fmt, mode, x, &mut codes);
    dequantize_block(fmt, &codes, byte, out);
}

/// QDQ a whole row-major buffer whose last dimension `k` is a multiple of 32.
pub fn qdq_slice(
    fmt: MxFormat,
    mode: ScaleMode,
    x: &[f32],
    k: usize,
) -> Result<Vec<f32>, FormatError> {
    check_rows(x.len(), k)?;
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(BLOCK * 64)
        .zip(x.par_chunks(BLOCK * 64))
        .for_each(|(o, i)| {
            for (ob, ib) in o.chunks_exact_mut(BLOCK).zip(i.chunks_exact(BLOCK)) {
                qdq_block(fmt, mode, ib, ob);
            }
        });
    Ok(out)
}

/// The block axis of `shape` (its last dimension), checked to be a positive multiple of 32.
fn block_axis(shape: &[usize]) -> Result<usize, FormatError> {
    let k = *shape.last().ok_or(FormatError::EmptyShape)?;
    if k == 0 || !k.is_multiple_of(BLOCK) {
        return Err(FormatError::NotBlockMultiple(k));
    }
    Ok(k)
}

/// Check `len` f32 values against a tensor `shape` to quantize (last dimension a multiple of
/// 32, as many values as the shape holds).
pub fn check_values(len: usize, shape: &[usize]) -> Result<(), FormatError> {
    block_axis(shape)?;
    let n: usize = shape.iter().product();
    if len != n {
        return Err(FormatError::BadLength {
            what: "input elements",
            expected: n,
            got: len,
        });
    }
    Ok(())
}

/// Check `len` f32 values as whole rows of `k` (a multiple of 32) for QDQ.
pub fn check_rows(len: usize, k: usize) -> Result<(), FormatError> {
    block_axis(&[k])?;
    if !len.is_multiple_of(k) {
        return Err(FormatError::BadLength {
            what: "qdq input",
            expected: len.div_ceil(k) * k,
            got: len,
        });
    }
    Ok(())
}

/// Check a packed tensor's byte counts against its format and logical shape.
pub fn check_parts(
    format: MxFormat,
    shape: &[usize],
    data_len: usize,
    scales_len: usize,
) -> Result<(), FormatError> {
    let k = block_axis(shape)?;
    let rows: usize = shape[..shape.len() - 1].iter().product();
    let expect_data = rows * format.packed_len(k);
    if data_len != expect_data {
        return Err(FormatError::BadLength {
            what: "packed data",
            expected: expect_data,
            got: data_len,
        });
    }
    let expect_scales = rows * (k / BLOCK);
    if scales_len != expect_scales {
        return Err(FormatError::BadLength {
            what: "scales",
            expected: expect_scales,
            got: scales_len,
        });
    }
    Ok(())
}

/// A packed MX tensor: `shape` is the logical shape (last dimension = K, the block axis),
/// `data` the packed codes row by row (`packed_len(K)` bytes per row), `scales` one E8M0 byte
/// per 32-block, row-major `[rows, K/32]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MxTensor {
    pub format: MxFormat,
    pub shape: Vec<usize>,
    pub data: Bytes,
    pub scales: Bytes,
}

impl MxTensor {
    /// Check the shape and buffer sizes and build the tensor.
    pub fn new(
        format: MxFormat,
        shape: Vec<usize>,
        data: impl Into<Bytes>,
        scales: impl Into<Bytes>,
    ) -> Result<Self, FormatError> {
        let (data, scales) = (data.into(), scales.into());
        check_parts(format, &shape, data.len(), scales.len())?;
        Ok(MxTensor {
            format,
            shape,
            data,
            scales,
        })
    }

    /// Quantize a row-major f32 buffer of the given shape.
    pub fn quantize(
        format: MxFormat,
        mode: ScaleMode,
        x: &[f32],
        shape: &[usize],
    ) -> Result<Self, FormatError> {
        check_values(x.len(), shape)?;
        let blocks = x.len() / BLOCK;
        let bb = format.spec().block_bytes();
        let mut data = vec![0u8; blocks * bb];
        let mut scales = vec![0u8; blocks];
        data.par_chunks_mut(bb)
            .zip(scales.par_iter_mut())
            .zip(x.par_chunks(BLOCK))
            .for_each(|((d, s), xb)| {
                let mut codes = [0u8; BLOCK];
                *s = quantize_block(format, mode, xb, &mut codes);
                pack_codes(format, &codes, d);
            });
        Ok(MxTensor {
            format,
            shape: shape.to_vec(),
            data: data.into(),
            scales: scales.into(),
        })
    }

    /// Check the byte counts against the format and shape (a tensor built field by field may
    /// be inconsistent; [`MxTensor::new`] checks the same).
    pub fn validate(&self) -> Result<(), FormatError> {
        check_parts(self.format, &self.shape, self.data.len(), self.scales.len())
    }

    /// The block axis length.
    pub fn k(&self) -> usize {
        *self.shape.last().unwrap_or(&0)
    }
    /// Rows = product of all dimensions but the last.
    pub fn rows(&self) -> usize {
        self.shape[..self.shape.len().saturating_sub(1)]
            .iter()
            .product()
    }
    /// Packed bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.format.packed_len(self.k())
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Dequantize rows `[r0, r0 + out.len()/K)` into `out` (exact).
    pub fn dequantize_rows(&self, r0: usize, out: &mut [f32]) {
        let k = self.k();
        let lut = code_lut(self.format);
        let rb = self.row_bytes();
        let sb = k / BLOCK;
        let bb = self.format.spec().block_bytes();
        let nibbles = self.format.packing() == Packing::Nibbles;
        let mut codes = [0u8; BLOCK];
        for (i, orow) in out.chunks_exact_mut(k).enumerate() {
            let r = r0 + i;
            let prow = &self.data[r * rb..(r + 1) * rb];
            let srow = &self.scales[r * sb..(r + 1) * sb];
            for ((ob, pb), &byte) in orow
                .chunks_exact_mut(BLOCK)
                .zip(prow.chunks_exact(bb))
                .zip(srow)
            {
                let sc = e8m0_to_f32(byte);
                if nibbles {
                    // FP4 fast path: two codes per byte, low nibble first.
                    for (o2, &b) in ob.chunks_exact_mut(2).zip(pb) {
                        o2[0] = lut[(b & 0xF) as usize] * sc;
                        o2[1] = lut[(b >> 4) as usize] * sc;
                    }
                    continue;
                }
                unpack_codes(self.format, pb, &mut codes);
                // Power-of-two times an element value of <= 8 significant bits: exact in f32,
                // including subnormal results (checked against `dequant_elem` in the tests).
                for (o, &c) in ob.iter_mut().zip(&codes) {
                    *o = lut[c as usize] * sc;
                }
            }
        }
    }

    /// Dequantize the whole tensor (exact).
    pub fn dequantize(&self) -> Vec<f32> {
        let k = self.k();
        let mut out = vec![0f32; self.numel()];
        let rows_per = (1 << 16) / k.max(1) + 1;
        out.par_chunks_mut(rows_per * k)
            .enumerate()
            .for_each(|(i, o)| self.dequantize_rows(i * rows_per, o));
        out
    }

    /// The codes of the whole tensor, one byte per element (for tests and the viewer).
    pub fn codes(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.numel()];
        let bb = self.format.spec().block_bytes();
        for (o, p) in out.chunks_exact_mut(BLOCK).zip(self.data.chunks_exact(bb)) {
            unpack_codes(self.format, p, o);
        }
        out
    }
}
