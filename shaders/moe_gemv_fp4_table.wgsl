// moe_gemv_fp4_table.wgsl: the FP4 word decode of the GEMV through a byte table in workgroup
// memory (`fp4_byte_values`, filled by `load_tile`). Exact on every adapter; composed before
// moe_gemv.wgsl where the adapter lacks what moe_gemv_fp4_registers.wgsl needs.

// The values are exact (the block sums are multiplied by 1), from the table the tile loader
// fills.
const FP4_WORD_SCALE: f32 = 1.0;
const FP4_TABLE: bool = true;

// The 8 FP4 values of one packed word (elements 0..3 in .lo, 4..7 in .hi): two values per lookup.
fn decode_fp4_word(w: u32) -> Octet {
    return Octet(vec4<f32>(fp4_byte_values[w & 0xFFu], fp4_byte_values[(w >> 8u) & 0xFFu]),
                 vec4<f32>(fp4_byte_values[(w >> 16u) & 0xFFu], fp4_byte_values[w >> 24u]));
}
