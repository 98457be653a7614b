// moe_gemm.wgsl: the prefill expert passes, grouped GEMM (moe_common.wgsl has the overview).
//
//   gemm1  tiles of 64 rows of one expert x 64 intermediate columns: gather the rows' tokens of
//          x, dequantize W13 in the prologue (code table x E8M0 scale into workgroup memory),
//          fp32 accumulate, then in the epilogue bias (+ router weight on input), activation and
//          the intermediate QDQ (64 columns: two whole 32-blocks along I per row)
//   gemm2  the same shape over W2 (128 output columns per tile), bias and the router weight

const GEMM_TILE_ROWS: u32 = 64u; // rows (token-expert pairs) per GEMM tile

var<workgroup> tile_x: array<vec4<f32>, 256>; // [GEMM_K_STEP][64 rows / 4]
var<workgroup> tile_w: array<vec4<f32>, 512>; // [GEMM_K_STEP][128 weight columns / 4]

// GEMM tiles: GEMM_TILE_ROWS = 64 rows x 128 weight rows, K steps of GEMM_K_STEP = 16 (half an
// MX block). 256 threads as 16 x 16; thread (ty, tx) owns rows ty*4..+3 and, per half of the
// weight tile, columns tx*4..+3: 32 accumulators, three vec4 workgroup loads per 32 FMAs.
// tile_x[k][m] and tile_w[k][n] are k-major so the inner loop reads whole vec4s.
const GEMM_K_STEP: u32 = 16u;

// Decode 8 consecutive weights of chunk row `row` (elements k0..k0+7, k0 a multiple of 8) into
// column `col` of tile_w (zeros when the row is out of range).
fn stage_weight_octet(row: u32, kblocks: u32, k0: u32, col: u32, valid: bool) {
    var lo = vec4<f32>(0.0);
    var hi = vec4<f32>(0.0);
    if valid {
        let cb = mx_spec(WEIGHT_FMT).code_bits;
        let sidx = row * kblocks + k0 / 32u;
        let sc = e8m0_value((w_scale_word(sidx / 4u) >> (8u * (sidx & 3u))) & 0xFFu);
        let w = decode_weight_octet(sidx * cb, k0 % 32u);
        lo = w.lo * sc;
        hi = w.hi * sc;
    }
    let kk = k0 % GEMM_K_STEP;
    let ci = col / 4u;
    let cs = col % 4u;
    tile_w[(kk + 0u) * 32u + ci][cs] = lo.x;
    tile_w[(kk + 1u) * 32u + ci][cs] = lo.y;
    tile_w[(kk + 2u) * 32u + ci][cs] = lo.z;
    tile_w[(kk + 3u) * 32u + ci][cs] = lo.w;
    tile_w[(kk + 4u) * 32u + ci][cs] = hi.x;
    tile_w[(kk + 5u) * 32u + ci][cs] = hi.y;
    tile_w[(kk + 6u) * 32u + ci][cs] = hi.z;
    tile_w[(kk + 7u) * 32u + ci][cs] = hi.w;
}

// The accumulators of one gemm thread: rows ty*4+i (i = 0..3), columns tx*4+0..3 of the low
// (lo) and high (hi) halves of the 128-column weight tile. Named vectors, no arrays: dynamically
// indexed private arrays may live in memory.
struct GemmAcc {
    row0_lo: vec4<f32>,
    row0_hi: vec4<f32>,
    row1_lo: vec4<f32>,
    row1_hi: vec4<f32>,
    row2_lo: vec4<f32>,
    row2_hi: vec4<f32>,
    row3_lo: vec4<f32>,
    row3_hi: vec4<f32>,
}

// The shared k-loop of gemm1/gemm2: x rows come from x_in at xoff (0xFFFFFFFF = no row); the
// weight loader's chunk row is wrow, its tile column wcol, valid wv.
fn gemm_k_loop(lid: u32, kk_total: u32, xoff: u32, wrow: u32, wcol: u32, wv: bool) -> GemmAcc {
    let xk = (lid % 4u) * 4u;   // x loader: row lid / 4, k offset (lid % 4) * 4
    var c = GemmAcc(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
                    vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var k0 = 0u; k0 < kk_total; k0 = k0 + GEMM_K_STEP) {
        var xv = vec4<f32>(0.0);
        if xoff != 0xFFFFFFFFu {
            let o = xoff + k0 + xk;
            xv = vec4<f32>(x_in[o], x_in[o + 1u], x_in[o + 2u], x_in[o + 3u]);
        }
        c = gemm_k_step(lid, kk_total, k0, xv, wrow, wcol, wv, c);
    }
    return c;
}

// One K step of the tiled GEMM (gemm_k_loop, and the test-only reference k-loop of
// moe_coop_prepass.wgsl): this thread's 4 x values xv (row lid / 4, k k0 + (lid % 4) * 4) and
// its weight octet staged, then the step's products added to c. Every thread calls it
// (barriers).
fn gemm_k_step(lid: u32, kk_total: u32, k0: u32, xv: vec4<f32>, wrow: u32, wcol: u32, wv: bool,
               c_in: GemmAcc) -> GemmAcc {
    let kblocks = kk_total / 32u;
    let ty = lid / 16u;
    let tx = lid % 16u;
    let xm = lid / 4u;
    let xk = (lid % 4u) * 4u;
    let wk = (lid % 2u) * 8u;   // weight loader: tile row lid / 2, k offset 0 or 8
    var c = c_in;
    let xc = xm / 4u;
    let xs = xm % 4u;
    tile_x[(xk + 0u) * 16u + xc][xs] = xv.x;
    tile_x[(xk + 1u) * 16u + xc][xs] = xv.y;
    tile_x[(xk + 2u) * 16u + xc][xs] = xv.z;
    tile_x[(xk + 3u) * 16u + xc][xs] = xv.w;
    stage_weight_octet(wrow, kblocks, k0 + wk, wcol, wv);
    workgroupBarrier();
    for (var kk = 0u; kk < GEMM_K_STEP; kk = kk + 1u) {
        let a = tile_x[kk * 16u + ty];
        let b0 = tile_w[kk * 32u + tx];
        let b1 = tile_w[kk * 32u + 16u + tx];
        c.row0_lo = c.row0_lo + a.x * b0;
        c.row0_hi = c.row0_hi + a.x * b1;
        c.row1_lo = c.row1_lo + a.y * b0;
        c.row1_hi = c.row1_hi + a.y * b1;
        c.row2_lo = c.row2_lo + a.z * b0;
        c.row2_hi = c.row2_hi + a.z * b1;
        c.row3_lo = c.row3_lo + a.w * b0;
        c.row3_hi = c.row3_hi + a.w * b1;
    }
    workgroupBarrier();
    return c;
}

// What one gemm thread loads: the offset of its x row (0xFFFFFFFF = no row) and its weight
// row (chunk row, tile column, whether the row exists). Shared with moe_gemm_coop.wgsl.
struct GemmLoad {
    xoff: u32,
    wrow: u32,
    wcol: u32,
    wv: bool,
}

// gemm1's loads for tile (e, start, cnt), intermediate columns jb..jb+63: x row lid / 4; weight
// tile row lid / 2 in the expert's natural order, mapped to its tile column (gate rows in tile
// columns 0..63, up rows in 64..127, for either row layout).
fn gemm1_load(lid: u32, e: u32, start: u32, cnt: u32, jb: u32) -> GemmLoad {
    let h = params.hidden;
    let inter = params.inter;
    let xm = lid / 4u;
    var xoff = 0xFFFFFFFFu;
    if xm < cnt {
        xoff = (pair_of_row[start + xm] / params.top_k) * h;
    }
    let wr = lid / 2u;
    var c: u32;    // intermediate column within the tile
    var isup: u32;
    var row: u32;  // row within the expert
    if ACTIVATION == ACT_SILU {
        c = wr % 64u;
        isup = wr / 64u;
        row = isup * inter + jb + c;
    } else {
        c = wr / 2u;
        isup = wr % 2u;
        row = 2u * jb + wr;
    }
    return GemmLoad(xoff, w_use_expert(e) * 2u * inter + row, isup * 64u + c, jb + c < inter);
}

// gemm2's loads for tile (e, start, cnt), output columns nb..nb+127.
fn gemm2_load(lid: u32, e: u32, start: u32, cnt: u32, nb: u32) -> GemmLoad {
    let h = params.hidden;
    let xm = lid / 4u;
    var xoff = 0xFFFFFFFFu;
    if xm < cnt {
        xoff = (start + xm) * params.inter;
    }
    let wr = lid / 2u;
    return GemmLoad(xoff, w_use_expert(e) * h + nb + wr, wr, nb + wr < h);
}

// Grid: x = tile slot, y = ceil(I / 64). A tile covers 64 intermediate columns: weight-tile
// columns 0..63 hold their gate rows and 64..127 their up rows (for either row layout), so the
// epilogue has gate and up of a column in one thread, and each row's two 32-blocks in the tile.
// Output out_bits = intermediate [rows, I] (f32 bits).
@compute @workgroup_size(256)
fn gemm1(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let jb = wid.y * 64u;
    let ld = gemm1_load(lid, tile.x, tile.y, tile.z - tile.y, jb);
    let acc = gemm_k_loop(lid, params.hidden, ld.xoff, ld.wrow, ld.wcol, ld.wv);
    gemm1_finish(lid, tile.x, tile.y, tile.z - tile.y, jb, acc);
}

// gemm1's epilogue: thread (ty, tx) has rows ty*4+i, columns tx*4+0..3 (gate in the low half
// of the tile, up in the high half): bias, router weight on input, activation, intermediate QDQ
// and the store. Shared with moe_gemm_coop.wgsl.
fn gemm1_finish(lid: u32, e: u32, start: u32, cnt: u32, jb: u32, acc: GemmAcc) {
    let ty = lid / 16u;
    let tx = lid % 16u;
    let half = tx / 8u; // which 32-block of the tile's 64 columns
    let v0 = gemm1_epilogue4(e, start, cnt, ty * 4u + 0u, jb + tx * 4u, acc.row0_lo, acc.row0_hi);
    let v1 = gemm1_epilogue4(e, start, cnt, ty * 4u + 1u, jb + tx * 4u, acc.row1_lo, acc.row1_hi);
    let v2 = gemm1_epilogue4(e, start, cnt, ty * 4u + 2u, jb + tx * 4u, acc.row2_lo, acc.row2_hi);
    let v3 = gemm1_epilogue4(e, start, cnt, ty * 4u + 3u, jb + tx * 4u, acc.row3_lo, acc.row3_hi);
    if lid < 128u {
        atomicStore(&block_amax[lid], 0u);
    }
    workgroupBarrier();
    if ACT_FMT != FMT_NONE {
        atomicMax(&block_amax[(ty * 4u + 0u) * 2u + half], max_abs4(v0));
        atomicMax(&block_amax[(ty * 4u + 1u) * 2u + half], max_abs4(v1));
        atomicMax(&block_amax[(ty * 4u + 2u) * 2u + half], max_abs4(v2));
        atomicMax(&block_amax[(ty * 4u + 3u) * 2u + half], max_abs4(v3));
    }
    workgroupBarrier();
    gemm1_qdq_store(start, cnt, ty * 4u + 0u, half, jb + tx * 4u, v0);
    gemm1_qdq_store(start, cnt, ty * 4u + 1u, half, jb + tx * 4u, v1);
    gemm1_qdq_store(start, cnt, ty * 4u + 2u, half, jb + tx * 4u, v2);
    gemm1_qdq_store(start, cnt, ty * 4u + 3u, half, jb + tx * 4u, v3);
}

// Largest |x| of four f32 bit patterns.
fn max_abs4(v: vec4<u32>) -> u32 {
    let m = v & vec4<u32>(0x7FFFFFFFu);
    return max(max(m.x, m.y), max(m.z, m.w));
}

// gemm1 epilogue for tile row r, intermediate columns col0..col0+3: bias, router weight on
// input, bf16 points, activation; f32 bits.
fn gemm1_epilogue4(e: u32, start: u32, cnt: u32, r: u32, col0: u32, gate: vec4<f32>,
                   up: vec4<f32>) -> vec4<u32> {
    let inter = params.inter;
    var g = gate;
    var u = up;
    if params.has_bias13 != 0u {
        for (var j = 0u; j < 4u; j = j + 1u) {
            let col = min(col0 + j, inter - 1u);
            var grow: u32;
            var urow: u32;
            if ACTIVATION == ACT_SILU {
                grow = col;
                urow = inter + col;
            } else {
                grow = 2u * col;
                urow = 2u * col + 1u;
            }
            g[j] = g[j] + expert_bias[e * 2u * inter + grow];
            u[j] = u[j] + expert_bias[e * 2u * inter + urow];
        }
    }
    if params.on_input != 0u && r < cnt {
        let rw = topk_weights[pair_of_row[start + r]];
        g = g * rw;
        u = u * rw;
    }
    return vec4<u32>(
        bitcast<u32>(bf16_point(activate(bf16_point(g.x), bf16_point(u.x)))),
        bitcast<u32>(bf16_point(activate(bf16_point(g.y), bf16_point(u.y)))),
        bitcast<u32>(bf16_point(activate(bf16_point(g.z), bf16_point(u.z)))),
        bitcast<u32>(bf16_point(activate(bf16_point(g.w), bf16_point(u.w)))),
    );
}

// The intermediate QDQ of tile row r (block amax in block_amax) and the store.
fn gemm1_qdq_store(start: u32, cnt: u32, r: u32, half: u32, col0: u32, v: vec4<u32>) {
    let inter = params.inter;
    if r >= cnt {
        return;
    }
    var byte = 0u;
    if ACT_FMT != FMT_NONE {
        byte = mx_scale_byte(ACT_FMT, ACT_SCALE_MODE, atomicLoad(&block_amax[r * 2u + half]));
    }
    for (var j = 0u; j < 4u; j = j + 1u) {
        let col = col0 + j;
        if col < inter {
            var o = v[j];
            if ACT_FMT != FMT_NONE {
                o = intermediate_qdq(o, byte);
            }
            out_bits[(start + r) * inter + col] = o;
        }
    }
}

// Grid: x = tile slot, y = ceil(H / 128). x_in = intermediate [rows, I]; out_bits = y [rows, H].
@compute @workgroup_size(256)
fn gemm2(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let nb = wid.y * 128u;
    let ld = gemm2_load(lid, tile.x, tile.y, tile.z - tile.y, nb);
    let acc = gemm_k_loop(lid, params.inter, ld.xoff, ld.wrow, ld.wcol, ld.wv);
    gemm2_finish(lid, tile.x, tile.y, tile.z - tile.y, nb, acc);
}

// gemm2's epilogue (bias, router weight, store) of thread (ty, tx). Shared with
// moe_gemm_coop.wgsl.
fn gemm2_finish(lid: u32, e: u32, start: u32, cnt: u32, nb: u32, acc: GemmAcc) {
    let ty = lid / 16u;
    let tx = lid % 16u;
    gemm2_store(e, start, cnt, ty * 4u + 0u, nb + tx * 4u, acc.row0_lo, acc.row0_hi);
    gemm2_store(e, start, cnt, ty * 4u + 1u, nb + tx * 4u, acc.row1_lo, acc.row1_hi);
    gemm2_store(e, start, cnt, ty * 4u + 2u, nb + tx * 4u, acc.row2_lo, acc.row2_hi);
    gemm2_store(e, start, cnt, ty * 4u + 3u, nb + tx * 4u, acc.row3_lo, acc.row3_hi);
}

// gemm2 epilogue for tile row r: columns n0..n0+3 (lo) and n0+64.. (hi): bias, router weight.
fn gemm2_store(e: u32, start: u32, cnt: u32, r: u32, n0: u32, lo: vec4<f32>, hi: vec4<f32>) {
    let h = params.hidden;
    if r >= cnt {
        return;
    }
    let a = pair_of_row[start + r];
    var w = 1.0;
    if params.on_input == 0u {
        w = topk_weights[a];
    }
    for (var j = 0u; j < 8u; j = j + 1u) {
        let n = n0 + (j / 4u) * 64u + (j % 4u);
        if n < h {
            var v = select(lo[j % 4u], hi[j % 4u], j >= 4u);
            if params.has_bias2 != 0u {
                v = v + expert_bias[e * h + n];
            }
            if params.on_input == 0u {
                v = v * w;
            }
            out_bits[(start + r) * h + n] = bitcast<u32>(bf16_point(v));
        }
    }
}
