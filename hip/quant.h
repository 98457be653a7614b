// quant.h: the MX quantize / dequantize / QDQ kernels (mx_quantize, mx_dequantize, mx_qdq,
// mx_qdq_lanes) and qdq_lane, the per-lane QDQ that p8_fused.h reuses. Included first by
// hip/mxmoe.cu; relies on mx_common.h (scale bytes, encode / decode), mx_compat.h (umax,
// shuffles) and mxmoe.cu's u8.
#pragma once

// ------------------------------------------------------------------------------------------
// quantize / dequantize / QDQ (NUMERICS.md 5; shaders/quant.wgsl)

MX_DEVICE u32 block_amax(const u32* x) {
  u32 a = 0u;
  for (u32 j = 0; j < 32u; ++j) a = umax(a, x[j] & 0x7FFFFFFFu);
  return a;
}

// One thread per 32-block: scale byte, codes packed as a little-endian bit stream (code_bits
// words per block), scale bytes.
MX_KERNEL(256) void mx_quantize(const u32* x, u32* codes, u8* scales, u32 n_blocks,
                                          u32 fmt, u32 mode) {
  u32 b = bid_x() * 256u + tid_x();
  if (b >= n_blocks) return;
  const u32* xb = x + (u64)b * 32u;
  u32 byte = mx_scale_byte(fmt, mode, block_amax(xb));
  u32 cb = mx_spec(fmt).code_bits;
  u32 words[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (u32 j = 0; j < 32u; ++j) {
    u32 code = byte == 255u ? 0u : mx_encode(fmt, xb[j], (i32)byte - 127);
    u32 bit = j * cb, w = bit >> 5, off = bit & 31u;
    words[w] |= code << off;
    if (off + cb > 32u) words[w + 1] |= code >> (32u - off);
  }
  for (u32 w = 0; w < cb; ++w) codes[(u64)b * cb + w] = words[w];
  scales[b] = (u8)byte;
}

// One thread per element.
MX_KERNEL(256) void mx_dequantize(const u32* codes, const u8* scales, u32* out,
                                            u32 n_blocks, u32 fmt) {
  u64 idx = (u64)bid_x() * 256u + tid_x();
  if (idx >= (u64)n_blocks * 32u) return;
  u64 b = idx / 32u;
  u32 lane = (u32)(idx % 32u);
  u32 cb = mx_spec(fmt).code_bits;
  u32 bp = lane * cb;
  u64 w = b * cb + bp / 32u;
  u32 off = bp & 31u;
  u32 w1 = off + cb > 32u ? codes[w + 1] : 0u;
  out[idx] = mx_dequant_bits(fmt, mx_code_at(codes[w], w1, off, cb), scales[b]);
}

// One thread per 32-block: dequant(quant(x)).
MX_KERNEL(256) void mx_qdq(const u32* x, u32* out, u32 n_blocks, u32 fmt, u32 mode) {
  u32 b = bid_x() * 256u + tid_x();
  if (b >= n_blocks) return;
  const u32* xb = x + (u64)b * 32u;
  u32 byte = mx_scale_byte(fmt, mode, block_amax(xb));
  for (u32 j = 0; j < 32u; ++j) {
    u32 code = byte == 255u ? 0u : mx_encode(fmt, xb[j], (i32)byte - 127);
    out[(u64)b * 32u + j] = mx_dequant_bits(fmt, code, byte);
  }
}

// QDQ with one lane per element and 32 lanes per block (the MoE's input QDQ: a few tokens give
// too few blocks for a thread each): the block's largest magnitude by a butterfly over the
// lanes (the same bits as block_amax), then each lane's own element. Bit-exact as mx_qdq.
// Element i's QDQ'd bits, by the 32 lanes of its block together (every lane of the warp calls).
MX_DEVICE u32 qdq_lane(const u32* x, u64 i, u32 fmt, u32 mode) {
  u32 v = x[i];
  u32 a = v & 0x7FFFFFFFu;
  for (u32 m = 16u; m > 0u; m >>= 1) a = umax(a, f2u(shfl_xor(u2f(a), m)));
  u32 byte = mx_scale_byte(fmt, mode, a);
  u32 code = byte == 255u ? 0u : mx_encode(fmt, v, (i32)byte - 127);
  return mx_dequant_bits(fmt, code, byte);
}
MX_KERNEL(256) void mx_qdq_lanes(const u32* x, u32* out, u32 n_blocks, u32 fmt, u32 mode) {
  u64 i = (u64)bid_x() * 256u + tid_x();
  if (i / 32u >= n_blocks) return;  // whole 32-lane groups (n_blocks * 32 elements)
  out[i] = qdq_lane(x, i, fmt, mode);
}
