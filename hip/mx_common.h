// mx_common.h: exact MX element encode/decode and E8M0 scales in integer arithmetic on fp32 bit
// patterns (NUMERICS.md 5). A line-for-line port of shaders/mx_common.wgsl (the CPU twin is
// src/format/{scale,codec,tensor}.rs): the same bits come out on every GPU whatever its float
// modes (subnormal flushing, rounding), because no float operation is involved.
#pragma once
#include "mx_formats.h"

#define MX_NAN 0x7FC00000u

// floor(log2(a)) of a positive finite f32 given as bits (normal or subnormal).
MX_DEVICE i32 mx_floor_log2(u32 b) {
  u32 e = (b >> 23) & 0xFFu;
  if (e == 0u) return (31 - (i32)clz32(b & 0x7FFFFFu)) - 149;
  return (i32)e - 127;
}

// ceil(log2(a)) of a positive finite f32 given as bits.
MX_DEVICE i32 mx_ceil_log2(u32 b) {
  u32 e = (b >> 23) & 0xFFu;
  u32 m = b & 0x7FFFFFu;
  if (e == 0u) return mx_floor_log2(b) + ((m & (m - 1u)) != 0u ? 1 : 0);
  return (i32)e - 127 + (m != 0u ? 1 : 0);
}

// RCeil (NUMERICS.md 5.2): the smallest s with 2^s * max_normal >= amax, exactly.
MX_DEVICE i32 mx_rceil_s(u32 a, MxSpec sp) {
  i32 l = mx_floor_log2(a);
  u32 ma = a & 0x7FFFFFu;
  if ((a >> 23) != 0u) ma |= 0x800000u;
  else ma = ma << (clz32(ma) - 8u);
  return l - sp.emax + (ma > sp.max_mant ? 1 : 0);
}

// The E8M0 scale byte of a block whose largest magnitude is `amax` (bits, sign ignored).
MX_DEVICE u32 mx_scale_byte(u32 f, u32 mode, u32 amax) {
  u32 a = amax & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return 255u;
  if (a == 0u) return 0u;
  MxSpec sp = mx_spec(f);
  i32 s;
  if (mode == SCALE_FLOOR) {
    s = mx_floor_log2(a) - sp.emax;
  } else if (mode == SCALE_CEIL) {
    s = mx_ceil_log2(a) - sp.emax;
  } else if (mode == SCALE_EVEN) {
    // Quark even_round: (bits + (1 << (22 - mbits))) & 0xFF800000, then the exponent.
    u32 r = (a + (1u << (22u - sp.even_mbits))) & 0xFF800000u;
    i32 er = (i32)(r >> 23);
    s = er == 0 ? mx_floor_log2(a) - sp.emax : er - 127 - sp.emax;
  } else {
    s = mx_rceil_s(a, sp);
  }
  return (u32)(imin(imax(s, -127), 127) + 127);
}

// Right shift with round to nearest even (a negative shift is a left shift, capped so that the
// result saturates in the caller). m < 2^24.
MX_DEVICE u32 mx_shift_rne(u32 m, i32 shift) {
  if (shift >= 0) {
    if (shift >= 8) return 0xFFFFFFu;
    return m << (u32)shift;
  }
  u32 r = (u32)(-shift);
  if (r >= 25u) return 0u;
  u32 q = m >> r;
  u32 rem = m & ((1u << r) - 1u);
  u32 half = 1u << (r - 1u);
  if (rem > half || (rem == half && (q & 1u) == 1u)) return q + 1u;
  return q;
}

// Encode one finite fp32 (bits) with block scale exponent s = byte - 127: RNE, saturate, keep
// subnormals and the sign of zero (MXINT8 has no -0). Callers handle NaN/Inf blocks.
MX_DEVICE u32 mx_encode(u32 f, u32 bits, i32 s) {
  MxSpec sp = mx_spec(f);
  bool neg = (bits >> 31) == 1u;
  u32 ab = bits & 0x7FFFFFFFu;
  u32 ex = ab >> 23;
  u32 m = ab & 0x7FFFFFu;
  i32 e = -149;
  if (ex != 0u) {
    m |= 0x800000u;
    e = (i32)ex - 150;
  }
  if (sp.is_int == 1u) {
    u32 n = 0u;
    if (m != 0u) n = umin(mx_shift_rne(m, e - s + 6), 127u);
    return neg ? (256u - n) & 0xFFu : n;
  }
  u32 sign = neg ? sp.sign_bit : 0u;
  if (m == 0u) return sign;
  i32 emin = 1 - sp.bias;
  i32 p = imax((31 - (i32)clz32(m)) + e - s, emin);
  i32 t = p - (i32)sp.mbits;
  u32 n = mx_shift_rne(m, e - s - t);
  u32 code = umin(((u32)(p - emin) << sp.mbits) + n, sp.max_code);
  return code | sign;
}

// decode(code) * 2^(byte-127) as exact f32 bits (byte 255 -> NaN; byte 0 -> 2^-127).
MX_DEVICE u32 mx_dequant_bits(u32 f, u32 code, u32 byte) {
  if (byte == 255u) return MX_NAN;
  MxSpec sp = mx_spec(f);
  bool neg;
  u32 n;
  i32 ex;
  if (sp.is_int == 1u) {
    i32 v = ((i32)(code << 24)) >> 24;
    neg = v < 0;
    n = (u32)(v < 0 ? -v : v);
    ex = -6;
  } else {
    u32 c = code & ((1u << sp.code_bits) - 1u);
    neg = (c & sp.sign_bit) != 0u;
    u32 mag = c & (sp.sign_bit - 1u);
    u32 mmask = (1u << sp.mbits) - 1u;
    u32 be = mag >> sp.mbits;
    u32 mant = mag & mmask;
    u32 emaxf = (1u << sp.ebits) - 1u;
    if (sp.nan_kind == 1u && be == emaxf && mant == mmask) return MX_NAN;
    if (sp.nan_kind == 2u && be == emaxf) {
      if (mant == 0u) return neg ? 0xFF800000u : 0x7F800000u;
      return MX_NAN;
    }
    if (be == 0u) {
      n = mant;
      ex = 1 - sp.bias - (i32)sp.mbits;
    } else {
      n = mant | (1u << sp.mbits);
      ex = (i32)be - sp.bias - (i32)sp.mbits;
    }
  }
  u32 sgn = neg ? 0x80000000u : 0u;
  if (n == 0u) return sgn;
  i32 k = ex + (i32)byte - 127;  // value = n * 2^k, n < 2^8
  i32 p = 31 - (i32)clz32(n);
  i32 lead = p + k;
  if (lead >= 128) return sgn | 0x7F800000u;
  if (lead >= -126) return sgn | ((u32)(lead + 127) << 23) | ((n << (u32)(23 - p)) & 0x7FFFFFu);
  i32 sh = k + 149;  // an fp32 subnormal, exact
  if (sh >= 0) return sgn | (n << (u32)sh);
  return sgn;
}

// Code `j` of a block held in words w[] of a little-endian bit stream of `cb`-bit fields.
MX_DEVICE u32 mx_code_at(u32 w0, u32 w1, u32 off, u32 cb) {
  u32 c = w0 >> off;
  if (off + cb > 32u) c |= w1 << (32u - off);
  return c & ((1u << cb) - 1u);
}

// The E8M0 scale as f32 (exact; 255 = NaN block, 0 = 2^-127).
MX_DEVICE float e8m0_value(u32 byte) {
  if (byte == 255u) return u2f(MX_NAN);
  if (byte == 0u) return u2f(0x00400000u);
  return u2f(byte << 23);
}

// Round to bf16 (RNE on the bits, NaN stays NaN): the `--intermediate bf16` points.
MX_DEVICE float bf16_round(float x) {
  u32 b = f2u(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return u2f((b | 0x00400000u) & 0xFFFF0000u);
  return u2f((b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u);
}
