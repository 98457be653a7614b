//! The engines of the compatibility profiles ([`super::profile`]): each ports one peer's own
//! arithmetic (its f32 operations, in its order), citing the file it comes from. Split from
//! profile.rs, which holds the profiles' data and API.

use super::codec::encode_elem;
use super::profile::{MsmxRound, ProfileBlock};
use super::{dequant_elem, ElemKind, MxFormat, ScaleMode, BLOCK, SCALE_NAN};

// ---------------------------------------------------------------------------------------------
// f32 helpers shared by the engines that port floating-point code.

/// `log2` of an f32, rounded to f32 (the peers call `torch.log2` / `np.log2` on f32 tensors).
/// Computed in f64 and rounded once; tests/xref.rs checks the near-power-of-two blocks.
fn log2f(x: f32) -> f32 {
    (x as f64).log2() as f32
}

/// `2^t` for an integral (or infinite / NaN) f32 `t`, as an f32: 0 below 2^-149 (2^-150 is a
/// tie that rounds to even, 0), +Inf from 2^128 (`torch.pow(2, t)`, `torch.exp2`).
fn pow2f(t: f32) -> f32 {
    if t.is_nan() {
        f32::NAN
    } else if t >= 128.0 {
        f32::INFINITY
    } else if t <= -150.0 {
        0.0
    } else {
        (2f64).powi(t as i32) as f32
    }
}

/// `torch.amax(|x|)`: NaN if any element is NaN.
fn amax_nan(x: &[f32]) -> f32 {
    let mut a = 0f32;
    for v in x {
        let m = v.abs();
        if m.is_nan() {
            return f32::NAN;
        }
        if m > a {
            a = m;
        }
    }
    a
}

/// Round half to even of an f32 (`torch.round`).
fn round_even(x: f32) -> f32 {
    x.round_ties_even()
}

/// QDQ of a finite f32 at unit scale under the contract's element rule (RNE, saturation, the
/// sign of zero kept): what a cast to fp8 and back does after a clamp to ±max.
fn elem_rne(fmt: MxFormat, q: f32) -> f32 {
    if q.is_nan() {
        return f32::NAN;
    }
    dequant_elem(fmt, encode_elem(fmt, q.to_bits(), 0), 127)
}

/// A block from a QDQ-only engine (Quark, microxcaling): the byte and codes are derived from
/// the QDQ output when it is an MX block (scale a power of two in the E8M0 range, every value
/// on the element grid), else `byte` is `None`.
pub(super) fn float_block(
    fmt: MxFormat,
    x: &[f32],
    qdq: impl Fn(&[f32]) -> ([f32; BLOCK], f32),
) -> ProfileBlock {
    let (out, scale) = qdq(x);
    let mut codes = [0u8; BLOCK];
    let byte = if scale.is_nan() {
        Some(SCALE_NAN)
    } else if scale > 0.0 && scale.is_finite() {
        let b = scale.to_bits();
        let e = if b >> 23 == 0 {
            // An f32-subnormal power of two: 2^-127 is byte 0; smaller ones have no byte.
            (b == 0x0040_0000).then_some(0u8)
        } else {
            (b & 0x7F_FFFF == 0).then_some((b >> 23) as u8)
        };
        e.filter(|&byte| {
            let s = byte as i32 - 127;
            out.iter().zip(codes.iter_mut()).all(|(&v, c)| {
                if !v.is_finite() {
                    return false;
                }
                *c = encode_elem(fmt, v.to_bits(), s);
                dequant_elem(fmt, *c, byte).to_bits() == v.to_bits()
            })
        })
    } else {
        None
    };
    if byte == Some(SCALE_NAN) {
        codes = [0; BLOCK];
    }
    ProfileBlock {
        byte,
        codes,
        qdq: out,
    }
}

/// torchao 0.18 `mx_tensor.py::to_mx` then `to_dtype` (file and line references are to that
/// release). Returns the byte, the codes as torchao writes them (FP4 before packing) and the
/// dequantized values.
pub(super) fn torchao_block(fmt: MxFormat, mode: ScaleMode, x: &[f32]) -> ProfileBlock {
    let spec = fmt.spec();
    let max_pos = spec.max_normal as f32;
    let amax = amax_nan(x);
    let mut q = [0f32; BLOCK];
    let byte: u8;
    if mode == ScaleMode::RCeil {
        // `_to_mx_rceil`: descale = amax / max_pos; exponent = ceil(log2(descale)) clamped to
        // [-127, 127] + 127 (NaN -> 255, Inf -> 254); reciprocal 1.0 for byte 0 (T2), 2^-127
        // for 254, exp2(127 - byte) otherwise; data * reciprocal, clamped to ±max_pos.
        let descale = amax / max_pos;
        byte = if descale.is_nan() {
            255
        } else if descale.is_infinite() {
            254
        } else {
            (log2f(descale).ceil().clamp(-127.0, 127.0) + 127.0) as u8
        };
        let rcp = match byte {
            255 => descale,
            254 => f32::from_bits(0x0040_0000),
            0 => 1.0,
            b => pow2f(127.0 - b as f32),
        };
        for (o, &v) in q.iter_mut().zip(x) {
            *o = (v * rcp).clamp(-max_pos, max_pos);
        }
    } else {
        // Exponent bits of amax (EVEN: rounded up at the element's mantissa width first),
        // clamped to [-127, 128]; NaN amax -> 255. The divisor is 2^(byte-127) clamped below
        // at 2^-126 (T1); byte 255 divides by Inf.
        let mut bits = amax.to_bits() as i32;
        if mode == ScaleMode::Even && !amax.is_nan() {
            bits = bits.wrapping_add(1 << (23 - spec.mbits - 1)) & (0x1FF << 23);
        }
        let mut pow2 = ((bits >> 23) & 0xFF) - 127;
        if mode == ScaleMode::Ceil {
            pow2 += ((bits & 0x7F_FFFF) > 0) as i32;
        }
        let s = (pow2 - spec.emax_elem).clamp(-127, 128);
        byte = if amax.is_nan() { 255 } else { (s + 127) as u8 };
        let scale = f32::from_bits((byte as u32) << 23).max(f32::MIN_POSITIVE);
        for (o, &v) in q.iter_mut().zip(x) {
            let d = v / scale;
            *o = if spec.code_bits == 8 {
                d.clamp(-max_pos, max_pos)
            } else {
                d
            };
        }
    }
    let mut codes = [0u8; BLOCK];
    for (c, &v) in codes.iter_mut().zip(&q) {
        *c = if spec.code_bits == 8 {
            // `.to(torch.float8_*)`: RNE; NaN -> 0x7F | sign.
            if v.is_nan() {
                0x7F | ((v.to_bits() >> 24) as u8 & 0x80)
            } else {
                encode_elem(fmt, v.to_bits(), 0)
            }
        } else {
            torchao_f32_to_floatx(v, spec.ebits, spec.mbits)
        };
    }
    let mut qdq = [0f32; BLOCK];
    for (o, &c) in qdq.iter_mut().zip(&codes) {
        *o = dequant_elem(fmt, c & (spec.n_codes() - 1) as u8, byte);
    }
    ProfileBlock {
        byte: Some(byte),
        codes,
        qdq,
    }
}

/// torchao `custom_fp_utils.py::_f32_to_floatx_unpacked` (FP4/FP6): RNE by a magic adder,
/// saturation for `x >= max_normal`, f32-add rounding for the subnormal range, and, for NaN,
/// whatever the integer arithmetic gives (T5), truncated to u8 as torch does.
fn torchao_f32_to_floatx(x: f32, ebits: u32, mbits: u32) -> u8 {
    let ones = |n: u32| (1i64 << n) - 1;
    let exp_bias = ones(ebits - 1);
    let max_int = ones(ebits + mbits);
    let sign_mask = 1i64 << (ebits + mbits);
    let magic_adder = ones(23 - mbits - 1);
    let max_normal = 2f64.powi((ones(ebits) - exp_bias) as i32)
        * (ones(mbits + 1) as f64 / 2f64.powi(mbits as i32));
    let min_normal = 2f64.powi((1 - exp_bias) as i32);
    let denorm_exp = (127 - exp_bias) + (23 - mbits as i64) + 1;
    let denorm_mask_int = (denorm_exp << 23) as i32;
    let denorm_mask_float = f32::from_bits(denorm_mask_int as u32);
    let bits = x.to_bits() as i32;
    let sign = bits & i32::MIN;
    let xa = f32::from_bits((bits ^ sign) as u32);
    let saturate = (xa as f64) >= max_normal;
    let denormal = !saturate && (xa as f64) < min_normal;
    let normal = !(saturate || denormal);
    let r: i32 = if denormal {
        let d = (xa + denorm_mask_float).to_bits() as i32;
        d.wrapping_sub(denorm_mask_int)
    } else if normal {
        let n = xa.to_bits() as i32;
        let mant_odd = (n >> (23 - mbits)) & 1;
        let val_to_add = (((exp_bias - 127) << 23) + magic_adder) as i32;
        n.wrapping_add(val_to_add).wrapping_add(mant_odd) >> (23 - mbits)
    } else {
        max_int as i32
    };
    let sign_lp = (sign >> (23 + 8 - mbits - ebits)) as i64 & sign_mask;
    ((r as u8) as i64 | sign_lp) as u8
}

/// Quark's element QDQ parameters (`quantization/utils.py::get_dtype_params`): ebits, mbits,
/// emax. MXINT8 has mbits 8 (Q6).
fn quark_params(fmt: MxFormat) -> (u32, u32, i32) {
    let s = fmt.spec();
    match s.kind {
        ElemKind::Int => (0, 8, 0),
        ElemKind::Float => (s.ebits, s.mbits, s.emax_elem),
    }
}

/// Quark `quantization/utils.py::even_round`: amax's bits + 2^(22 - mbits), masked to sign and
/// exponent; 0 -> 2^-126, NaN kept; then log2, floor, - emax, clamp [-127, 127], exp2.
fn quark_even_round(amax: f32, mbits: u32, emax: i32) -> f32 {
    if amax.is_nan() {
        return f32::NAN;
    }
    let r = if amax == 0.0 {
        f32::MIN_POSITIVE
    } else {
        let b = (amax.to_bits() as i32).wrapping_add(1 << (23 - mbits - 1)) & (0x1FF << 23);
        f32::from_bits(b as u32)
    };
    pow2f((log2f(r).floor() - emax as f32).clamp(-127.0, 127.0))
}

/// Quark `fake_quantize_mx` for one block: the QDQ output and the scale it divided by.
pub(super) fn quark_qdq(fmt: MxFormat, mode: ScaleMode, x: &[f32]) -> ([f32; BLOCK], f32) {
    let (ebits, mbits, emax) = quark_params(fmt);
    let amax = amax_nan(x);
    let scale = match mode {
        ScaleMode::Floor => pow2f(log2f(amax).floor() - emax as f32),
        ScaleMode::Ceil => pow2f(log2f(amax).ceil() - emax as f32),
        _ => quark_even_round(amax, mbits, emax),
    };
    // `scale.masked_fill(scale == 0.0, eps)`.
    let scale = if scale == 0.0 { f32::EPSILON } else { scale };
    let spec = fmt.spec();
    let max = spec.max_normal as f32;
    let mut out = [0f32; BLOCK];
    match (spec.kind, spec.code_bits) {
        (ElemKind::Int, _) => {
            // `fake_quantize_int_per_group_affine(scale / 64, zero_point 0, -127, 127)` ->
            // `fake_quantize_per_channel_affine`: scale clamped to f32 tiny (Q7), inv = 1 / s,
            // clamp(round(x * inv) + 0, -127, 127) - 0, times s.
            let s = (scale / 64.0).max(f32::MIN_POSITIVE);
            let s = if (scale / 64.0).is_nan() { f32::NAN } else { s };
            let inv = 1.0 / s;
            for (o, &v) in out.iter_mut().zip(x) {
                let qv = (round_even(v * inv) + 0.0).clamp(-127.0, 127.0);
                *o = (qv - 0.0) * s;
            }
        }
        (ElemKind::Float, 8) => {
            // `fake_quantize_fp8_per_channel_with_scale`: x / s, clamp, cast to fp8 and back, * s.
            for (o, &v) in out.iter_mut().zip(x) {
                *o = elem_rne(fmt, (v / scale).clamp(-max, max)) * scale;
            }
        }
        _ => {
            // FP4/FP6: x / s, the C++ `fake_quantize_element`, * s.
            for (o, &v) in out.iter_mut().zip(x) {
                *o = quark_elem(v / scale, ebits, mbits, max) * scale;
            }
        }
    }
    (out, scale)
}

/// Quark `csrc/mx/funcs.cuh::fake_quantize_element` (RNE via `shift_and_round`; a zero result is
/// +0.0, Q1; the f32 exponent 0xFF passes through; `min(|x|, max_norm)`).
fn quark_elem(element: f32, ebits: u32, mbits: u32, max_norm: f32) -> f32 {
    let b = element.to_bits();
    let mut exp = ((b & 0x7F80_0000) >> 23) as i32;
    if exp == 255 {
        return element;
    }
    let new_bias = (1i32 << (ebits - 1)) - 1;
    let mut mantissa = b & 0x7F_FFFF;
    let mut mantissa_bits = 23;
    if exp != 0 {
        mantissa |= 1 << 23;
        mantissa_bits += 1;
    }
    let new_exp = exp - 127 + new_bias;
    let exp_shift = if new_exp > 0 { 0 } else { 1 - new_exp };
    let tail_bits = 23 - mbits as i32 + exp_shift;
    mantissa = if tail_bits == 0 {
        mantissa
    } else if tail_bits > 25 {
        0
    } else {
        let half = 1u32 << (tail_bits - 1);
        let tail = mantissa & ((1u32 << tail_bits) - 1);
        let ret = mantissa >> tail_bits;
        if tail < half {
            ret
        } else if tail > half || ret % 2 == 1 {
            ret + 1
        } else {
            ret
        }
    };
    if mantissa == 0 {
        return 0.0;
    }
    mantissa <<= tail_bits;
    if mantissa >= 1 << mantissa_bits {
        if exp != 0 {
            mantissa >>= 1;
        }
        exp += 1;
    }
    let mut abs = f32::from_bits(((exp as u32) << 23).wrapping_add(mantissa & 0x7F_FFFF));
    if abs > max_norm {
        abs = max_norm;
    }
    f32::from_bits(abs.to_bits().wrapping_add(b & 0x8000_0000))
}

/// microxcaling's format parameters (`formats.py::_get_format_params`): ebits, mbits (sign and
/// implicit bit included), emax, max_norm.
fn msmx_params(fmt: MxFormat) -> (i32, i32, i32, f32) {
    match fmt {
        MxFormat::Fp4E2M1 => (2, 3, 2, 6.0),
        MxFormat::Fp6E2M3 => (2, 5, 2, 7.5),
        MxFormat::Fp6E3M2 => (3, 4, 4, 28.0),
        MxFormat::Fp8E4M3 => (4, 5, 8, 448.0),
        MxFormat::Fp8E5M2 => (5, 4, 15, 57344.0),
        MxFormat::Int8 => (0, 8, 0, 127.0 / 64.0),
    }
}

/// `torch.sign`: ±1, +0 for ±0, NaN for NaN.
fn sign(x: f32) -> f32 {
    if x.is_nan() {
        f32::NAN
    } else if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

/// microxcaling `_quantize_mx` (PyTorch path: `custom_cuda=False`, scale_bits 8, "max",
/// no subnormal flush) for one block: the QDQ output and the shared scale 2^se.
pub(super) fn msmx_qdq(fmt: MxFormat, round: MsmxRound, x: &[f32]) -> ([f32; BLOCK], f32) {
    let (ebits, bits, emax, max_norm) = msmx_params(fmt);
    let amax = amax_nan(x);
    // `_shared_exponents`: floor(log2(amax + FP32_MIN_NORMAL * (amax == 0))).
    let fill = if amax == 0.0 { f32::MIN_POSITIVE } else { 0.0 };
    let mut se = log2f(amax + fill).floor() - emax as f32;
    if se > 127.0 {
        se = f32::NAN;
    } else if se < -127.0 {
        se = -127.0;
    }
    let p = pow2f(se);
    let lsh = (1u32 << (bits - 2)) as f32;
    let min_exp = -(1i32 << (ebits - 1).max(0)) as f32 + 2.0;
    let mut out = [0f32; BLOCK];
    for (o, &v) in out.iter_mut().zip(x) {
        let a = v / p;
        // `_quantize_elemwise_core(a, bits, ebits, max_norm, round, allow_denorm=True,
        // saturate_normals=True)`.
        let pe = (ebits != 0).then(|| {
            let z = if a == 0.0 { 1.0 } else { 0.0 };
            let e = log2f(a.abs() + z).floor();
            // `clip(min=min_exp)` keeps NaN.
            if e < min_exp {
                min_exp
            } else {
                e
            }
        });
        let mut y = match pe {
            Some(e) => a / pow2f(e) * lsh,
            None => a * lsh,
        };
        y = match round {
            MsmxRound::Nearest => sign(y) * (y.abs() + 0.5).floor(),
            MsmxRound::Even => {
                let abs = y.abs();
                let r = (abs - 0.5) % 2.0;
                let r = if r != 0.0 && r < 0.0 { r + 2.0 } else { r };
                let mask = if r == 0.0 { 1.0 } else { 0.0 };
                sign(y) * ((abs + 0.5).floor() - mask)
            }
        };
        y = match pe {
            Some(e) => y / lsh * pow2f(e),
            None => y / lsh,
        };
        y = y.clamp(-max_norm, max_norm);
        if a == f32::INFINITY {
            y = f32::INFINITY;
        } else if a == f32::NEG_INFINITY {
            y = f32::NEG_INFINITY;
        }
        *o = y * p;
    }
    (out, p)
}

/// ModelOpt 0.47 `MXFP8QTensor.quantize` / `MXFP4QTensor.quantize` and their `dequantize`.
pub(super) fn modelopt_block(fmt: MxFormat, x: &[f32]) -> ProfileBlock {
    let amax = amax_nan(x);
    let mut codes = [0u8; BLOCK];
    let byte: u8;
    if fmt == MxFormat::Fp8E4M3 {
        // `_compute_e8m0_exponent`: descale = amax / 448; log2 where descale > 0, else -127
        // (NaN too: N4); ceil; clamp [-127, 127]. `quantize_with_scale`: x * exp2(127 - byte),
        // clamp ±448, cast (RNE).
        let descale = amax / 448.0;
        let l = if descale > 0.0 {
            log2f(descale)
        } else {
            -127.0
        };
        byte = (l.ceil().clamp(-127.0, 127.0) + 127.0) as u8;
        let sf = pow2f(127.0 - byte as f32);
        for (c, &v) in codes.iter_mut().zip(x) {
            let q = (v * sf).clamp(-448.0, 448.0);
            *c = if q.is_nan() {
                0x7F | ((q.to_bits() >> 24) as u8 & 0x80)
            } else {
                encode_elem(fmt, q.to_bits(), 0)
            };
        }
    } else {
        // FP4: e = ceil(max(log2(amax / 6), -127)) (no upper clamp); x / exp2(e); `cast_fp4`:
        // sign bit (2 - sign(x)) // 2 (so ±0 -> 1: code 0x8, N3), magnitude = how many of the
        // bounds [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5] lie strictly below |x| (ties down, N2).
        const BOUNDS: [f32; 7] = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0];
        let l = log2f(amax / 6.0);
        let e = if l.is_nan() { l } else { l.max(-127.0) }.ceil();
        let p = pow2f(e);
        for (c, &v) in codes.iter_mut().zip(x) {
            let q = v / p;
            let sbit = if sign(q) > 0.0 { 0 } else { 1 };
            let ord = BOUNDS.iter().filter(|&&b| q.abs() - b > 0.0).count() as u8;
            *c = sbit * 8 + ord;
        }
        byte = (e + 127.0) as u8;
    }
    let mut qdq = [0f32; BLOCK];
    for (o, &c) in qdq.iter_mut().zip(&codes) {
        // dequantize: code value * exp2(byte - 127) in f32 (byte 255 is 2^128 = Inf).
        *o = if byte == 255 {
            dequant_elem(fmt, c, 127) * f32::INFINITY
        } else {
            dequant_elem(fmt, c, byte)
        };
    }
    let defined = !(amax.is_nan() || amax.is_infinite());
    ProfileBlock {
        byte: if defined { Some(byte) } else { Some(SCALE_NAN) },
        codes: if defined { codes } else { [0; BLOCK] },
        qdq: if defined { qdq } else { [f32::NAN; BLOCK] },
    }
}

/// gguf-py `quants.py::MXFP4.quantize_blocks` (= ggml-quants.c `quantize_row_mxfp4_ref`):
/// e = floor(log2(amax)) - 2 + 127 as u8 (0 for amax 0); d = 2^(e - 128) (`e8m0_to_fp32_half`);
/// each element takes the first index of the smallest |d * kvalue - x| over the doubled table
/// (ties toward the lower index: toward zero, and +0 over -0). Where the u8 cast is undefined
/// (NaN / Inf amax, e < 0 or > 255) the block is the contract's NaN block.
pub(super) fn ggml_block(x: &[f32]) -> ProfileBlock {
    const KV: [f32; 16] = [
        0., 1., 2., 3., 4., 6., 8., 12., 0., -1., -2., -3., -4., -6., -8., -12.,
    ];
    let amax = amax_nan(x);
    let e = if amax > 0.0 {
        log2f(amax).floor() - 2.0 + 127.0
    } else {
        0.0
    };
    if !(0.0..=255.0).contains(&e) {
        // NaN compares false: undefined in the peer.
        return ProfileBlock {
            byte: Some(SCALE_NAN),
            codes: [0; BLOCK],
            qdq: [f32::NAN; BLOCK],
        };
    }
    let byte = e as u8;
    let d = ggml_half(byte);
    let mut codes = [0u8; BLOCK];
    for (c, &v) in codes.iter_mut().zip(x) {
        let mut best = 0;
        let mut err = f32::INFINITY;
        for (i, &k) in KV.iter().enumerate() {
            let r = (d * k - v).abs();
            if r < err {
                err = r;
                best = i;
            }
        }
        *c = best as u8;
    }
    let mut qdq = [0f32; BLOCK];
    for (o, &c) in qdq.iter_mut().zip(&codes) {
        *o = d * KV[c as usize];
    }
    ProfileBlock {
        byte: Some(byte),
        codes,
        qdq,
    }
}

/// ggml-impl.h `ggml_e8m0_to_fp32_half`: 2^(x - 128), the subnormal bit pattern for x < 2.
fn ggml_half(x: u8) -> f32 {
    if x < 2 {
        f32::from_bits(0x0020_0000 << x)
    } else {
        f32::from_bits((x as u32 - 1) << 23)
    }
}
