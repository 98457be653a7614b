// moe_gemv.wgsl: the decode expert passes, grouped GEMV (moe_common.wgsl has the overview).
//
//   gemv1  a tile of <= 4 rows (token-expert pairs) of one expert x 64 weight rows (the gate and
//          up rows of 32 intermediate columns); the gemm1 epilogue (bias, router weight on
//          input, activation, intermediate QDQ over the 32-column block)
//   gemv2  the same over W2 (64 output columns), the gemm2 epilogue (bias, router weight)
//
// A workgroup is GEMV_WROWS / GEMV_R lane groups of GEMV_LANES lanes: group g owns the weight
// rows g * GEMV_R .. + GEMV_R - 1 of the tile, its lanes run along K (lane l takes 32-blocks
// l, l + GEMV_LANES, ...: consecutive lanes read consecutive 16-byte blocks of a row, one
// coalesced vec4<u32> load per lane and row for FP4). x of a block is loaded once per lane and
// used for all GEMV_R rows. The lane sums of each row are reduced by gemv_reduce1/4, which live
// in moe_gemv_reduce_{subgroup,shared}.wgsl: subgroupAdd where the adapter has subgroups of
// exactly GEMV_LANES consecutive invocations (checked at start-up), else a workgroup-memory
// tree (GEMV_R = 8, GEMV_LANES = 32, 256 threads). The FP4 word decode is
// moe_gemv_fp4_{registers,table}.wgsl (FP4_WORD_SCALE: the registers decode gives the values
// times 2^-14, so block sums are multiplied back by 2^14 once, before the block scale).
// Each lane's block sums are scaled and accumulated in block order; rows never mix (the
// reductions' order is fixed per adapter, so results are deterministic).

const GEMV_TILE_ROWS: u32 = 4u; // rows (token-expert pairs) per GEMV tile
const GEMV_WROWS: u32 = 64u;    // weight rows per workgroup

override GEMV_R: u32 = 8u;         // weight rows per lane group: 1, 2, 4 or 8
override GEMV_LANES: u32 = 32u;    // lanes per group (along K)
override GEMV_THREADS: u32 = 256u; // (GEMV_WROWS / GEMV_R) * GEMV_LANES, set by the host

var<workgroup> row_sums: array<vec4<f32>, 64>; // [weight row of the tile] -> the tile's 4 rows
var<workgroup> ep_val: array<u32, 128>;        // gemv1 epilogue: [token][column] f32 bits

// Weight rows of the tile (in the expert) of tile row wr: gemv1 maps 64 rows to the gate and up
// rows of 32 intermediate columns starting at jb; gemv2 takes rows jb + wr.
fn gemv_weight_row(is1: bool, wr: u32, jb: u32, inter: u32) -> u32 {
    if !is1 {
        return jb + wr;
    }
    if ACTIVATION == ACT_SILU {
        return select(inter + jb + wr - 32u, jb + wr, wr < 32u);
    }
    return 2u * jb + wr;
}

// The first 32-block index ((rowbase + row) * kblocks) of tile row wr; rows past the matrix
// (gemv2's last tile when H % 64 != 0) read the last row and are never stored.
fn gemv_row_block(is1: bool, wr: u32, jb: u32, inter: u32, nrows: u32, rowbase: u32,
                  kblocks: u32) -> u32 {
    let row = gemv_weight_row(is1, wr, jb, inter);
    return (rowbase + min(row, nrows - 1u)) * kblocks;
}

// The E8M0 scale of 32-block `sidx` as f32.
fn block_scale_at(sidx: u32) -> f32 {
    return e8m0_value((w_scales[sidx / 4u] >> (8u * (sidx & 3u))) & 0xFFu);
}

// Unscaled dot product of 8 weights and 8 x values.
fn dot_octet(w: Octet, x: Octet) -> f32 {
    return dot(w.lo, x.lo) + dot(w.hi, x.hi);
}

// x elements 8o..8o+7 of the row at xoff (a multiple of 4) as two vec4 loads; zeros for no row
// (xoff = 0xFFFFFFFF).
fn load_x_octet_vec4(xoff: u32, o: u32) -> Octet {
    if xoff == 0xFFFFFFFFu {
        return Octet(vec4<f32>(0.0), vec4<f32>(0.0));
    }
    let i = xoff / 4u + 2u * o;
    return Octet(x_in_vec4[i], x_in_vec4[i + 1u]);
}

// x elements 8o..8o+7 of the row at xoff (any offset), zeros for no row.
fn load_x_octet(xoff: u32, o: u32) -> Octet {
    if xoff == 0xFFFFFFFFu {
        return Octet(vec4<f32>(0.0), vec4<f32>(0.0));
    }
    let k = xoff + o * 8u;
    return Octet(vec4<f32>(x_in[k], x_in[k + 1u], x_in[k + 2u], x_in[k + 3u]),
                 vec4<f32>(x_in[k + 4u], x_in[k + 5u], x_in[k + 6u], x_in[k + 7u]));
}

// FP4, one token: per lane, per block, x once and GEMV_R rows. Returns the lane sums of rows
// 0..3 and 4..7 of the group.
fn gemv_fp4_1token(lane: u32, kblocks: u32, xo: u32, rb: array<u32, 8>) -> array<vec4<f32>, 2> {
    var acc = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    for (var b = lane; b < kblocks; b = b + GEMV_LANES) {
        var q: array<vec4<u32>, 8>;
        var sc: array<f32, 8>;
        for (var i = 0u; i < GEMV_R; i = i + 1u) {
            q[i] = w_codes_vec4[rb[i] + b];
            sc[i] = block_scale_at(rb[i] + b);
        }
        let xi = xo / 4u + 8u * b;
        let x0 = Octet(x_in_vec4[xi], x_in_vec4[xi + 1u]);
        let x1 = Octet(x_in_vec4[xi + 2u], x_in_vec4[xi + 3u]);
        let x2 = Octet(x_in_vec4[xi + 4u], x_in_vec4[xi + 5u]);
        let x3 = Octet(x_in_vec4[xi + 6u], x_in_vec4[xi + 7u]);
        for (var i = 0u; i < GEMV_R; i = i + 1u) {
            let d = dot_octet(decode_fp4_word(q[i].x), x0) + dot_octet(decode_fp4_word(q[i].y), x1)
                + dot_octet(decode_fp4_word(q[i].z), x2) + dot_octet(decode_fp4_word(q[i].w), x3);
            acc[i / 4u][i % 4u] = acc[i / 4u][i % 4u] + (d * FP4_WORD_SCALE) * sc[i];
        }
    }
    return acc;
}

// One word (octet o of the block) of GEMV_R rows against the 4 tokens' x.
fn fp4_word_4tokens(p: ptr<function, array<vec4<f32>, 8>>, w: array<u32, 8>, xo: vec4<u32>,
                    o: u32) {
    let x0 = load_x_octet_vec4(xo.x, o);
    let x1 = load_x_octet_vec4(xo.y, o);
    let x2 = load_x_octet_vec4(xo.z, o);
    let x3 = load_x_octet_vec4(xo.w, o);
    for (var i = 0u; i < GEMV_R; i = i + 1u) {
        let d = decode_fp4_word(w[i]);
        (*p)[i] = (*p)[i] + vec4<f32>(dot_octet(d, x0), dot_octet(d, x1), dot_octet(d, x2),
                                      dot_octet(d, x3));
    }
}

// FP4, a tile of up to 4 tokens: per row, a vec4 over the tokens.
fn gemv_fp4_4tokens(lane: u32, kblocks: u32, xo: vec4<u32>,
                    rb: array<u32, 8>) -> array<vec4<f32>, 8> {
    var acc: array<vec4<f32>, 8>;
    for (var i = 0u; i < 8u; i = i + 1u) {
        acc[i] = vec4<f32>(0.0);
    }
    for (var b = lane; b < kblocks; b = b + GEMV_LANES) {
        var q: array<vec4<u32>, 8>;
        var sc: array<f32, 8>;
        for (var i = 0u; i < GEMV_R; i = i + 1u) {
            q[i] = w_codes_vec4[rb[i] + b];
            sc[i] = block_scale_at(rb[i] + b);
        }
        var p: array<vec4<f32>, 8>;
        for (var i = 0u; i < 8u; i = i + 1u) {
            p[i] = vec4<f32>(0.0);
        }
        var w: array<u32, 8>;
        for (var i = 0u; i < GEMV_R; i = i + 1u) {
            w[i] = q[i].x;
        }
        fp4_word_4tokens(&p, w, xo, 4u * b);
        for (var i = 0u; i < GEMV_R; i = i + 1u) {
            w[i] = q[i].y;
        }
        fp4_word_4tokens(&p, w, xo, 4u * b + 1u);
        for (var i = 0u; i < GEMV_R; i = i + 1u) {
            w[i] = q[i].z;
        }
        fp4_word_4tokens(&p, w, xo, 4u * b + 2u);
        for (var i = 0u; i < GEMV_R; i = i + 1u) {
            w[i] = q[i].w;
        }
        fp4_word_4tokens(&p, w, xo, 4u * b + 3u);
        for (var i = 0u; i < GEMV_R; i = i + 1u) {
            acc[i] = acc[i] + (p[i] * FP4_WORD_SCALE) * sc[i];
        }
    }
    return acc;
}

// Any other weight format (FP6, FP8, INT8): octets of 8 codes through the code table, scaled
// per octet; lane l takes octets l, l + GEMV_LANES, ...
fn gemv_generic(lane: u32, kk: u32, xo: vec4<u32>, rb: array<u32, 8>) -> array<vec4<f32>, 8> {
    let cb = mx_spec(WEIGHT_FMT).code_bits;
    var acc: array<vec4<f32>, 8>;
    for (var i = 0u; i < 8u; i = i + 1u) {
        acc[i] = vec4<f32>(0.0);
    }
    for (var o = lane; o < kk / 8u; o = o + GEMV_LANES) {
        let x0 = load_x_octet(xo.x, o);
        let x1 = load_x_octet(xo.y, o);
        let x2 = load_x_octet(xo.z, o);
        let x3 = load_x_octet(xo.w, o);
        for (var i = 0u; i < GEMV_R; i = i + 1u) {
            let sidx = rb[i] + o / 4u;
            let w = decode_weight_octet(sidx * cb, (o % 4u) * 8u);
            acc[i] = acc[i] + vec4<f32>(dot_octet(w, x0), dot_octet(w, x1), dot_octet(w, x2),
                                        dot_octet(w, x3)) * block_scale_at(sidx);
        }
    }
    return acc;
}

// The tile of this workgroup, uniformly: (expert, start, end, valid). Fills the code tables only
// where the decode uses them, with any workgroup size; resets the gemv1 block maxima.
fn gemv_load_tile(lid: u32, slot: u32) -> vec4<u32> {
    if FP4_TABLE || mx_spec(WEIGHT_FMT).code_bits != 4u {
        for (var c = lid; c < 256u; c = c + GEMV_THREADS) {
            code_value[c] = bitcast<f32>(mx_dequant_bits(WEIGHT_FMT, c, 127u));
            fp4_byte_values[c] = vec2<f32>(
                bitcast<f32>(mx_dequant_bits(WEIGHT_FMT, c & 15u, 127u)),
                bitcast<f32>(mx_dequant_bits(WEIGHT_FMT, c >> 4u, 127u)),
            );
        }
    }
    if lid < GEMV_TILE_ROWS {
        atomicStore(&block_amax[lid], 0u);
    }
    if lid == 0u {
        var t = vec4<u32>(0u, 0u, 0u, 0u);
        if slot < tiles[0] {
            t = vec4<u32>(tiles[1u + 3u * slot], tiles[2u + 3u * slot], tiles[3u + 3u * slot], 1u);
        }
        tile_desc = t;
    }
    return workgroupUniformLoad(&tile_desc);
}

// row_sums[wr][t] = sum_k W[row(wr), k] * x[t, k] for the tile's cnt (<= 4) rows.
// gemv1: x rows are gathered tokens of x_in (K = H); gemv2: rows start + t of x_in (K = I).
fn gemv_core(lid: u32, is1: bool, e: u32, start: u32, cnt: u32, jb: u32) {
    let h = params.hidden;
    let inter = params.inter;
    var kk = inter;
    var nrows = h;
    var per_e = h;
    if is1 {
        kk = h;
        nrows = 2u * inter;
        per_e = 2u * inter;
    }
    let kblocks = kk / 32u;
    let rowbase = (e - params.e0) * per_e;
    let g = lid / GEMV_LANES;
    let lane = lid % GEMV_LANES;
    var rb: array<u32, 8>;
    for (var i = 0u; i < GEMV_R; i = i + 1u) {
        rb[i] = gemv_row_block(is1, g * GEMV_R + i, jb, inter, nrows, rowbase, kblocks);
    }
    var xo = vec4<u32>(0xFFFFFFFFu);
    for (var t = 0u; t < GEMV_TILE_ROWS; t = t + 1u) {
        if t < cnt {
            if is1 {
                xo[t] = (pair_of_row[start + t] / params.top_k) * kk;
            } else {
                xo[t] = (start + t) * kk;
            }
        }
    }
    let fp4 = mx_spec(WEIGHT_FMT).code_bits == 4u;
    if fp4 && cnt == 1u {
        gemv_reduce1(lid, gemv_fp4_1token(lane, kblocks, xo.x, rb));
        return;
    }
    if fp4 {
        gemv_reduce4(lid, gemv_fp4_4tokens(lane, kblocks, xo, rb));
        return;
    }
    gemv_reduce4(lid, gemv_generic(lane, kk, xo, rb));
}

// Grid: x = tile slot (tiles of GEMV_TILE_ROWS rows), y = I / 32. Same epilogue as gemm1.
@compute @workgroup_size(GEMV_THREADS)
fn gemv1(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = gemv_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let e = tile.x;
    let start = tile.y;
    let cnt = tile.z - tile.y;
    let inter = params.inter;
    let jb = wid.y * 32u;
    gemv_core(lid, true, e, start, cnt, jb);
    // (token t, column c) items; the block max of each token's 32 columns, then the QDQ.
    for (var idx = lid; idx < 128u; idx = idx + GEMV_THREADS) {
        let t = idx / 32u;
        let c = idx % 32u;
        let j = jb + c;
        var gi: u32;
        var ui: u32;
        var grow: u32;
        var urow: u32;
        if ACTIVATION == ACT_SILU {
            gi = c;
            ui = 32u + c;
            grow = j;
            urow = inter + j;
        } else {
            gi = 2u * c;
            ui = 2u * c + 1u;
            grow = 2u * j;
            urow = 2u * j + 1u;
        }
        var gv = row_sums[gi][t];
        var uv = row_sums[ui][t];
        if params.has_bias13 != 0u {
            gv = gv + expert_bias[e * 2u * inter + grow];
            uv = uv + expert_bias[e * 2u * inter + urow];
        }
        if params.on_input != 0u && t < cnt {
            let rw = topk_weights[pair_of_row[start + t]];
            gv = gv * rw;
            uv = uv * rw;
        }
        let val = bitcast<u32>(bf16_point(activate(bf16_point(gv), bf16_point(uv))));
        ep_val[idx] = val;
        if ACT_FMT != FMT_NONE && t < cnt {
            atomicMax(&block_amax[t], val & 0x7FFFFFFFu);
        }
    }
    workgroupBarrier();
    for (var idx = lid; idx < 128u; idx = idx + GEMV_THREADS) {
        let t = idx / 32u;
        if t < cnt {
            var val = ep_val[idx];
            if ACT_FMT != FMT_NONE {
                let byte = mx_scale_byte(ACT_FMT, ACT_SCALE_MODE, atomicLoad(&block_amax[t]));
                val = intermediate_qdq(val, byte);
            }
            out_bits[(start + t) * inter + jb + idx % 32u] = val;
        }
    }
}

// Grid: x = tile slot (tiles of GEMV_TILE_ROWS rows), y = ceil(H / 64). Same epilogue as gemm2.
@compute @workgroup_size(GEMV_THREADS)
fn gemv2(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = gemv_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let e = tile.x;
    let start = tile.y;
    let cnt = tile.z - tile.y;
    let h = params.hidden;
    let nb = wid.y * 64u;
    gemv_core(lid, false, e, start, cnt, nb);
    for (var idx = lid; idx < 64u * GEMV_TILE_ROWS; idx = idx + GEMV_THREADS) {
        let wr = idx % 64u;
        let t = idx / 64u;
        let n = nb + wr;
        if t < cnt && n < h {
            var v = row_sums[wr][t];
            if params.has_bias2 != 0u {
                v = v + expert_bias[e * h + n];
            }
            if params.on_input == 0u {
                v = v * topk_weights[pair_of_row[start + t]];
            }
            out_bits[(start + t) * h + n] = bitcast<u32>(bf16_point(v));
        }
    }
}
