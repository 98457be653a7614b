// moe_gemv_fp4_registers.wgsl: the FP4 word decode of the GEMV from bits in registers (no table
// lookups). Needs f16 conversions (`unpack2x16float`, wgpu's SHADER_F16_IN_F32) that keep f16
// subnormals; the host composes it before moe_gemv.wgsl only where `fp4_decode_check` passed
// (`Context::fp4_register_decode`), else moe_gemv_fp4_table.wgsl.

// An E2M1 code's 3 magnitude bits go to f16 bits 9..11 (exponent field e, mantissa top bit m)
// and its sign to bit 15, which makes an f16 equal to the E2M1 value times 2^-14 exactly (e >= 1:
// 2^(e-15) (1 + m/2); the subnormal code 0b001 lands on the f16 subnormal 2^-15); the exact
// conversion to f32 (unpack2x16float, two codes at a time) keeps that.

// The GEMV multiplies its block sums by this (decode_fp4_word gives the values times 2^-14:
// exact, products and sums scale by a power of two; only results under ~2^-112 could flush).
const FP4_WORD_SCALE: f32 = 16384.0;
// The GEMV needs no code table with this decode.
const FP4_TABLE: bool = false;

// The 8 FP4 values of one packed word times 2^-14 (elements 0..3 in .lo, 4..7 in .hi). Element
// k is nibble k (docs/NUMERICS.md 9.1), so the pairs (k, k + 4) sit at bits 4k and 4k + 16.
// Each pair is moved into place with two shifts of the whole word and one and/or (the masks keep
// only the bits that came from nibbles k and k + 4): magnitude bits 4k..4k+2 -> 9..11, sign
// 4k+3 -> 15 (and the same 16 bits higher).
fn decode_fp4_word(w: u32) -> Octet {
    let m = 0x0E000E00u;
    let sg = 0x80008000u;
    let p0 = unpack2x16float(((w << 9u) & m) | ((w << 12u) & sg));
    let p1 = unpack2x16float(((w << 5u) & m) | ((w << 8u) & sg));
    let p2 = unpack2x16float(((w << 1u) & m) | ((w << 4u) & sg));
    let p3 = unpack2x16float(((w >> 3u) & m) | (w & sg));
    return Octet(vec4<f32>(p0.x, p1.x, p2.x, p3.x), vec4<f32>(p0.y, p1.y, p2.y, p3.y));
}

// Self-check on this adapter (run once per device): out_bits[c] = the f32 bits of E2M1 code c
// (c < 16) as decode_fp4_word gives it in all 8 nibbles of a word (0xFFFFFFFF when the nibbles
// disagree). An adapter that flushes f16 subnormals gets code 1 wrong (0, not 0.5) and keeps the
// table decode.
@compute @workgroup_size(16)
fn fp4_decode_check(@builtin(local_invocation_index) lid: u32) {
    let o = decode_fp4_word(lid * 0x11111111u);
    let b = bitcast<u32>(o.lo.x);
    let same = all(bitcast<vec4<u32>>(o.lo) == vec4<u32>(b))
        && all(bitcast<vec4<u32>>(o.hi) == vec4<u32>(b));
    out_bits[lid] = select(0xFFFFFFFFu, bitcast<u32>(o.lo.x * FP4_WORD_SCALE), same);
}
