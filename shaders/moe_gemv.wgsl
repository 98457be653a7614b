// moe_gemv.wgsl: the decode expert passes, grouped GEMV (moe_common.wgsl has the overview).
//
//   gemv1  a tile of <= 4 rows of one expert x 64 weight rows (the gate and up rows of 32
//          intermediate columns), lanes along K (consecutive lanes read consecutive packed
//          words: coalesced), partial sums reduced in workgroup memory in a fixed order; the
//          gemm1 epilogue (bias, router weight on input, activation, intermediate QDQ)
//   gemv2  the same over W2 (64 output columns), the gemm2 epilogue (bias, router weight)
// Weights are read once per tile; FP4 has a fast path (whole 16-byte blocks per lane).

const GEMV_TILE_ROWS: u32 = 4u; // rows (token-expert pairs) per GEMV tile

var<workgroup> lane_partials: array<vec4<f32>, 512>; // [16 row slots][32 lanes]
var<workgroup> row_sums: array<f32, 256>;            // [64 weight rows][GEMV_TILE_ROWS]

// Row (within the expert) of weight-tile row wr: gemv1 maps 64 rows to the gate and up rows of
// 32 intermediate columns starting at jb; gemv2 takes rows jb + wr.
fn gemv_weight_row(is1: bool, wr: u32, jb: u32, inter: u32) -> u32 {
    if !is1 {
        return jb + wr;
    }
    if ACTIVATION == ACT_SILU {
        return select(inter + jb + wr - 32u, jb + wr, wr < 32u);
    }
    return 2u * jb + wr;
}

// A weight row of the tile: its first scale index ((rowbase + row) * kblocks) and whether it
// exists (gemv2's last tile and gemv1's last columns may run past the matrix).
struct GemvRow {
    scale_base: u32,
    valid: bool,
}

fn gemv_row_info(is1: bool, wr: u32, jb: u32, inter: u32, nrows: u32, rowbase: u32,
                 kblocks: u32) -> GemvRow {
    let row = gemv_weight_row(is1, wr, jb, inter);
    var ok = row < nrows;
    if is1 {
        ok = jb + select(wr / 2u, wr % 32u, ACTIVATION == ACT_SILU) < inter;
    }
    return GemvRow((rowbase + min(row, nrows - 1u)) * kblocks, ok);
}

// The 8 weights of octet o (elements 8o..8o+7) of a row, unscaled, and the block scale.
struct ScaledOctet {
    values: Octet,
    scale: f32,
}

fn load_weight_octet(rw: GemvRow, o: u32) -> ScaledOctet {
    if !rw.valid {
        return ScaledOctet(Octet(vec4<f32>(0.0), vec4<f32>(0.0)), 0.0);
    }
    let cb = mx_spec(WEIGHT_FMT).code_bits;
    let sidx = rw.scale_base + o / 4u;
    let sc = e8m0_value((w_scales[sidx / 4u] >> (8u * (sidx & 3u))) & 0xFFu);
    return ScaledOctet(decode_weight_octet(sidx * cb, (o % 4u) * 8u), sc);
}

// x elements 8o..8o+7 of the row at xoff (zeros for no row, xoff = 0xFFFFFFFF).
fn load_x_octet(xoff: u32, o: u32) -> Octet {
    if xoff == 0xFFFFFFFFu {
        return Octet(vec4<f32>(0.0), vec4<f32>(0.0));
    }
    let k = xoff + o * 8u;
    return Octet(vec4<f32>(x_in[k], x_in[k + 1u], x_in[k + 2u], x_in[k + 3u]),
                 vec4<f32>(x_in[k + 4u], x_in[k + 5u], x_in[k + 6u], x_in[k + 7u]));
}

// One scaled weight octet against one token's x octet.
fn scaled_dot_1token(w: ScaledOctet, x: Octet) -> f32 {
    return (dot(w.values.lo, x.lo) + dot(w.values.hi, x.hi)) * w.scale;
}

// One scaled weight octet against four tokens' x octets.
fn scaled_dot_4tokens(w: ScaledOctet, x0: Octet, x1: Octet, x2: Octet, x3: Octet) -> vec4<f32> {
    return vec4<f32>(
        dot(w.values.lo, x0.lo) + dot(w.values.hi, x0.hi),
        dot(w.values.lo, x1.lo) + dot(w.values.hi, x1.hi),
        dot(w.values.lo, x2.lo) + dot(w.values.hi, x2.hi),
        dot(w.values.lo, x3.lo) + dot(w.values.hi, x3.hi),
    ) * w.scale;
}

// FP4 fast path: block b of a row as one 16-byte load (zeros past the matrix), and its scale.
fn load_fp4_block(rw: GemvRow, b: u32) -> vec4<u32> {
    if !rw.valid {
        return vec4<u32>(0u);
    }
    return w_codes_vec4[rw.scale_base + b];
}

fn block_scale(rw: GemvRow, b: u32) -> f32 {
    if !rw.valid {
        return 0.0;
    }
    let sidx = rw.scale_base + b;
    return e8m0_value((w_scales[sidx / 4u] >> (8u * (sidx & 3u))) & 0xFFu);
}

// x elements 8o..8o+7 of the row at xoff (a multiple of 4) as two vec4 loads.
fn load_x_octet_vec4(xoff: u32, o: u32) -> Octet {
    if xoff == 0xFFFFFFFFu {
        return Octet(vec4<f32>(0.0), vec4<f32>(0.0));
    }
    let i = xoff / 4u + 2u * o;
    return Octet(x_in_vec4[i], x_in_vec4[i + 1u]);
}

// Unscaled octet dot products: one token, four tokens.
fn dot_octet(w: Octet, x: Octet) -> f32 {
    return dot(w.lo, x.lo) + dot(w.hi, x.hi);
}

fn dot_octet_4tokens(w: Octet, x0: Octet, x1: Octet, x2: Octet, x3: Octet) -> vec4<f32> {
    return vec4<f32>(dot_octet(w, x0), dot_octet(w, x1), dot_octet(w, x2), dot_octet(w, x3));
}

// A whole block (4 words) of one row against one token's x (four octets).
fn dot_fp4_block(q: vec4<u32>, x0: Octet, x1: Octet, x2: Octet, x3: Octet) -> f32 {
    return dot_octet(decode_fp4_word(q.x), x0) + dot_octet(decode_fp4_word(q.y), x1)
        + dot_octet(decode_fp4_word(q.z), x2) + dot_octet(decode_fp4_word(q.w), x3);
}

// Lane sums of the 8 rows (w0..w7) for one token (rows 0..3 and 4..7 as .x..w).
struct OneTokenSums {
    rows_0_3: vec4<f32>,
    rows_4_7: vec4<f32>,
}

// The FP4 fast path for a one-token tile: whole blocks of the 8 rows per lane, scaled per block.
fn gemv_fp4_1token(lane: u32, kblocks: u32, xo: u32, w0: GemvRow, w1: GemvRow, w2: GemvRow,
                   w3: GemvRow, w4: GemvRow, w5: GemvRow, w6: GemvRow,
                   w7: GemvRow) -> OneTokenSums {
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    for (var b = lane; b < kblocks; b = b + 32u) {
        let q0 = load_fp4_block(w0, b);
        let q1 = load_fp4_block(w1, b);
        let q2 = load_fp4_block(w2, b);
        let q3 = load_fp4_block(w3, b);
        let q4 = load_fp4_block(w4, b);
        let q5 = load_fp4_block(w5, b);
        let q6 = load_fp4_block(w6, b);
        let q7 = load_fp4_block(w7, b);
        let c0 = vec4<f32>(block_scale(w0, b), block_scale(w1, b), block_scale(w2, b),
                           block_scale(w3, b));
        let c1 = vec4<f32>(block_scale(w4, b), block_scale(w5, b), block_scale(w6, b),
                           block_scale(w7, b));
        // The block's 4 words, unrolled by hand (no dynamic vector indexing in the hot loop).
        let x0 = load_x_octet_vec4(xo, b * 4u);
        let x1 = load_x_octet_vec4(xo, b * 4u + 1u);
        let x2 = load_x_octet_vec4(xo, b * 4u + 2u);
        let x3 = load_x_octet_vec4(xo, b * 4u + 3u);
        let p0 = vec4<f32>(dot_fp4_block(q0, x0, x1, x2, x3), dot_fp4_block(q1, x0, x1, x2, x3),
                           dot_fp4_block(q2, x0, x1, x2, x3), dot_fp4_block(q3, x0, x1, x2, x3));
        let p1 = vec4<f32>(dot_fp4_block(q4, x0, x1, x2, x3), dot_fp4_block(q5, x0, x1, x2, x3),
                           dot_fp4_block(q6, x0, x1, x2, x3), dot_fp4_block(q7, x0, x1, x2, x3));
        s0 = s0 + p0 * c0;
        s1 = s1 + p1 * c1;
    }
    return OneTokenSums(s0, s1);
}

// Lane sums of the 8 rows for GEMV_TILE_ROWS = 4 tokens (vec4 over tokens per row).
struct FourTokenSums {
    row0: vec4<f32>,
    row1: vec4<f32>,
    row2: vec4<f32>,
    row3: vec4<f32>,
    row4: vec4<f32>,
    row5: vec4<f32>,
    row6: vec4<f32>,
    row7: vec4<f32>,
}

// One word (octet o) of each of the 8 rows' blocks against the GEMV_TILE_ROWS = 4 tokens' x.
fn fp4_word_4tokens(p: FourTokenSums, u0: u32, u1: u32, u2: u32, u3: u32, u4: u32, u5: u32,
                    u6: u32, u7: u32, xo: vec4<u32>, o: u32) -> FourTokenSums {
    let x0 = load_x_octet_vec4(xo.x, o);
    let x1 = load_x_octet_vec4(xo.y, o);
    let x2 = load_x_octet_vec4(xo.z, o);
    let x3 = load_x_octet_vec4(xo.w, o);
    return FourTokenSums(p.row0 + dot_octet_4tokens(decode_fp4_word(u0), x0, x1, x2, x3),
                         p.row1 + dot_octet_4tokens(decode_fp4_word(u1), x0, x1, x2, x3),
                         p.row2 + dot_octet_4tokens(decode_fp4_word(u2), x0, x1, x2, x3),
                         p.row3 + dot_octet_4tokens(decode_fp4_word(u3), x0, x1, x2, x3),
                         p.row4 + dot_octet_4tokens(decode_fp4_word(u4), x0, x1, x2, x3),
                         p.row5 + dot_octet_4tokens(decode_fp4_word(u5), x0, x1, x2, x3),
                         p.row6 + dot_octet_4tokens(decode_fp4_word(u6), x0, x1, x2, x3),
                         p.row7 + dot_octet_4tokens(decode_fp4_word(u7), x0, x1, x2, x3));
}

// The FP4 fast path for a tile of several tokens: whole blocks of the 8 rows per lane, then the
// block scales.
fn gemv_fp4_4tokens(lane: u32, kblocks: u32, xo: vec4<u32>, w0: GemvRow, w1: GemvRow,
                    w2: GemvRow, w3: GemvRow, w4: GemvRow, w5: GemvRow, w6: GemvRow,
                    w7: GemvRow) -> FourTokenSums {
    var a = FourTokenSums(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
                          vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var b = lane; b < kblocks; b = b + 32u) {
        let q0 = load_fp4_block(w0, b);
        let q1 = load_fp4_block(w1, b);
        let q2 = load_fp4_block(w2, b);
        let q3 = load_fp4_block(w3, b);
        let q4 = load_fp4_block(w4, b);
        let q5 = load_fp4_block(w5, b);
        let q6 = load_fp4_block(w6, b);
        let q7 = load_fp4_block(w7, b);
        var p = FourTokenSums(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
                              vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
        p = fp4_word_4tokens(p, q0.x, q1.x, q2.x, q3.x, q4.x, q5.x, q6.x, q7.x, xo, b * 4u);
        p = fp4_word_4tokens(p, q0.y, q1.y, q2.y, q3.y, q4.y, q5.y, q6.y, q7.y, xo, b * 4u + 1u);
        p = fp4_word_4tokens(p, q0.z, q1.z, q2.z, q3.z, q4.z, q5.z, q6.z, q7.z, xo, b * 4u + 2u);
        p = fp4_word_4tokens(p, q0.w, q1.w, q2.w, q3.w, q4.w, q5.w, q6.w, q7.w, xo, b * 4u + 3u);
        a.row0 = a.row0 + p.row0 * block_scale(w0, b);
        a.row1 = a.row1 + p.row1 * block_scale(w1, b);
        a.row2 = a.row2 + p.row2 * block_scale(w2, b);
        a.row3 = a.row3 + p.row3 * block_scale(w3, b);
        a.row4 = a.row4 + p.row4 * block_scale(w4, b);
        a.row5 = a.row5 + p.row5 * block_scale(w5, b);
        a.row6 = a.row6 + p.row6 * block_scale(w6, b);
        a.row7 = a.row7 + p.row7 * block_scale(w7, b);
    }
    return a;
}

// Sum the 32 lanes of the 16 row slots in lane_partials[slot * 32 + lane] into
// lane_partials[slot * 32], pairwise in a fixed order (deterministic). Call with lane_partials
// filled by every thread and not yet synced.
fn reduce_lane_partials(lid: u32) {
    let slot = lid / 16u;
    let q = lid % 16u;
    for (var s = 16u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if q < s {
            lane_partials[slot * 32u + q] = lane_partials[slot * 32u + q]
                + lane_partials[slot * 32u + q + s];
        }
    }
    workgroupBarrier();
}

// row_sums[wr * GEMV_TILE_ROWS + t] = sum_k W[row(wr), k] * x[t, k] for the tile's cnt
// (<= GEMV_TILE_ROWS = 4) rows.
// gemv1: x rows are gathered tokens of x_in (K = H); gemv2: rows start + t of x_in (K = I).
// Thread (r = lid / 32, lane): weight rows r + 8i (i < 8); lanes along K in octets of 8
// elements (consecutive lanes read consecutive packed words: coalesced), x read straight from
// x_in (cached), no barriers in the K loop; one token's tile (decode) runs a 1-token loop.
// Lane partials are then summed in workgroup memory in a fixed pairwise order.
// Everything per thread lives in named values (no dynamically indexed private arrays).
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
    let noct = kk / 8u;
    let rowbase = (e - params.e0) * per_e;
    let r = lid / 32u;
    let lane = lid % 32u;
    let w0 = gemv_row_info(is1, r, jb, inter, nrows, rowbase, kblocks);
    let w1 = gemv_row_info(is1, r + 8u, jb, inter, nrows, rowbase, kblocks);
    let w2 = gemv_row_info(is1, r + 16u, jb, inter, nrows, rowbase, kblocks);
    let w3 = gemv_row_info(is1, r + 24u, jb, inter, nrows, rowbase, kblocks);
    let w4 = gemv_row_info(is1, r + 32u, jb, inter, nrows, rowbase, kblocks);
    let w5 = gemv_row_info(is1, r + 40u, jb, inter, nrows, rowbase, kblocks);
    let w6 = gemv_row_info(is1, r + 48u, jb, inter, nrows, rowbase, kblocks);
    let w7 = gemv_row_info(is1, r + 56u, jb, inter, nrows, rowbase, kblocks);
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
    if cnt == 1u {
        var s0 = vec4<f32>(0.0); // rows r, r+8, r+16, r+24
        var s1 = vec4<f32>(0.0); // rows r+32, .., r+56
        if fp4 {
            let s = gemv_fp4_1token(lane, kblocks, xo.x, w0, w1, w2, w3, w4, w5, w6, w7);
            s0 = s.rows_0_3;
            s1 = s.rows_4_7;
        }
        for (var o = select(lane, noct, fp4); o < noct; o = o + 32u) {
            let x = load_x_octet(xo.x, o);
            s0 = s0 + vec4<f32>(scaled_dot_1token(load_weight_octet(w0, o), x),
                                scaled_dot_1token(load_weight_octet(w1, o), x),
                                scaled_dot_1token(load_weight_octet(w2, o), x),
                                scaled_dot_1token(load_weight_octet(w3, o), x));
            s1 = s1 + vec4<f32>(scaled_dot_1token(load_weight_octet(w4, o), x),
                                scaled_dot_1token(load_weight_octet(w5, o), x),
                                scaled_dot_1token(load_weight_octet(w6, o), x),
                                scaled_dot_1token(load_weight_octet(w7, o), x));
        }
        lane_partials[(r * 2u) * 32u + lane] = s0;
        lane_partials[(r * 2u + 1u) * 32u + lane] = s1;
        reduce_lane_partials(lid);
        if lid < 64u {
            // slot (r, q), component c: row r + 8 * (4q + c)
            let rr = lid / 8u;
            let q = (lid / 4u) % 2u;
            let c = lid % 4u;
            let wr = rr + 8u * (4u * q + c);
            row_sums[wr * GEMV_TILE_ROWS] = lane_partials[(rr * 2u + q) * 32u][c];
            row_sums[wr * GEMV_TILE_ROWS + 1u] = 0.0;
            row_sums[wr * GEMV_TILE_ROWS + 2u] = 0.0;
            row_sums[wr * GEMV_TILE_ROWS + 3u] = 0.0;
        }
        workgroupBarrier();
        return;
    }
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    var a4 = vec4<f32>(0.0);
    var a5 = vec4<f32>(0.0);
    var a6 = vec4<f32>(0.0);
    var a7 = vec4<f32>(0.0);
    if fp4 {
        let a = gemv_fp4_4tokens(lane, kblocks, xo, w0, w1, w2, w3, w4, w5, w6, w7);
        a0 = a.row0;
        a1 = a.row1;
        a2 = a.row2;
        a3 = a.row3;
        a4 = a.row4;
        a5 = a.row5;
        a6 = a.row6;
        a7 = a.row7;
    }
    for (var o = select(lane, noct, fp4); o < noct; o = o + 32u) {
        let x0 = load_x_octet(xo.x, o);
        let x1 = load_x_octet(xo.y, o);
        let x2 = load_x_octet(xo.z, o);
        let x3 = load_x_octet(xo.w, o);
        a0 = a0 + scaled_dot_4tokens(load_weight_octet(w0, o), x0, x1, x2, x3);
        a1 = a1 + scaled_dot_4tokens(load_weight_octet(w1, o), x0, x1, x2, x3);
        a2 = a2 + scaled_dot_4tokens(load_weight_octet(w2, o), x0, x1, x2, x3);
        a3 = a3 + scaled_dot_4tokens(load_weight_octet(w3, o), x0, x1, x2, x3);
        a4 = a4 + scaled_dot_4tokens(load_weight_octet(w4, o), x0, x1, x2, x3);
        a5 = a5 + scaled_dot_4tokens(load_weight_octet(w5, o), x0, x1, x2, x3);
        a6 = a6 + scaled_dot_4tokens(load_weight_octet(w6, o), x0, x1, x2, x3);
        a7 = a7 + scaled_dot_4tokens(load_weight_octet(w7, o), x0, x1, x2, x3);
    }
    // Two rows per round: slot (r, q) holds row r + 8 * (2 * round + q), all GEMV_TILE_ROWS tokens.
    for (var round = 0u; round < 4u; round = round + 1u) {
        var p0: vec4<f32>;
        var p1: vec4<f32>;
        switch round {
            case 0u: { p0 = a0; p1 = a1; }
            case 1u: { p0 = a2; p1 = a3; }
            case 2u: { p0 = a4; p1 = a5; }
            default: { p0 = a6; p1 = a7; }
        }
        lane_partials[(r * 2u) * 32u + lane] = p0;
        lane_partials[(r * 2u + 1u) * 32u + lane] = p1;
        reduce_lane_partials(lid);
        if lid < 64u {
            let rr = lid / 8u;
            let q = (lid / 4u) % 2u;
            let t = lid % 4u;
            row_sums[(rr + 8u * (2u * round + q)) * GEMV_TILE_ROWS + t] =
                lane_partials[(rr * 2u + q) * 32u][t];
        }
        workgroupBarrier();
    }
}

// Grid: x = tile slot (tiles of GEMV_TILE_ROWS rows), y = I / 32. Same epilogue as gemm1.
@compute @workgroup_size(256)
fn gemv1(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let e = tile.x;
    let start = tile.y;
    let cnt = tile.z - tile.y;
    let inter = params.inter;
    let jb = wid.y * 32u;
    gemv_core(lid, true, e, start, cnt, jb);
    // Threads of t >= GEMV_TILE_ROWS duplicate the last row and never store.
    let t = min(lid / 32u, GEMV_TILE_ROWS - 1u);
    let tv = lid / 32u < cnt;
    let c = lid % 32u;
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
    var g = row_sums[gi * GEMV_TILE_ROWS + t];
    var u = row_sums[ui * GEMV_TILE_ROWS + t];
    if params.has_bias13 != 0u {
        g = g + expert_bias[e * 2u * inter + grow];
        u = u + expert_bias[e * 2u * inter + urow];
    }
    if params.on_input != 0u && tv {
        let rw = topk_weights[pair_of_row[start + t]];
        g = g * rw;
        u = u * rw;
    }
    var val = bitcast<u32>(bf16_point(activate(bf16_point(g), bf16_point(u))));
    if lid < 32u {
        atomicStore(&block_amax[lid], 0u);
    }
    workgroupBarrier();
    if ACT_FMT != FMT_NONE && tv {
        atomicMax(&block_amax[t], val & 0x7FFFFFFFu);
    }
    workgroupBarrier();
    if tv {
        if ACT_FMT != FMT_NONE {
            let byte = mx_scale_byte(ACT_FMT, ACT_SCALE_MODE, atomicLoad(&block_amax[t]));
            val = intermediate_qdq(val, byte);
        }
        out_bits[(start + t) * inter + j] = val;
    }
}

// Grid: x = tile slot (tiles of GEMV_TILE_ROWS rows), y = ceil(H / 64). Same epilogue as gemm2.
@compute @workgroup_size(256)
fn gemv2(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let e = tile.x;
    let start = tile.y;
    let cnt = tile.z - tile.y;
    let h = params.hidden;
    let nb = wid.y * 64u;
    gemv_core(lid, false, e, start, cnt, nb);
    for (var idx = lid; idx < 64u * GEMV_TILE_ROWS; idx = idx + 256u) {
        let wr = idx % 64u;
        let t = idx / 64u;
        let n = nb + wr;
        if t < cnt && n < h {
            var v = row_sums[wr * GEMV_TILE_ROWS + t];
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

