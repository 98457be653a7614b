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
