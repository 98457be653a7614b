// moe_weights_multi.wgsl: the expert passes' weights over up to four chunks in one dispatch (the
// interface of moe_weights_one.wgsl). A layer whose weights exceed one storage binding is
// uploaded as chunks of params.chunk_experts whole experts (the last may hold fewer); without
// this file each chunk costs its own dispatch of every expert pass, and at decode sizes a pass's
// time is latency, not bytes, so two chunks cost two whole passes. Here chunk c of the
// dispatch's group (experts params.e0 .. params.e1) is bound at binding 7 / 8 / 13 for c = 0 and
// 22 + 3 (c - 1) + (0 codes, 1 scales, 2 codes vec4) for c = 1..3, and the loads pick the chunk
// of the tile's expert. WGSL has binding arrays only behind a native-only feature, hence four
// fixed sets and a branch per load; the branch is on a value that is the same in a whole
// workgroup (the tile's expert), so it never diverges.
//
// W_CHUNKS (2..4): how many chunk sets the host binds with distinct chunks (the others repeat
// the last chunk and are never read); the branches on it fold away when the pipeline is built.
// The bindings of all four sets are in the pipeline's layout whatever W_CHUNKS is (wgpu derives
// the layout before overrides are applied).

override W_CHUNKS: u32 = 4u;

@group(0) @binding(7) var<storage, read> w_codes: array<u32>;
@group(0) @binding(8) var<storage, read> w_scales: array<u32>;
@group(0) @binding(13) var<storage, read> w_codes_vec4: array<vec4<u32>>;
@group(0) @binding(22) var<storage, read> w_codes_1: array<u32>;
@group(0) @binding(23) var<storage, read> w_scales_1: array<u32>;
@group(0) @binding(24) var<storage, read> w_codes_vec4_1: array<vec4<u32>>;
@group(0) @binding(25) var<storage, read> w_codes_2: array<u32>;
@group(0) @binding(26) var<storage, read> w_scales_2: array<u32>;
@group(0) @binding(27) var<storage, read> w_codes_vec4_2: array<vec4<u32>>;
@group(0) @binding(28) var<storage, read> w_codes_3: array<u32>;
@group(0) @binding(29) var<storage, read> w_scales_3: array<u32>;
@group(0) @binding(30) var<storage, read> w_codes_vec4_3: array<vec4<u32>>;

// The chunk the loads read (set by w_use_expert).
var<private> w_chunk: u32;

// Select local expert `e`'s chunk (e in [params.e0, params.e1)) and return its index inside the
// chunk.
fn w_use_expert(e: u32) -> u32 {
    let l = e - params.e0;
    let c = min(l / params.chunk_experts, W_CHUNKS - 1u);
    w_chunk = c;
    return l - c * params.chunk_experts;
}

fn w_word(i: u32) -> u32 {
    if w_chunk == 0u {
        return w_codes[i];
    }
    if W_CHUNKS == 2u || w_chunk == 1u {
        return w_codes_1[i];
    }
    if W_CHUNKS == 3u || w_chunk == 2u {
        return w_codes_2[i];
    }
    return w_codes_3[i];
}

fn w_word4(i: u32) -> vec4<u32> {
    if w_chunk == 0u {
        return w_codes_vec4[i];
    }
    if W_CHUNKS == 2u || w_chunk == 1u {
        return w_codes_vec4_1[i];
    }
    if W_CHUNKS == 3u || w_chunk == 2u {
        return w_codes_vec4_2[i];
    }
    return w_codes_vec4_3[i];
}

fn w_scale_word(i: u32) -> u32 {
    if w_chunk == 0u {
        return w_scales[i];
    }
    if W_CHUNKS == 2u || w_chunk == 1u {
        return w_scales_1[i];
    }
    if W_CHUNKS == 3u || w_chunk == 2u {
        return w_scales_2[i];
    }
    return w_scales_3[i];
}
