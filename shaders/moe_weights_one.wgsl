// moe_weights_one.wgsl: the expert passes' weights in one binding set (moe_common.wgsl has the
// overview; moe_weights_multi.wgsl is the same interface over up to four chunks). Every weight
// load of the MoE shaders goes through these functions, so the two files are the only places
// that name the weight bindings.
//
// w_codes / w_scales: packed weight codes and E8M0 bytes (4 per word) of the dispatch's chunk;
// w_codes_vec4: the vec4 view of the same codes (one FP4 32-block per load).

@group(0) @binding(7) var<storage, read> w_codes: array<u32>;
@group(0) @binding(8) var<storage, read> w_scales: array<u32>;
@group(0) @binding(13) var<storage, read> w_codes_vec4: array<vec4<u32>>;

// Select local expert `e`'s weights (e in [params.e0, params.e1), workgroup-uniform: a tile's
// expert) and return its index inside the bound weights: the row offsets of the loads that
// follow are taken from it.
fn w_use_expert(e: u32) -> u32 {
    return e - params.e0;
}

// Word i of the selected codes.
fn w_word(i: u32) -> u32 {
    return w_codes[i];
}

// vec4 i (words 4i..4i+3) of the selected codes.
fn w_word4(i: u32) -> vec4<u32> {
    return w_codes_vec4[i];
}

// Word i (scale bytes 4i..4i+3) of the selected scales.
fn w_scale_word(i: u32) -> u32 {
    return w_scales[i];
}
