// exact_math.wgsl: float results that every adapter computes to the same bits as the CPU, from
// integer operations on fp32 bit patterns (integer ops are exact everywhere; WGSL's `exp` is not
// and its f32 division may be 2.5 ulp off).
//
//   exact_sigmoid   the sigmoid of src/moe/exact_math.rs, bit for bit (the definition, its
//                   accuracy and the constants SIG_* of the generated preamble live there)
//   exact_exp_neg   e^-|x| of the same file (softmax scores of a router with a correction bias)
//   exact_div       IEEE f32 division (round to nearest even) of positive numbers
//   add_ftz         a + b with subnormal operands and result flushed to zero, as the CPU does
//
// WGSL has no u64: 32 x 32-bit products are built from 16-bit halves, 64/32-bit divisions are
// restoring long divisions.

// The full 64-bit product a * b as (low word, high word).
fn mul64(a: u32, b: u32) -> vec2<u32> {
    let al = a & 0xFFFFu;
    let ah = a >> 16u;
    let bl = b & 0xFFFFu;
    let bh = b >> 16u;
    let ll = al * bl;
    let lh = al * bh;
    let hl = ah * bl;
    let mid = (ll >> 16u) + (lh & 0xFFFFu) + (hl & 0xFFFFu); // < 3 * 2^16
    let lo = (ll & 0xFFFFu) | (mid << 16u);
    let hi = ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
    return vec2<u32>(lo, hi);
}

// A significand quotient: num / den = mant * 2^(lead - 31), mant in [2^31, 2^32), sticky = the
// quotient has nonzero bits below mant.
struct Quotient {
    mant: u32,
    lead: i32,
    sticky: bool,
}

// num / den for den >= 2^31 and 1/4 < num / den < 2: an integer bit, then 32 fraction bits by
// restoring long division (a carry out of the doubled remainder means it exceeds den).
fn div_sig(num: u32, den: u32) -> Quotient {
    var rem = num;
    var int_bit = 0u;
    if rem >= den {
        rem = rem - den;
        int_bit = 1u;
    }
    var q = 0u;
    for (var i = 0u; i < 32u; i = i + 1u) {
        let carry = (rem >> 31u) != 0u;
        rem = rem << 1u;
        q = q << 1u;
        if carry || rem >= den {
            rem = rem - den;
            q = q | 1u;
        }
    }
    if int_bit != 0u {
        return Quotient(0x80000000u | (q >> 1u), 0, rem != 0u || (q & 1u) != 0u);
    }
    if (q >> 31u) != 0u {
        return Quotient(q, -1, rem != 0u);
    }
    return Quotient(q << 1u, -2, rem != 0u);
}

// mant * 2^(lead - 31) (plus `sticky`) rounded to the nearest f32 bits, ties to even,
// subnormals included, overflow to +Inf; positive.
fn round_to_f32(mant: u32, lead: i32, sticky: bool) -> u32 {
    var shift = 8u;
    var base = 0u; // biased exponent - 1: the significand's leading bit (and a carry) add into it
    if lead > 127 {
        return 0x7F800000u; // overflow: +Inf
    }
    if lead >= -126 {
        base = u32(lead + 126) << 23u;
    } else {
        let s = 8 - 126 - lead;
        if s > 32 {
            return 0u; // below 2^-150
        }
        shift = u32(s);
    }
    var kept = 0u;
    var round = false;
    var rest = sticky;
    if shift == 32u {
        round = (mant >> 31u) != 0u;
        rest = rest || (mant & 0x7FFFFFFFu) != 0u;
    } else {
        kept = mant >> shift;
        round = ((mant >> (shift - 1u)) & 1u) != 0u;
        rest = rest || (mant & ((1u << (shift - 1u)) - 1u)) != 0u;
    }
    let up = round && (rest || (kept & 1u) != 0u);
    return base + kept + select(0u, 1u, up);
}

// e^-a for 2^-33 <= a < 128 (a: the bits of a positive f32) as (m, n): e^-a = m 2^(-31 - n),
// m in (2^30, 2^31] (Q1.31), n = floor(a log2 e). src/moe/exact_math.rs::exp_neg_parts.
fn exp_neg_parts(a: u32) -> vec2<u32> {
    let e = a >> 23u;
    // y = a log2(e) in Q8.32: (significand x SIG_LOG2E_Q63) >> (181 - e), an 88-bit product
    // (w2:w1:w0); shifting (w2:w1) by s = 149 - e in [16, 55] drops w0.
    let sig = (a & 0x7FFFFFu) | 0x800000u;
    let p_lo = mul64(sig, SIG_LOG2E_Q63_LO);
    let p_hi = mul64(sig, SIG_LOG2E_Q63_HI);
    let w1 = p_lo.y + p_hi.x;
    let w2 = p_hi.y + select(0u, 1u, w1 < p_lo.y);
    let s = 149u - e;
    var n = 0u; // integer part of y
    var f: u32; // fraction of y (Q0.32)
    if s < 32u {
        f = (w1 >> s) | (w2 << (32u - s));
        n = w2 >> s;
    } else {
        f = w2 >> (s - 32u);
    }
    // 2^-f = 2^(-j/64) e^-z, z = r ln 2 < ln 2 / 64; 1 - e^-z by its Taylor polynomial, Q0.38.
    let j = f >> 26u;
    let r = f & 0x03FFFFFFu;
    let z = mul64(r << 6u, SIG_LN2_Q32).y; // Q0.38
    let z2 = mul64(z, z).y; // Q0.44
    let z3 = mul64(z2, z).y; // Q0.50
    let z4 = mul64(z3, z).y; // Q0.56
    let one_minus_exp = z - (z2 >> 7u) + ((z3 / 6u) >> 12u) - ((z4 / 24u) >> 18u);
    let t = SIG_EXP2_NEG_Q31[j];
    let m = t - ((mul64(t, one_minus_exp).y + 32u) >> 6u); // 2^-f in Q1.31, rounded
    return vec2<u32>(m, n);
}

// src/moe/exact_math.rs::sigmoid_bits, step for step.
fn exact_sigmoid(x: u32) -> u32 {
    let a = x & 0x7FFFFFFFu;
    let neg = (x >> 31u) != 0u;
    if a > 0x7F800000u {
        return 0x7FC00000u; // NaN
    }
    if a >= 0x43000000u {
        return select(0x3F800000u, 0u, neg); // |x| >= 128
    }
    if (a >> 23u) < 94u {
        return 0x3F000000u; // |x| < 2^-33
    }
    let mn = exp_neg_parts(a);
    let m = mn.x;
    let n = mn.y;
    // u = e^-|x| = m 2^(-31 - n); 1 + u in Q1.31 (u rounded to 2^-31).
    var u = 0u;
    if n < 32u {
        u = (m + ((1u << n) >> 1u)) >> n;
    }
    if u == 0x80000000u {
        return 0x3F000000u; // u = 1
    }
    var num = 0x80000000u; // x >= 0: 1 / (1 + u)
    if neg {
        num = m; // x < 0: u / (1 + u) = m / (1 + u) * 2^-n
    }
    var q = Quotient(0x80000000u, 0, false);
    let den = 0x80000000u + u;
    if num < den {
        q = div_sig(num, den);
    }
    var lead = q.lead;
    if neg {
        lead = lead - i32(n);
    }
    return round_to_f32(q.mant, lead, q.sticky);
}

// e^-|x| (bits in, bits out): src/moe/exact_math.rs::exp_neg_bits.
fn exact_exp_neg(x: u32) -> u32 {
    let a = x & 0x7FFFFFFFu;
    if a > 0x7F800000u {
        return 0x7FC00000u; // NaN
    }
    if a >= 0x43000000u {
        return 0u; // |x| >= 128
    }
    if (a >> 23u) < 94u {
        return 0x3F800000u; // |x| < 2^-33
    }
    let mn = exp_neg_parts(a);
    if mn.x == 0x80000000u {
        return round_to_f32(mn.x, -i32(mn.y), false);
    }
    return round_to_f32(mn.x << 1u, -1 - i32(mn.y), false);
}

// The significand (24 bits, leading one at bit 23) and unbiased exponent of a positive finite
// nonzero f32 (subnormals normalized).
fn f32_sig_exp(b: u32) -> vec2<i32> {
    let e = i32(b >> 23u);
    if e == 0 {
        let sh = countLeadingZeros(b) - 8u;
        return vec2<i32>(i32(b << sh), -126 - i32(sh));
    }
    return vec2<i32>(i32((b & 0x7FFFFFu) | 0x800000u), e - 127);
}

// a / b rounded to nearest even, for a >= 0 and b >= 0 finite (bits in, bits out): the f32
// division of the CPU (x / 0 = +Inf, 0 / 0 = NaN).
fn exact_div(a: u32, b: u32) -> u32 {
    if b == 0u {
        return select(0x7F800000u, 0x7FC00000u, a == 0u);
    }
    if a == 0u {
        return 0u;
    }
    let sa = f32_sig_exp(a);
    let sb = f32_sig_exp(b);
    let q = div_sig(u32(sa.x) << 8u, u32(sb.x) << 8u); // in (1/2, 2)
    return round_to_f32(q.mant, q.lead + sa.y - sb.y, q.sticky);
}

// x with a subnormal flushed to zero (sign kept), on the bits.
fn ftz_bits(b: u32) -> u32 {
    if (b & 0x7F800000u) == 0u {
        return b & 0x80000000u;
    }
    return b;
}

// src/moe/exact_math.rs::add_ftz: the correctly rounded f32 add on flushed operands, flushed.
fn add_ftz(a: u32, b: u32) -> f32 {
    let s = bitcast<f32>(ftz_bits(a)) + bitcast<f32>(ftz_bits(b));
    return bitcast<f32>(ftz_bits(bitcast<u32>(s)));
}
