// moe_gemv_fp4_registers.wgsl: the FP4 word decode of the GEMV from bits in registers (no table
// lookups). Needs f16 conversions (`unpack2x16float`, wgpu's SHADER_F16_IN_F32) that keep f16
// subnormals; the host composes it before moe_gemv.wgsl only where `fp4_decode_check` passed
// (`Context::fp4_register_decode`), else moe_gemv_fp4_table.wgsl.

// Two E2M1 codes (in bits 0..3 and 16..19 of t) as f16 bit patterns: the 3 magnitude bits go to
// f16 bits 9..11 (exponent field e, mantissa top bit m) and the sign to bit 15, which makes an f16
// equal to the E2M1 value times 2^-14 exactly (e >= 1: 2^(e-15) (1 + m/2); the subnormal code
// 0b001 lands on the f16 subnormal 2^-15). Times 2^14 after the exact conversion to f32.
fn fp4_pair_registers(t: u32) -> vec2<f32> {
    let bits = ((t & 0x00070007u) << 9u) | ((t & 0x00080008u) << 12u);
    return unpack2x16float(bits) * 16384.0;
}

// The GEMV multiplies its block sums by this (decode_fp4_word gives the values times 2^-14:
// exact, products and sums scale by a power of two; only results under ~2^-112 could flush).
const FP4_WORD_SCALE: f32 = 16384.0;
// The GEMV needs no code table with this decode.
const FP4_TABLE: bool = false;

// The two E2M1 codes of t (bits 0..3 and 16..19) times 2^-14 (fp4_pair_registers without the
// multiply).
fn fp4_pair_scaled(t: u32) -> vec2<f32> {
    return unpack2x16float(((t & 0x00070007u) << 9u) | ((t & 0x00080008u) << 12u));
}

// The 8 FP4 values of one packed word times 2^-14 (elements 0..3 in .lo, 4..7 in .hi). Element
// k is nibble k (docs/NUMERICS.md 9.1), so the pairs (k, k + 4) sit at bits 4k and 4k + 16.
fn decode_fp4_word(w: u32) -> Octet {
    let p0 = fp4_pair_scaled(w);
    let p1 = fp4_pair_scaled(w >> 4u);
    let p2 = fp4_pair_scaled(w >> 8u);
    let p3 = fp4_pair_scaled(w >> 12u);
    return Octet(vec4<f32>(p0.x, p1.x, p2.x, p3.x), vec4<f32>(p0.y, p1.y, p2.y, p3.y));
}

// Self-check on this adapter (run once per device): out_bits[c] = the f32 bits of E2M1 code c
// (c < 16) as decoded here. An adapter that flushes f16 subnormals gets code 1 wrong (0, not 0.5)
// and keeps the table decode.
@compute @workgroup_size(16)
fn fp4_decode_check(@builtin(local_invocation_index) lid: u32) {
    out_bits[lid] = bitcast<u32>(fp4_pair_registers(lid).x);
}
