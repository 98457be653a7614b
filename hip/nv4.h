// nv4.h: the NVIDIA layout of MXFP4 code words, which the matrix-core GEMV (gemv_mma.h) and GEMM
// (gemm_mma.h) decode. A layer's MXFP4 codes are rearranged once on the device (mx_nv4_repack,
// src/backend/hip/layer.rs prepare) when the NVIDIA device will run only those kernels on them
// (src/backend/hip/choice/layout.rs nv4_layout).
//
// Both kernels turn codes i and i + 4 (i < 4) of a 32-bit word (8 codes, code j at bits 4j ..
// 4j + 3 in the stored MXFP4 layout, sign in the code's bit 3) into one bf16x2 register: sign to
// bf16 bit 15 / 31, the three magnitude bits to bits 8..6 / 24..22, which is the E2M1 value times
// 2^-126 (NUMERICS.md 10.3; the scale multiply follows). In the stored layout a code's sign sits
// next to its magnitude, 6 bits closer than bf16 wants: two shifts and two masks per register
// (about 5 instructions with the multiply). nv4 places the bits so that registers 0, 1 and 2 are
// the word shifted left by 0, 3 and 6 under one mask (0x81C081C0), and register 3 takes three
// shifts: per word 11 logic instructions instead of ~16. Per 16-bit half (the same in both):
//   code 0 (4): sign 15, magnitude 8..6       code 1 (5): sign 12, magnitude 5..3
//   code 2 (6): sign 9, magnitude 2..0        code 3 (7): sign 10, magnitude bits 2, 1 at 14, 13,
//                                                          bit 0 at 11
// Every bit of the word is used once (a bijection; the CPU emulation of the GEMV and
// src/backend/hip/mma_layout.rs check decode(nv4_word(w)) against the E2M1 table).
#pragma once

// The stored word w (codes 0..7) in the nv4 layout.
MX_DEVICE u32 nv4_word(u32 w) {
  return ((w & 0x00080008u) << 12)    // code 0 sign: 3 -> 15
         | ((w & 0x00070007u) << 6)   // code 0 magnitude: 2..0 -> 8..6
         | ((w & 0x00800080u) << 5)   // code 1 sign: 7 -> 12
         | ((w & 0x00700070u) >> 1)   // code 1 magnitude: 6..4 -> 5..3
         | ((w & 0x08000800u) >> 2)   // code 2 sign: 11 -> 9
         | ((w & 0x07000700u) >> 8)   // code 2 magnitude: 10..8 -> 2..0
         | ((w & 0x80008000u) >> 5)   // code 3 sign: 15 -> 10
         | (w & 0x60006000u)          // code 3 magnitude bits 2, 1: 14, 13 stay
         | ((w & 0x10001000u) >> 1);  // code 3 magnitude bit 0: 12 -> 11
}

// Codes j and j + 4 of the nv4 word v as bf16x2 (low half: code j), value x 2^-126.
MX_DEVICE u32 nv4_pair(u32 v, u32 j) {
  if (j < 3u) return (v << (3u * j)) & 0x81C081C0u;
  return ((v >> 6) & 0x01800180u) | ((v >> 5) & 0x00400040u) | ((v << 5) & 0x80008000u);
}

// Where a 32-block's 16 code bytes (and its scale byte) sit in a layer's weight tensor on the
// NVIDIA matrix-core path, in units of 32-blocks from the tensor's start. Two row orders
// (MoeParams wrows, src/backend/hip/choice/layout.rs):
//   - stored (wrows 0): expert e, row r, block b at (e x nrows + r) x kblocks + b;
//   - rows (wrows 1, "nv4 rows"): the 16-row groups' 4-block steps contiguous, in the order
//     the GEMV and GEMM lanes take them (lane (g, t) of a warp loads rows g and g + 8 of a
//     16-row group, block 4s + t: gemv_mma.h, gemm_mma.h): [expert][row / 16][b / 4][row % 16]
//     [b % 4], rows padded to a multiple of 16 and blocks to one of 4 (mx_nv4_rows fills the
//     padding with zero codes and scale 127). A warp's 16-byte load of one half (rows g, 8 + g)
//     then reads 512 consecutive bytes (the stored order: 8 rows x 64 bytes, 8 lines), its scale
//     load 32 consecutive bytes (8 lines).
// off = row_off(r) + blk_off(b) within an expert whose first block is e x es: row_off(r) = (r / 16)
// x rg + (r % 16) x rr, blk_off(b) = (b / 4) x bq + b % 4 (stored: rg = 16 kblocks, rr =
// kblocks, bq = 4, es = nrows x kblocks; rows: rg = 64 S, rr = 4, bq = 64, es = 16 ceil(nrows /
// 16) x 4 S with S = ceil(kblocks / 4)).
struct Nv4Rows {
  u32 rg, rr, bq;
  u64 es;
};
MX_DEVICE Nv4Rows nv4_rows(u32 wrows, u32 nrows, u32 kblocks) {
  Nv4Rows l;
  if (wrows) {
    u32 s = (kblocks + 3u) / 4u;
    l.rg = 64u * s;
    l.rr = 4u;
    l.bq = 64u;
    l.es = (u64)((nrows + 15u) / 16u) * 64u * s;
  } else {
    l.rg = 16u * kblocks;
    l.rr = kblocks;
    l.bq = 4u;
    l.es = (u64)nrows * kblocks;
  }
  return l;
}
MX_DEVICE u32 nv4_row_off(const Nv4Rows& l, u32 r) { return (r >> 4) * l.rg + (r & 15u) * l.rr; }
MX_DEVICE u32 nv4_blk_off(const Nv4Rows& l, u32 b) { return (b >> 2) * l.bq + (b & 3u); }
