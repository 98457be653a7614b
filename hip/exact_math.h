// exact_math.h: float results every GPU computes to the CPU's bits, from integer operations on
// fp32 bit patterns. A port of shaders/exact_math.wgsl (the definitions and their accuracy live
// in src/moe/exact_math.rs): exact_sigmoid, exact_exp_neg (e^-|x|), exact_div (IEEE division,
// round to nearest even) and add_ftz (a + b on flushed operands, flushed), as the CPU router.
// Here the 64-bit products are native u64 (WGSL has none).
#pragma once
#include "mx_formats.h"

struct Quotient {
  u32 mant;
  i32 lead;
  bool sticky;
};

MX_DEVICE u32 mulhi32(u32 a, u32 b) { return (u32)(((u64)a * (u64)b) >> 32); }

// num / den for den >= 2^31 and 1/4 < num / den < 2: mant * 2^(lead - 31), restoring division.
MX_DEVICE Quotient div_sig(u32 num, u32 den) {
  u32 rem = num;
  u32 int_bit = 0u;
  if (rem >= den) {
    rem -= den;
    int_bit = 1u;
  }
  u32 q = 0u;
  for (u32 i = 0u; i < 32u; ++i) {
    bool carry = (rem >> 31) != 0u;
    rem <<= 1;
    q <<= 1;
    if (carry || rem >= den) {
      rem -= den;
      q |= 1u;
    }
  }
  if (int_bit != 0u) return Quotient{0x80000000u | (q >> 1), 0, rem != 0u || (q & 1u) != 0u};
  if ((q >> 31) != 0u) return Quotient{q, -1, rem != 0u};
  return Quotient{q << 1, -2, rem != 0u};
}

// mant * 2^(lead - 31) (+ sticky) rounded to the nearest f32 bits, ties to even, subnormals
// included, overflow to +Inf; positive.
MX_DEVICE u32 round_to_f32(u32 mant, i32 lead, bool sticky) {
  u32 shift = 8u;
  u32 base = 0u;
  if (lead > 127) return 0x7F800000u;
  if (lead >= -126) {
    base = (u32)(lead + 126) << 23;
  } else {
    i32 s = 8 - 126 - lead;
    if (s > 32) return 0u;
    shift = (u32)s;
  }
  u32 kept = 0u;
  bool round, rest = sticky;
  if (shift == 32u) {
    round = (mant >> 31) != 0u;
    rest = rest || (mant & 0x7FFFFFFFu) != 0u;
  } else {
    kept = mant >> shift;
    round = ((mant >> (shift - 1u)) & 1u) != 0u;
    rest = rest || (mant & ((1u << (shift - 1u)) - 1u)) != 0u;
  }
  bool up = round && (rest || (kept & 1u) != 0u);
  return base + kept + (up ? 1u : 0u);
}

// e^-a for 2^-33 <= a < 128 (a: bits) as (m, n): e^-a = m 2^(-31 - n), m in (2^30, 2^31].
MX_DEVICE void exp_neg_parts(u32 a, u32* mo, u32* no) {
  u32 e = a >> 23;
  u32 sig = (a & 0x7FFFFFu) | 0x800000u;
  u64 p_lo = (u64)sig * SIG_LOG2E_Q63_LO;
  u64 p_hi = (u64)sig * SIG_LOG2E_Q63_HI;
  u32 lo_y = (u32)(p_lo >> 32);
  u32 w1 = lo_y + (u32)p_hi;
  u32 w2 = (u32)(p_hi >> 32) + (w1 < lo_y ? 1u : 0u);
  u32 s = 149u - e;
  u32 n = 0u, f;
  if (s < 32u) {
    f = (w1 >> s) | (s == 0u ? 0u : (w2 << (32u - s)));
    n = w2 >> s;
  } else {
    f = w2 >> (s - 32u);
  }
  u32 j = f >> 26;
  u32 r = f & 0x03FFFFFFu;
  u32 z = mulhi32(r << 6, SIG_LN2_Q32);
  u32 z2 = mulhi32(z, z);
  u32 z3 = mulhi32(z2, z);
  u32 z4 = mulhi32(z3, z);
  u32 one_minus_exp = z - (z2 >> 7) + ((z3 / 6u) >> 12) - ((z4 / 24u) >> 18);
  u32 t = SIG_EXP2_NEG_Q31[j];
  *mo = t - ((mulhi32(t, one_minus_exp) + 32u) >> 6);
  *no = n;
}

MX_DEVICE u32 exact_sigmoid(u32 x) {
  u32 a = x & 0x7FFFFFFFu;
  bool neg = (x >> 31) != 0u;
  if (a > 0x7F800000u) return 0x7FC00000u;
  if (a >= 0x43000000u) return neg ? 0u : 0x3F800000u;
  if ((a >> 23) < 94u) return 0x3F000000u;
  u32 m, n;
  exp_neg_parts(a, &m, &n);
  u32 u = 0u;
  if (n < 32u) u = (m + ((1u << n) >> 1)) >> n;
  if (u == 0x80000000u) return 0x3F000000u;
  u32 num = neg ? m : 0x80000000u;
  Quotient q{0x80000000u, 0, false};
  u32 den = 0x80000000u + u;
  if (num < den) q = div_sig(num, den);
  i32 lead = q.lead;
  if (neg) lead -= (i32)n;
  return round_to_f32(q.mant, lead, q.sticky);
}

MX_DEVICE u32 exact_exp_neg(u32 x) {
  u32 a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FC00000u;
  if (a >= 0x43000000u) return 0u;
  if ((a >> 23) < 94u) return 0x3F800000u;
  u32 m, n;
  exp_neg_parts(a, &m, &n);
  if (m == 0x80000000u) return round_to_f32(m, -(i32)n, false);
  return round_to_f32(m << 1, -1 - (i32)n, false);
}

// Significand (leading one at bit 23) and unbiased exponent of a positive finite nonzero f32.
MX_DEVICE void f32_sig_exp(u32 b, u32* sig, i32* ex) {
  i32 e = (i32)(b >> 23);
  if (e == 0) {
    u32 sh = clz32(b) - 8u;
    *sig = b << sh;
    *ex = -126 - (i32)sh;
    return;
  }
  *sig = (b & 0x7FFFFFu) | 0x800000u;
  *ex = e - 127;
}

// a / b rounded to nearest even for a, b >= 0 finite (x / 0 = +Inf, 0 / 0 = NaN).
MX_DEVICE u32 exact_div(u32 a, u32 b) {
  if (b == 0u) return a == 0u ? 0x7FC00000u : 0x7F800000u;
  if (a == 0u) return 0u;
  u32 sa, sb;
  i32 ea, eb;
  f32_sig_exp(a, &sa, &ea);
  f32_sig_exp(b, &sb, &eb);
  Quotient q = div_sig(sa << 8, sb << 8);
  return round_to_f32(q.mant, q.lead + ea - eb, q.sticky);
}

MX_DEVICE u32 ftz_bits(u32 b) { return (b & 0x7F800000u) == 0u ? (b & 0x80000000u) : b; }

// The correctly rounded f32 add on flushed operands, flushed (src/moe/exact_math.rs::add_ftz).
MX_DEVICE float add_ftz(u32 a, u32 b) {
  float s = u2f(ftz_bits(a)) + u2f(ftz_bits(b));
  return u2f(ftz_bits(f2u(s)));
}
