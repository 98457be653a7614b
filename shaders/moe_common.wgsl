// moe_common.wgsl: what every MoE pass shares (ARCHITECTURE.md "MoE forward dataflow").
//
// The MoE layer after routing runs as four passes, each its own shader composed as
// `preamble + mx_common.wgsl + moe_common.wgsl + moe_<pass>.wgsl` (src/backend/wgpu/source.rs):
//
//   moe_lists.wgsl    expert histogram + prefix sum -> per-expert row lists and a tile list
//   moe_gemm.wgsl     prefill: grouped GEMM over tiles of one expert's rows, weights dequantized
//                     in the prologue; gemm1 fuses bias, activation and the intermediate QDQ,
//                     gemm2 bias and the router weight
//   moe_gemv.wgsl     decode (few rows per expert): grouped GEMV, lanes along K, the same
//                     epilogues
//   moe_combine.wgsl  per (token, h): the sum over the k slots in slot order (no float atomics);
//                     up to 16 tokens gemv2 does it itself (GEMV_FUSE_COMBINE in moe_gemv.wgsl)
//
// Here: the pipeline constants, the parameter block and the one binding table of all passes
// (each pipeline's layout holds the bindings its entry point uses), the tile a workgroup works
// on, weight decoding (code table x E8M0 scale) and the epilogue helpers shared by GEMM and GEMV.
//
// Rows: a "pair" is a (token, slot) of the routing, index token * top_k + slot; `lists` sorts
// the pairs by local expert into rows, so an expert's rows are contiguous. Weights may be split
// into chunks of whole experts (binding-size limits): the GEMM and GEMV passes read them through
// moe_weights_one.wgsl (one chunk per dispatch: the passes run once per chunk) or
// moe_weights_multi.wgsl (up to four chunks per dispatch), and skip tiles whose expert lies
// outside the dispatch's [e0, e1).

// Fixed per pipeline; the ids (FMT_*, SCALE_*, ACT_*) come from the generated preamble.
override WEIGHT_FMT: u32 = FMT_MXFP4;      // weight MxFormat
override ACT_FMT: u32 = FMT_NONE;          // activation MxFormat; FMT_NONE = weight-only (no QDQ)
override ACT_SCALE_MODE: u32 = SCALE_EVEN; // activation ScaleMode
// ACT_SILU: gate rows [0, I), up rows [I, 2I); ACT_SWIGLUOAI: interleaved (gate even, up odd).
override ACTIVATION: u32 = ACT_SILU;
override ROUND_BF16: u32 = 0u; // 1: round to bf16 where vLLM does (Intermediate::Bf16)

struct MoeParams {
    m: u32, // tokens
    top_k: u32,
    hidden: u32,
    inter: u32,
    n_experts: u32,
    e_local: u32,
    has_map: u32,
    has_bias13: u32,
    has_bias2: u32,
    on_input: u32,
    e0: u32, // this dispatch's local experts: [e0, e1)
    e1: u32,
    chunk_experts: u32, // experts per weight chunk (moe_weights_multi.wgsl)
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> params: MoeParams;
@group(0) @binding(1) var<storage, read> topk_ids: array<i32>;
@group(0) @binding(2) var<storage, read> expert_map: array<i32>;
// pair_of_row: row -> pair; row_of_pair: pair -> row (-1: an expert of another rank);
// tiles: [count, (expert, first row, end row) per tile]; x_in / out_bits: the pass's input rows
// and output (f32 bits); 7 and 8 (and 13, their vec4 view): the weights, declared in
// moe_weights_one.wgsl / moe_weights_multi.wgsl; expert_bias: w13_bias or w2_bias; topk_weights: the router weight of each pair;
// expert_out: gemm2's rows (combine).
@group(0) @binding(3) var<storage, read_write> pair_of_row: array<u32>;
@group(0) @binding(4) var<storage, read_write> row_of_pair: array<i32>;
@group(0) @binding(5) var<storage, read_write> tiles: array<u32>;
@group(0) @binding(6) var<storage, read> x_in: array<f32>;
@group(0) @binding(9) var<storage, read_write> out_bits: array<u32>;
@group(0) @binding(10) var<storage, read> expert_bias: array<f32>;
@group(0) @binding(11) var<storage, read> topk_weights: array<f32>;
@group(0) @binding(12) var<storage, read> expert_out: array<f32>;
// The FP4 GEMV's vec4 view of the activations (6), x as vec4 loads (13, the weights' vec4 view,
// is in the weights file).
@group(0) @binding(14) var<storage, read> x_in_vec4: array<vec4<f32>>;
// gemv2 with the combine fused (GEMV_FUSE_COMBINE in moe_gemv.wgsl): the MoE output [M, H]
// (f32 bits, what combine writes) and one arrival counter per 64-column slice (zeroed by the
// host before the forward, reset by the slice's last workgroup).
@group(0) @binding(15) var<storage, read_write> fc_out: array<u32>;
@group(0) @binding(16) var<storage, read_write> fc_count: array<atomic<u32>>;

var<workgroup> tile_desc: vec4<u32>; // load_tile: (expert, start, end, valid)
var<workgroup> code_value: array<f32, 256>; // the value of every weight code (scale 1), exact
var<workgroup> fp4_byte_values: array<vec2<f32>, 256>; // FP4 byte -> (low, high nibble value)
var<workgroup> block_amax: array<atomic<u32>, 128>; // gemm1: [64 rows][2 blocks]; gemv1: [8 rows]

// Round to bf16 (RNE on the bits, NaN stays NaN) when ROUND_BF16 is set; identity otherwise.
fn bf16_point(x: f32) -> f32 {
    if ROUND_BF16 == 0u {
        return x;
    }
    let b = bitcast<u32>(x);
    if (b & 0x7FFFFFFFu) > 0x7F800000u {
        return bitcast<f32>((b | 0x00400000u) & 0xFFFF0000u);
    }
    return bitcast<f32>((b + 0x7FFFu + ((b >> 16u) & 1u)) & 0xFFFF0000u);
}

// The weight's E8M0 scale as f32 (exact; 255 = NaN block).
fn e8m0_value(byte: u32) -> f32 {
    if byte == 255u {
        return bitcast<f32>(MX_NAN);
    }
    if byte == 0u {
        return bitcast<f32>(0x00400000u);
    }
    return bitcast<f32>(byte << 23u);
}

// The tile of this workgroup, uniformly: (expert, start, end, valid). Also fills the weight
// code table (the barrier inside workgroupUniformLoad publishes it).
fn load_tile(lid: u32, slot: u32) -> vec4<u32> {
    code_value[lid] = bitcast<f32>(mx_dequant_bits(WEIGHT_FMT, lid, 127u));
    fp4_byte_values[lid] = vec2<f32>(
        bitcast<f32>(mx_dequant_bits(WEIGHT_FMT, lid & 15u, 127u)),
        bitcast<f32>(mx_dequant_bits(WEIGHT_FMT, lid >> 4u, 127u)),
    );
    if lid == 0u {
        var t = vec4<u32>(0u, 0u, 0u, 0u);
        if slot < tiles[0] {
            t = vec4<u32>(tiles[1u + 3u * slot], tiles[2u + 3u * slot], tiles[3u + 3u * slot], 1u);
        }
        tile_desc = t;
    }
    return workgroupUniformLoad(&tile_desc);
}

// The code at bit `bit` (< 96) of the three words w0, w1, w2 (a little-endian bit stream).
fn code_in_3_words(w0: u32, w1: u32, w2: u32, bit: u32, cb: u32) -> u32 {
    if bit < 32u {
        return mx_code_at(w0, w1, bit, cb);
    }
    if bit < 64u {
        return mx_code_at(w1, w2, bit - 32u, cb);
    }
    return mx_code_at(w2, 0u, bit - 64u, cb);
}

// The activation of one (gate, up) pair: silu(g) u, or gpt-oss SwiGLU (clamps, 1.702, l + 1).
fn activate(g: f32, u: f32) -> f32 {
    if ACTIVATION == ACT_SILU {
        return g / (1.0 + exp(-g)) * u;
    }
    let gc = min(g, 7.0);
    let lc = clamp(u, -7.0, 7.0);
    return gc / (1.0 + exp(-1.702 * gc)) * (lc + 1.0);
}

// The intermediate QDQ of one fp32 (bits) whose 32-block has scale byte `byte`
// (shared by the gemm1 and gemv1 epilogues; 0xFF = NaN/Inf block -> NaN).
fn intermediate_qdq(val: u32, byte: u32) -> u32 {
    var code = 0u;
    if byte != 255u {
        code = mx_encode(ACT_FMT, val, i32(byte) - 127);
    }
    return mx_dequant_bits(ACT_FMT, code, byte);
}

// The 8 unscaled weight values of elements el0..el0+7 of the block starting at word wb.
struct Octet {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

// The 8 unscaled code values of elements el0..el0+7 of the block at word wb through the code
// table (every format; FP6 / FP8 / INT8: 8 codes span 48 or 64 bits, at most three words).
// decode_weight_octet's path for every format but FP4; kernel k64's for all when FP4 is not
// decoded in registers (no reference to the FP4 byte table).
fn weight_octet_table(wb: u32, el0: u32) -> Octet {
    let cb = mx_spec(WEIGHT_FMT).code_bits;
    let bit0 = el0 * cb;
    let wi = wb + bit0 / 32u;
    let b0 = bit0 % 32u;
    let end = b0 + 8u * cb;
    let w0 = w_word(wi);
    var w1 = 0u;
    var w2 = 0u;
    if end > 32u {
        w1 = w_word(wi + 1u);
    }
    if end > 64u {
        w2 = w_word(wi + 2u);
    }
    return Octet(
        vec4<f32>(
            code_value[code_in_3_words(w0, w1, w2, b0, cb)],
            code_value[code_in_3_words(w0, w1, w2, b0 + cb, cb)],
            code_value[code_in_3_words(w0, w1, w2, b0 + 2u * cb, cb)],
            code_value[code_in_3_words(w0, w1, w2, b0 + 3u * cb, cb)],
        ),
        vec4<f32>(
            code_value[code_in_3_words(w0, w1, w2, b0 + 4u * cb, cb)],
            code_value[code_in_3_words(w0, w1, w2, b0 + 5u * cb, cb)],
            code_value[code_in_3_words(w0, w1, w2, b0 + 6u * cb, cb)],
            code_value[code_in_3_words(w0, w1, w2, b0 + 7u * cb, cb)],
        ),
    );
}

fn decode_weight_octet(wb: u32, el0: u32) -> Octet {
    let cb = mx_spec(WEIGHT_FMT).code_bits;
    if cb == 4u {
        // FP4: one word = 8 codes; a byte-indexed table gives two values per load.
        let wv = w_word(wb + el0 / 8u);
        let p0 = fp4_byte_values[wv & 0xFFu];
        let p1 = fp4_byte_values[(wv >> 8u) & 0xFFu];
        let p2 = fp4_byte_values[(wv >> 16u) & 0xFFu];
        let p3 = fp4_byte_values[wv >> 24u];
        return Octet(vec4<f32>(p0, p1), vec4<f32>(p2, p3));
    }
    return weight_octet_table(wb, el0);
}

