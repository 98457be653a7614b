// mx_common.wgsl: exact MX element encode/decode and E8M0 scales, in integer arithmetic on
// fp32 bit patterns (NUMERICS.md; the CPU twin is src/format/{scale,codec,tensor}.rs).
//
// Composed in front of the quant and MoE shaders at load time, after a generated preamble that
// defines the ids (FMT_*, SCALE_*), `struct MxSpec` and `fn mx_spec(f: u32) -> MxSpec` from the
// Rust format table (src/backend/wgpu/source.rs), so the formats are defined in exactly one place.
//
// Why integers: WGSL lets an implementation flush f32 subnormals and does not pin float rounding
// modes, so |x|, the block max, the scale byte, encoding, decoding and the scale multiply are
// all done on `u32` bit patterns; the same bits then come out on every adapter.
//
// Packing (NUMERICS.md 9): codes form a little-endian bit stream of `code_bits`-wide fields
// (FP4: element 2i in the low nibble of byte i; FP6: w = v0 | v1<<6 | v2<<12 | v3<<18), so a
// 32-element block is exactly `code_bits` u32 words.

const MX_NAN: u32 = 0x7FC00000u;

// floor(log2(a)) of a positive finite f32 given as bits (normal or subnormal).
fn mx_floor_log2(b: u32) -> i32 {
    let e = (b >> 23u) & 0xFFu;
    if e == 0u {
        return (31 - i32(countLeadingZeros(b & 0x7FFFFFu))) - 149;
    }
    return i32(e) - 127;
}

// ceil(log2(a)) of a positive finite f32 given as bits.
fn mx_ceil_log2(b: u32) -> i32 {
    let e = (b >> 23u) & 0xFFu;
    let m = b & 0x7FFFFFu;
    if e == 0u {
        return mx_floor_log2(b) + select(0, 1, (m & (m - 1u)) != 0u);
    }
    return i32(e) - 127 + select(0, 1, m != 0u);
}

// RCeil (NUMERICS.md 5.2): the smallest s with 2^s * max_normal >= amax, decided exactly on
// integers. With L = floor(log2(amax)) and max = 1.f * 2^emax (max_normal's exponent is emax for
// every format), s = L - emax when amax's normalized significand <= max's, else L - emax + 1.
// `max_mant` is max's significand as a 24-bit integer (1.5 -> 0xC00000), exact: max has at most
// 7 significant bits.
fn mx_rceil_s(a: u32, sp: MxSpec) -> i32 {
    let l = mx_floor_log2(a);
    var ma = a & 0x7FFFFFu;
    if (a >> 23u) != 0u {
        ma = ma | 0x800000u;
    } else {
        ma = ma << (countLeadingZeros(ma) - 8u); // normalize a subnormal's significand
    }
    return l - sp.emax + select(0, 1, ma > sp.max_mant);
}

// The E8M0 scale byte of a block whose largest magnitude is `amax` (fp32 bits, sign ignored).
// mode: SCALE_FLOOR, SCALE_EVEN, SCALE_CEIL or SCALE_RCEIL. NaN/Inf -> 255, zero -> 0.
fn mx_scale_byte(f: u32, mode: u32, amax: u32) -> u32 {
    let a = amax & 0x7FFFFFFFu;
    if a >= 0x7F800000u {
        return 255u;
    }
    if a == 0u {
        return 0u;
    }
    let sp = mx_spec(f);
    var s: i32;
    if mode == SCALE_FLOOR {
        s = mx_floor_log2(a) - sp.emax;
    } else if mode == SCALE_CEIL {
        s = mx_ceil_log2(a) - sp.emax;
    } else if mode == SCALE_EVEN {
        // Quark even_round: (bits + (1 << (22 - mbits))) & 0xFF800000, then the exponent.
        let r = (a + (1u << (22u - sp.even_mbits))) & 0xFF800000u;
        let er = i32(r >> 23u);
        if er == 0 {
            s = mx_floor_log2(a) - sp.emax;
        } else {
            s = er - 127 - sp.emax;
        }
    } else {
        s = mx_rceil_s(a, sp);
    }
    return u32(clamp(s, -127, 127) + 127);
}

// Right shift with round to nearest even (a negative shift is a left shift, capped so that the
// result saturates in the caller). m < 2^24.
fn mx_shift_rne(m: u32, shift: i32) -> u32 {
    if shift >= 0 {
        if shift >= 8 {
            return 0xFFFFFFu;
        }
        return m << u32(shift);
    }
    let r = u32(-shift);
    if r >= 25u {
        return 0u;
    }
    let q = m >> r;
    let rem = m & ((1u << r) - 1u);
    let half = 1u << (r - 1u);
    if rem > half || (rem == half && (q & 1u) == 1u) {
        return q + 1u;
    }
    return q;
}

// Encode one finite fp32 (bits) with block scale exponent s = byte - 127: RNE, saturate, keep
// subnormals and the sign of zero (MXINT8 has no -0). Callers handle NaN/Inf blocks.
fn mx_encode(f: u32, bits: u32, s: i32) -> u32 {
    let sp = mx_spec(f);
    let neg = (bits >> 31u) == 1u;
    let ab = bits & 0x7FFFFFFFu;
    let ex = ab >> 23u;
    var m = ab & 0x7FFFFFu;
    var e = -149;
    if ex != 0u {
        m = m | 0x800000u;
        e = i32(ex) - 150;
    }
    if sp.is_int == 1u {
        var n = 0u;
        if m != 0u {
            n = min(mx_shift_rne(m, e - s + 6), 127u);
        }
        if neg {
            return (256u - n) & 0xFFu;
        }
        return n;
    }
    let sign = select(0u, sp.sign_bit, neg);
    if m == 0u {
        return sign;
    }
    let emin = 1 - sp.bias;
    let p = max((31 - i32(countLeadingZeros(m))) + e - s, emin);
    let t = p - i32(sp.mbits);
    let n = mx_shift_rne(m, e - s - t);
    let code = min((u32(p - emin) << sp.mbits) + n, sp.max_code);
    return code | sign;
}

// decode(code) * 2^(byte-127) as exact f32 bits (byte 255 -> NaN; byte 0 -> 2^-127).
fn mx_dequant_bits(f: u32, code: u32, byte: u32) -> u32 {
    if byte == 255u {
        return MX_NAN;
    }
    let sp = mx_spec(f);
    var neg: bool;
    var n: u32;
    var ex: i32;
    if sp.is_int == 1u {
        let v = i32(code << 24u) >> 24u;
        neg = v < 0;
        n = u32(abs(v));
        ex = -6;
    } else {
        let c = code & ((1u << sp.code_bits) - 1u);
        neg = (c & sp.sign_bit) != 0u;
        let mag = c & (sp.sign_bit - 1u);
        let mmask = (1u << sp.mbits) - 1u;
        let be = mag >> sp.mbits;
        let mant = mag & mmask;
        let emaxf = (1u << sp.ebits) - 1u;
        if sp.nan_kind == 1u && be == emaxf && mant == mmask {
            return MX_NAN;
        }
        if sp.nan_kind == 2u && be == emaxf {
            if mant == 0u {
                return select(0x7F800000u, 0xFF800000u, neg);
            }
            return MX_NAN;
        }
        if be == 0u {
            n = mant;
            ex = 1 - sp.bias - i32(sp.mbits);
        } else {
            n = mant | (1u << sp.mbits);
            ex = i32(be) - sp.bias - i32(sp.mbits);
        }
    }
    let sgn = select(0u, 0x80000000u, neg);
    if n == 0u {
        return sgn;
    }
    let k = ex + i32(byte) - 127; // value = n * 2^k, n < 2^8
    let p = 31 - i32(countLeadingZeros(n));
    let lead = p + k;
    if lead >= 128 {
        return sgn | 0x7F800000u;
    }
    if lead >= -126 {
        return sgn | (u32(lead + 127) << 23u) | ((n << u32(23 - p)) & 0x7FFFFFu);
    }
    // An fp32 subnormal: exact, since every format's smallest step times 2^-127 is >= 2^-149.
    let sh = k + 149;
    if sh >= 0 {
        return sgn | (n << u32(sh));
    }
    return sgn;
}

// Code j (0..31) of the block whose first word is `base` in a packed bit stream, read through
// a word loader (so the same helper serves every binding).
fn mx_code_at(w0: u32, w1: u32, off: u32, code_bits: u32) -> u32 {
    var c = w0 >> off;
    if off + code_bits > 32u {
        c = c | (w1 << (32u - off));
    }
    return c & ((1u << code_bits) - 1u);
}

// Pack word `w` (0..code_bits-1) of a block from its 32 codes held in `codes` (a workgroup array
// view passed as 32 values through a function is not possible in WGSL, so callers loop; this
// helper gives the range of codes and the shift of code j within word w).
fn mx_pack_shift(j: u32, w: u32, code_bits: u32, c: u32) -> u32 {
    let bp = i32(j * code_bits) - i32(32u * w);
    if bp >= 0 {
        return c << u32(bp);
    }
    return c >> u32(-bp);
}
