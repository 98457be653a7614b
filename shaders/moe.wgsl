// moe.wgsl: the MoE layer after routing (ARCHITECTURE.md "MoE forward dataflow").
//
//   lists   expert histogram + prefix sum -> per-expert row lists and a tile list
//   gemm1   grouped GEMM over tiles of one expert's rows: gather x rows, dequantize W13 in the
//           prologue (code table x E8M0 scale into workgroup memory), fp32 accumulate, then in the
//           epilogue bias (+ router weight on input), activation and the intermediate QDQ
//           (a tile holds 64 intermediate columns: two whole 32-blocks along I)
//   gemm2   the same shape over W2 with bias and the router weight
//   gemv1/2 the decode shape (few rows per expert): a tile of <= 4 rows x 64 weight rows, lanes
//           along K (consecutive lanes read consecutive packed words: coalesced), partial sums
//           reduced in workgroup memory in a fixed order; same epilogues as gemm1/gemm2
//   combine per (token, h): fp32 sum over the k slots in slot order (no float atomics)
//
// Weights may be split into chunks of whole experts (binding-size limits): gemm1/gemm2 run once
// per chunk and skip tiles whose expert lies outside [e0, e1).

override WFMT: u32 = 0u;   // weight MxFormat::id
override AFMT: u32 = 255u; // activation MxFormat::id, 255 = weight-only (no intermediate QDQ)
override AMODE: u32 = 1u;  // activation ScaleMode::id
override ACT: u32 = 0u;    // 0 silu (gate rows [0, I), up rows [I, 2I)), 1 swigluoai (interleaved)
override BF16: u32 = 0u;   // 1: round intermediates to bf16 where vLLM does (Intermediate::Bf16)

const TM: u32 = 64u;       // rows (token-expert pairs) per GEMM tile
const TG: u32 = 4u;        // rows per GEMV tile
override TILE_M: u32 = 32u; // rows per tile in the list built by `lists` (TM or TG)

struct MoeParams {
    m: u32,
    top_k: u32,
    hidden: u32,
    inter: u32,
    n_experts: u32,
    e_local: u32,
    has_map: u32,
    has_bias13: u32,
    has_bias2: u32,
    on_input: u32,
    e0: u32,
    e1: u32,
}

@group(0) @binding(0) var<uniform> mp: MoeParams;
@group(0) @binding(1) var<storage, read> m_ids: array<i32>;
@group(0) @binding(2) var<storage, read> m_map: array<i32>;
@group(0) @binding(3) var<storage, read_write> m_rows: array<u32>;
@group(0) @binding(4) var<storage, read_write> m_slot: array<i32>;
@group(0) @binding(5) var<storage, read_write> m_tiles: array<u32>;
@group(0) @binding(6) var<storage, read> m_x: array<f32>;
@group(0) @binding(7) var<storage, read> m_wdata: array<u32>;
@group(0) @binding(8) var<storage, read> m_wscale: array<u32>;
@group(0) @binding(9) var<storage, read_write> m_out: array<u32>;
@group(0) @binding(10) var<storage, read> m_bias: array<f32>;
@group(0) @binding(11) var<storage, read> m_topw: array<f32>;
@group(0) @binding(12) var<storage, read> m_y: array<f32>;

var<workgroup> l_cnt: array<atomic<u32>, 1024>;
var<workgroup> l_off: array<u32, 1024>;

var<workgroup> g_xs: array<vec4<f32>, 256>; // [BK][64 rows / 4]
var<workgroup> g_ws: array<vec4<f32>, 512>; // [BK][128 weight columns / 4]
var<workgroup> g_tile: vec4<u32>;
var<workgroup> w_lut: array<f32, 256>; // element value of every weight code (scale 1), exact
var<workgroup> v_lut2: array<vec2<f32>, 256>; // FP4 byte -> (low nibble value, high nibble value)
var<workgroup> g_amax: array<atomic<u32>, 128>; // gemm1: [64 rows][2 blocks]; gemv1: [8 rows]

// Round to bf16 (RNE on the bits, NaN stays NaN) when BF16 is set; identity otherwise.
fn m_bf16(x: f32) -> f32 {
    if BF16 == 0u {
        return x;
    }
    let b = bitcast<u32>(x);
    if (b & 0x7FFFFFFFu) > 0x7F800000u {
        return bitcast<f32>((b | 0x00400000u) & 0xFFFF0000u);
    }
    return bitcast<f32>((b + 0x7FFFu + ((b >> 16u) & 1u)) & 0xFFFF0000u);
}

fn l_local(a: u32) -> i32 {
    let id = m_ids[a];
    if mp.has_map != 0u {
        return m_map[id];
    }
    return id;
}

// One workgroup. Row order inside an expert's list depends on atomics, but no result does:
// every row is computed independently and the combine reads rows through m_slot.
@compute @workgroup_size(256)
fn lists(@builtin(local_invocation_index) lid: u32) {
    let el = mp.e_local;
    let na = mp.m * mp.top_k;
    for (var e = lid; e < el; e = e + 256u) {
        atomicStore(&l_cnt[e], 0u);
    }
    workgroupBarrier();
    for (var a = lid; a < na; a = a + 256u) {
        let l = l_local(a);
        if l >= 0 {
            atomicAdd(&l_cnt[u32(l)], 1u);
        }
    }
    workgroupBarrier();
    if lid == 0u {
        var acc = 0u;
        var nt = 0u;
        for (var e = 0u; e < el; e = e + 1u) {
            let c = atomicLoad(&l_cnt[e]);
            l_off[e] = acc;
            for (var s = 0u; s < c; s = s + TILE_M) {
                m_tiles[1u + 3u * nt] = e;
                m_tiles[2u + 3u * nt] = acc + s;
                m_tiles[3u + 3u * nt] = acc + min(s + TILE_M, c);
                nt = nt + 1u;
            }
            acc = acc + c;
            atomicStore(&l_cnt[e], 0u);
        }
        m_tiles[0] = nt;
    }
    workgroupBarrier();
    for (var a = lid; a < na; a = a + 256u) {
        let l = l_local(a);
        if l >= 0 {
            let p = l_off[u32(l)] + atomicAdd(&l_cnt[u32(l)], 1u);
            m_rows[p] = a;
            m_slot[a] = i32(p);
        } else {
            m_slot[a] = -1;
        }
    }
}

// The weight's E8M0 scale as f32 (exact; 255 = NaN block).
fn w_scale(byte: u32) -> f32 {
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
fn g_load_tile(lid: u32, slot: u32) -> vec4<u32> {
    w_lut[lid] = bitcast<f32>(mx_dequant_bits(WFMT, lid, 127u));
    v_lut2[lid] = vec2<f32>(
        bitcast<f32>(mx_dequant_bits(WFMT, lid & 15u, 127u)),
        bitcast<f32>(mx_dequant_bits(WFMT, lid >> 4u, 127u)),
    );
    if lid == 0u {
        var t = vec4<u32>(0u, 0u, 0u, 0u);
        if slot < m_tiles[0] {
            t = vec4<u32>(m_tiles[1u + 3u * slot], m_tiles[2u + 3u * slot], m_tiles[3u + 3u * slot], 1u);
        }
        g_tile = t;
    }
    return workgroupUniformLoad(&g_tile);
}

// GEMM tiles: TM = 64 rows x 128 weight rows, K steps of BK = 16 (half an MX block).
// 256 threads as 16 x 16; thread (ty, tx) owns rows ty*4..+3 and, per half of the weight tile,
// columns tx*4..+3: 32 accumulators, three vec4 workgroup loads per 32 FMAs.
// g_xs[k][m] and g_ws[k][n] are k-major so the inner loop reads whole vec4s.
const BK: u32 = 16u;

// The code at bit `bit` (< 96) of the three words w0, w1, w2 (a little-endian bit stream).
fn w_code3(w0: u32, w1: u32, w2: u32, bit: u32, cb: u32) -> u32 {
    if bit < 32u {
        return mx_code_at(w0, w1, bit, cb);
    }
    if bit < 64u {
        return mx_code_at(w1, w2, bit - 32u, cb);
    }
    return mx_code_at(w2, 0u, bit - 64u, cb);
}

// Decode 8 consecutive weights of chunk row `row` (elements k0..k0+7, k0 a multiple of 8) into
// column `col` of g_ws (zeros when the row is out of range).
fn g_load_w8(row: u32, kblocks: u32, k0: u32, col: u32, valid: bool) {
    var lo = vec4<f32>(0.0);
    var hi = vec4<f32>(0.0);
    if valid {
        let cb = mx_spec(WFMT).code_bits;
        let sidx = row * kblocks + k0 / 32u;
        let sc = w_scale((m_wscale[sidx / 4u] >> (8u * (sidx & 3u))) & 0xFFu);
        let w = v_w8(sidx * cb, k0 % 32u);
        lo = w.lo * sc;
        hi = w.hi * sc;
    }
    let kk = k0 % BK;
    let ci = col / 4u;
    let cs = col % 4u;
    g_ws[(kk + 0u) * 32u + ci][cs] = lo.x;
    g_ws[(kk + 1u) * 32u + ci][cs] = lo.y;
    g_ws[(kk + 2u) * 32u + ci][cs] = lo.z;
    g_ws[(kk + 3u) * 32u + ci][cs] = lo.w;
    g_ws[(kk + 4u) * 32u + ci][cs] = hi.x;
    g_ws[(kk + 5u) * 32u + ci][cs] = hi.y;
    g_ws[(kk + 6u) * 32u + ci][cs] = hi.z;
    g_ws[(kk + 7u) * 32u + ci][cs] = hi.w;
}

// The accumulators of one gemm thread: rows ty*4+i (i = 0..3), columns tx*4+0..3 of the low
// (l) and high (h) halves of the 128-column weight tile. Named vectors, no arrays: dynamically
// indexed private arrays may live in memory.
struct Acc {
    r0l: vec4<f32>,
    r0h: vec4<f32>,
    r1l: vec4<f32>,
    r1h: vec4<f32>,
    r2l: vec4<f32>,
    r2h: vec4<f32>,
    r3l: vec4<f32>,
    r3h: vec4<f32>,
}

// The shared k-loop of gemm1/gemm2: x rows come from m_x at xoff (0xFFFFFFFF = no row); the
// weight loader's chunk row is wrow, its tile column wcol, valid wv.
fn g_kloop(lid: u32, kk_total: u32, xoff: u32, wrow: u32, wcol: u32, wv: bool) -> Acc {
    let kblocks = kk_total / 32u;
    let ty = lid / 16u;
    let tx = lid % 16u;
    let xm = lid / 4u;          // x loader: row xm, k offset (lid % 4) * 4
    let xk = (lid % 4u) * 4u;
    let wk = (lid % 2u) * 8u;   // weight loader: tile row lid / 2, k offset 0 or 8
    var c = Acc(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
                vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var k0 = 0u; k0 < kk_total; k0 = k0 + BK) {
        var xv = vec4<f32>(0.0);
        if xoff != 0xFFFFFFFFu {
            let o = xoff + k0 + xk;
            xv = vec4<f32>(m_x[o], m_x[o + 1u], m_x[o + 2u], m_x[o + 3u]);
        }
        let xc = xm / 4u;
        let xs = xm % 4u;
        g_xs[(xk + 0u) * 16u + xc][xs] = xv.x;
        g_xs[(xk + 1u) * 16u + xc][xs] = xv.y;
        g_xs[(xk + 2u) * 16u + xc][xs] = xv.z;
        g_xs[(xk + 3u) * 16u + xc][xs] = xv.w;
        g_load_w8(wrow, kblocks, k0 + wk, wcol, wv);
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk = kk + 1u) {
            let a = g_xs[kk * 16u + ty];
            let b0 = g_ws[kk * 32u + tx];
            let b1 = g_ws[kk * 32u + 16u + tx];
            c.r0l = c.r0l + a.x * b0;
            c.r0h = c.r0h + a.x * b1;
            c.r1l = c.r1l + a.y * b0;
            c.r1h = c.r1h + a.y * b1;
            c.r2l = c.r2l + a.z * b0;
            c.r2h = c.r2h + a.z * b1;
            c.r3l = c.r3l + a.w * b0;
            c.r3h = c.r3h + a.w * b1;
        }
        workgroupBarrier();
    }
    return c;
}

fn g_act(g: f32, u: f32) -> f32 {
    if ACT == 0u {
        return g / (1.0 + exp(-g)) * u;
    }
    let gc = min(g, 7.0);
    let lc = clamp(u, -7.0, 7.0);
    return gc / (1.0 + exp(-1.702 * gc)) * (lc + 1.0);
}

// Grid: x = tile slot, y = ceil(I / 64). A tile covers 64 intermediate columns: weight-tile
// columns 0..63 hold their gate rows and 64..127 their up rows (for either row layout), so the
// epilogue has gate and up of a column in one thread, and each row's two 32-blocks in the tile.
// Output m_out = intermediate [rows, I] (f32 bits).
@compute @workgroup_size(256)
fn gemm1(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = g_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < mp.e0 || tile.x >= mp.e1 {
        return;
    }
    let e = tile.x;
    let start = tile.y;
    let cnt = tile.z - tile.y;
    let h = mp.hidden;
    let inter = mp.inter;
    let jb = wid.y * 64u;
    // x loader row.
    let xm = lid / 4u;
    var xoff = 0xFFFFFFFFu;
    if xm < cnt {
        xoff = (m_rows[start + xm] / mp.top_k) * h;
    }
    // Weight loader: tile row wr = lid / 2 in the expert's natural order, mapped to its column.
    let wr = lid / 2u;
    var c: u32;    // intermediate column within the tile
    var isup: u32;
    var row: u32;  // row within the expert
    if ACT == 0u {
        c = wr % 64u;
        isup = wr / 64u;
        row = isup * inter + jb + c;
    } else {
        c = wr / 2u;
        isup = wr % 2u;
        row = 2u * jb + wr;
    }
    let wv = jb + c < inter;
    let acc = g_kloop(lid, h, xoff, (e - mp.e0) * 2u * inter + row, isup * 64u + c, wv);
    // Epilogue: thread (ty, tx) has rows ty*4+i, columns tx*4+0..3 (gate in the low half of
    // the tile, up in the high half).
    let ty = lid / 16u;
    let tx = lid % 16u;
    let half = tx / 8u; // which 32-block of the tile's 64 columns
    let v0 = g1_act4(e, start, cnt, ty * 4u + 0u, jb + tx * 4u, acc.r0l, acc.r0h);
    let v1 = g1_act4(e, start, cnt, ty * 4u + 1u, jb + tx * 4u, acc.r1l, acc.r1h);
    let v2 = g1_act4(e, start, cnt, ty * 4u + 2u, jb + tx * 4u, acc.r2l, acc.r2h);
    let v3 = g1_act4(e, start, cnt, ty * 4u + 3u, jb + tx * 4u, acc.r3l, acc.r3h);
    if lid < 128u {
        atomicStore(&g_amax[lid], 0u);
    }
    workgroupBarrier();
    if AFMT != 255u {
        atomicMax(&g_amax[(ty * 4u + 0u) * 2u + half], g_max4(v0));
        atomicMax(&g_amax[(ty * 4u + 1u) * 2u + half], g_max4(v1));
        atomicMax(&g_amax[(ty * 4u + 2u) * 2u + half], g_max4(v2));
        atomicMax(&g_amax[(ty * 4u + 3u) * 2u + half], g_max4(v3));
    }
    workgroupBarrier();
    g1_store(start, cnt, ty * 4u + 0u, half, jb + tx * 4u, v0);
    g1_store(start, cnt, ty * 4u + 1u, half, jb + tx * 4u, v1);
    g1_store(start, cnt, ty * 4u + 2u, half, jb + tx * 4u, v2);
    g1_store(start, cnt, ty * 4u + 3u, half, jb + tx * 4u, v3);
}

// Largest |x| of four f32 bit patterns.
fn g_max4(v: vec4<u32>) -> u32 {
    let m = v & vec4<u32>(0x7FFFFFFFu);
    return max(max(m.x, m.y), max(m.z, m.w));
}

// gemm1 epilogue for tile row r, intermediate columns col0..col0+3: bias, router weight on
// input, bf16 points, activation; f32 bits.
fn g1_act4(e: u32, start: u32, cnt: u32, r: u32, col0: u32, gate: vec4<f32>, up: vec4<f32>) -> vec4<u32> {
    let inter = mp.inter;
    var g = gate;
    var u = up;
    if mp.has_bias13 != 0u {
        for (var j = 0u; j < 4u; j = j + 1u) {
            let col = min(col0 + j, inter - 1u);
            var grow: u32;
            var urow: u32;
            if ACT == 0u {
                grow = col;
                urow = inter + col;
            } else {
                grow = 2u * col;
                urow = 2u * col + 1u;
            }
            g[j] = g[j] + m_bias[e * 2u * inter + grow];
            u[j] = u[j] + m_bias[e * 2u * inter + urow];
        }
    }
    if mp.on_input != 0u && r < cnt {
        let rw = m_topw[m_rows[start + r]];
        g = g * rw;
        u = u * rw;
    }
    return vec4<u32>(
        bitcast<u32>(m_bf16(g_act(m_bf16(g.x), m_bf16(u.x)))),
        bitcast<u32>(m_bf16(g_act(m_bf16(g.y), m_bf16(u.y)))),
        bitcast<u32>(m_bf16(g_act(m_bf16(g.z), m_bf16(u.z)))),
        bitcast<u32>(m_bf16(g_act(m_bf16(g.w), m_bf16(u.w)))),
    );
}

// The intermediate QDQ of tile row r (block amax in g_amax) and the store.
fn g1_store(start: u32, cnt: u32, r: u32, half: u32, col0: u32, v: vec4<u32>) {
    let inter = mp.inter;
    if r >= cnt {
        return;
    }
    var byte = 0u;
    if AFMT != 255u {
        byte = mx_scale_byte(AFMT, AMODE, atomicLoad(&g_amax[r * 2u + half]));
    }
    for (var j = 0u; j < 4u; j = j + 1u) {
        let col = col0 + j;
        if col < inter {
            var o = v[j];
            if AFMT != 255u {
                o = act_qdq(o, byte);
            }
            m_out[(start + r) * inter + col] = o;
        }
    }
}

// The intermediate QDQ of one fp32 (bits) whose 32-block has scale byte `byte`
// (shared by the gemm1 and gemv1 epilogues; 0xFF = NaN/Inf block -> NaN).
fn act_qdq(val: u32, byte: u32) -> u32 {
    var code = 0u;
    if byte != 255u {
        code = mx_encode(AFMT, val, i32(byte) - 127);
    }
    return mx_dequant_bits(AFMT, code, byte);
}

// Grid: x = tile slot, y = ceil(H / 128). m_x = intermediate [rows, I]; m_out = y [rows, H].
@compute @workgroup_size(256)
fn gemm2(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = g_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < mp.e0 || tile.x >= mp.e1 {
        return;
    }
    let e = tile.x;
    let start = tile.y;
    let cnt = tile.z - tile.y;
    let h = mp.hidden;
    let inter = mp.inter;
    let nb = wid.y * 128u;
    let xm = lid / 4u;
    var xoff = 0xFFFFFFFFu;
    if xm < cnt {
        xoff = (start + xm) * inter;
    }
    let wr = lid / 2u;
    let wv = nb + wr < h;
    let acc = g_kloop(lid, inter, xoff, (e - mp.e0) * h + nb + wr, wr, wv);
    let ty = lid / 16u;
    let tx = lid % 16u;
    g2_store(e, start, cnt, ty * 4u + 0u, nb + tx * 4u, acc.r0l, acc.r0h);
    g2_store(e, start, cnt, ty * 4u + 1u, nb + tx * 4u, acc.r1l, acc.r1h);
    g2_store(e, start, cnt, ty * 4u + 2u, nb + tx * 4u, acc.r2l, acc.r2h);
    g2_store(e, start, cnt, ty * 4u + 3u, nb + tx * 4u, acc.r3l, acc.r3h);
}

// gemm2 epilogue for tile row r: columns n0..n0+3 (lo) and n0+64.. (hi): bias, router weight.
fn g2_store(e: u32, start: u32, cnt: u32, r: u32, n0: u32, lo: vec4<f32>, hi: vec4<f32>) {
    let h = mp.hidden;
    if r >= cnt {
        return;
    }
    let a = m_rows[start + r];
    var w = 1.0;
    if mp.on_input == 0u {
        w = m_topw[a];
    }
    for (var j = 0u; j < 8u; j = j + 1u) {
        let n = n0 + (j / 4u) * 64u + (j % 4u);
        if n < h {
            var v = select(lo[j % 4u], hi[j % 4u], j >= 4u);
            if mp.has_bias2 != 0u {
                v = v + m_bias[e * h + n];
            }
            if mp.on_input == 0u {
                v = v * w;
            }
            m_out[(start + r) * h + n] = bitcast<u32>(m_bf16(v));
        }
    }
}

var<workgroup> v_x: array<vec4<f32>, 512>;  // lane partials [16 row slots][32 lanes]
var<workgroup> v_res: array<f32, 256>;       // [64 weight rows][TG]

// Row (within the expert) of weight-tile row wr: gemv1 maps 64 rows to the gate and up rows of
// 32 intermediate columns starting at jb; gemv2 takes rows jb + wr.
fn v_row(is1: bool, wr: u32, jb: u32, inter: u32) -> u32 {
    if !is1 {
        return jb + wr;
    }
    if ACT == 0u {
        return select(inter + jb + wr - 32u, jb + wr, wr < 32u);
    }
    return 2u * jb + wr;
}

// The 8 unscaled weight values of elements el0..el0+7 of the block starting at word wb.
struct W8 {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

fn v_w8(wb: u32, el0: u32) -> W8 {
    let cb = mx_spec(WFMT).code_bits;
    if cb == 4u {
        // FP4: one word = 8 codes; a byte-indexed table gives two values per load.
        let wv = m_wdata[wb + el0 / 8u];
        let p0 = v_lut2[wv & 0xFFu];
        let p1 = v_lut2[(wv >> 8u) & 0xFFu];
        let p2 = v_lut2[(wv >> 16u) & 0xFFu];
        let p3 = v_lut2[wv >> 24u];
        return W8(vec4<f32>(p0, p1), vec4<f32>(p2, p3));
    }
    // FP6 / FP8 / INT8: 8 codes span 48 or 64 bits, at most three words.
    let bit0 = el0 * cb;
    let wi = wb + bit0 / 32u;
    let b0 = bit0 % 32u;
    let end = b0 + 8u * cb;
    let w0 = m_wdata[wi];
    var w1 = 0u;
    var w2 = 0u;
    if end > 32u {
        w1 = m_wdata[wi + 1u];
    }
    if end > 64u {
        w2 = m_wdata[wi + 2u];
    }
    return W8(
        vec4<f32>(
            w_lut[w_code3(w0, w1, w2, b0, cb)],
            w_lut[w_code3(w0, w1, w2, b0 + cb, cb)],
            w_lut[w_code3(w0, w1, w2, b0 + 2u * cb, cb)],
            w_lut[w_code3(w0, w1, w2, b0 + 3u * cb, cb)],
        ),
        vec4<f32>(
            w_lut[w_code3(w0, w1, w2, b0 + 4u * cb, cb)],
            w_lut[w_code3(w0, w1, w2, b0 + 5u * cb, cb)],
            w_lut[w_code3(w0, w1, w2, b0 + 6u * cb, cb)],
            w_lut[w_code3(w0, w1, w2, b0 + 7u * cb, cb)],
        ),
    );
}

// A weight row of the tile: its first scale index ((rowbase + row) * kblocks) and whether it
// exists (gemv2's last tile and gemv1's last columns may run past the matrix).
struct VRow {
    sbase: u32,
    ok: bool,
}

fn v_rowinfo(is1: bool, wr: u32, jb: u32, inter: u32, nrows: u32, rowbase: u32,
             kblocks: u32) -> VRow {
    let row = v_row(is1, wr, jb, inter);
    var ok = row < nrows;
    if is1 {
        ok = jb + select(wr / 2u, wr % 32u, ACT == 0u) < inter;
    }
    return VRow((rowbase + min(row, nrows - 1u)) * kblocks, ok);
}

// The 8 weights of octet o (elements 8o..8o+7) of a row, unscaled, and the block scale.
struct WS {
    w: W8,
    sc: f32,
}

fn v_load(rw: VRow, o: u32) -> WS {
    if !rw.ok {
        return WS(W8(vec4<f32>(0.0), vec4<f32>(0.0)), 0.0);
    }
    let cb = mx_spec(WFMT).code_bits;
    let sidx = rw.sbase + o / 4u;
    let sc = w_scale((m_wscale[sidx / 4u] >> (8u * (sidx & 3u))) & 0xFFu);
    return WS(v_w8(sidx * cb, (o % 4u) * 8u), sc);
}

// x elements 8o..8o+7 of the row at xoff (zeros for no row, xoff = 0xFFFFFFFF).
fn v_x8(xoff: u32, o: u32) -> W8 {
    if xoff == 0xFFFFFFFFu {
        return W8(vec4<f32>(0.0), vec4<f32>(0.0));
    }
    let k = xoff + o * 8u;
    return W8(vec4<f32>(m_x[k], m_x[k + 1u], m_x[k + 2u], m_x[k + 3u]),
              vec4<f32>(m_x[k + 4u], m_x[k + 5u], m_x[k + 6u], m_x[k + 7u]));
}

fn v_d1(w: WS, x: W8) -> f32 {
    return (dot(w.w.lo, x.lo) + dot(w.w.hi, x.hi)) * w.sc;
}

fn v_d4(w: WS, x0: W8, x1: W8, x2: W8, x3: W8) -> vec4<f32> {
    return vec4<f32>(
        dot(w.w.lo, x0.lo) + dot(w.w.hi, x0.hi),
        dot(w.w.lo, x1.lo) + dot(w.w.hi, x1.hi),
        dot(w.w.lo, x2.lo) + dot(w.w.hi, x2.hi),
        dot(w.w.lo, x3.lo) + dot(w.w.hi, x3.hi),
    ) * w.sc;
}

// FP4 fast path of v_core: one 32-block (a 16-byte load) per lane and row, x as vec4 loads.
@group(0) @binding(13) var<storage, read> m_wdata4: array<vec4<u32>>;
@group(0) @binding(14) var<storage, read> m_x4: array<vec4<f32>>;

fn v_blk(rw: VRow, b: u32) -> vec4<u32> {
    if !rw.ok {
        return vec4<u32>(0u);
    }
    return m_wdata4[rw.sbase + b];
}

fn v_sc(rw: VRow, b: u32) -> f32 {
    if !rw.ok {
        return 0.0;
    }
    let sidx = rw.sbase + b;
    return w_scale((m_wscale[sidx / 4u] >> (8u * (sidx & 3u))) & 0xFFu);
}

// x elements 8o..8o+7 of the row at xoff (a multiple of 4) as two vec4 loads.
fn v_x8v(xoff: u32, o: u32) -> W8 {
    if xoff == 0xFFFFFFFFu {
        return W8(vec4<f32>(0.0), vec4<f32>(0.0));
    }
    let i = xoff / 4u + 2u * o;
    return W8(m_x4[i], m_x4[i + 1u]);
}

// The 8 FP4 values of one packed word (byte-indexed table: two values per lookup).
fn v_dec(w: u32) -> W8 {
    return W8(vec4<f32>(v_lut2[w & 0xFFu], v_lut2[(w >> 8u) & 0xFFu]),
              vec4<f32>(v_lut2[(w >> 16u) & 0xFFu], v_lut2[w >> 24u]));
}

fn v_dot8(w: W8, x: W8) -> f32 {
    return dot(w.lo, x.lo) + dot(w.hi, x.hi);
}

fn v_dot8x4(w: W8, x0: W8, x1: W8, x2: W8, x3: W8) -> vec4<f32> {
    return vec4<f32>(v_dot8(w, x0), v_dot8(w, x1), v_dot8(w, x2), v_dot8(w, x3));
}

// A whole block (4 words) of one row against one token's x (four octets).
fn v_blk1(q: vec4<u32>, x0: W8, x1: W8, x2: W8, x3: W8) -> f32 {
    return v_dot8(v_dec(q.x), x0) + v_dot8(v_dec(q.y), x1) + v_dot8(v_dec(q.z), x2)
        + v_dot8(v_dec(q.w), x3);
}

// Lane sums of the 8 rows (w0..w7) for one token (s0: rows 0..3, s1: rows 4..7, as .x..w).
struct S8 {
    s0: vec4<f32>,
    s1: vec4<f32>,
}

fn v_fp4_1(lane: u32, kblocks: u32, xo: u32, w0: VRow, w1: VRow, w2: VRow, w3: VRow,
           w4: VRow, w5: VRow, w6: VRow, w7: VRow) -> S8 {
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    for (var b = lane; b < kblocks; b = b + 32u) {
        let q0 = v_blk(w0, b);
        let q1 = v_blk(w1, b);
        let q2 = v_blk(w2, b);
        let q3 = v_blk(w3, b);
        let q4 = v_blk(w4, b);
        let q5 = v_blk(w5, b);
        let q6 = v_blk(w6, b);
        let q7 = v_blk(w7, b);
        let c0 = vec4<f32>(v_sc(w0, b), v_sc(w1, b), v_sc(w2, b), v_sc(w3, b));
        let c1 = vec4<f32>(v_sc(w4, b), v_sc(w5, b), v_sc(w6, b), v_sc(w7, b));
        // The block's 4 words, unrolled by hand (no dynamic vector indexing in the hot loop).
        let x0 = v_x8v(xo, b * 4u);
        let x1 = v_x8v(xo, b * 4u + 1u);
        let x2 = v_x8v(xo, b * 4u + 2u);
        let x3 = v_x8v(xo, b * 4u + 3u);
        let p0 = vec4<f32>(v_blk1(q0, x0, x1, x2, x3), v_blk1(q1, x0, x1, x2, x3),
                           v_blk1(q2, x0, x1, x2, x3), v_blk1(q3, x0, x1, x2, x3));
        let p1 = vec4<f32>(v_blk1(q4, x0, x1, x2, x3), v_blk1(q5, x0, x1, x2, x3),
                           v_blk1(q6, x0, x1, x2, x3), v_blk1(q7, x0, x1, x2, x3));
        s0 = s0 + p0 * c0;
        s1 = s1 + p1 * c1;
    }
    return S8(s0, s1);
}

// Lane sums of the 8 rows for TG = 4 tokens (vec4 over tokens per row).
struct A8 {
    a0: vec4<f32>,
    a1: vec4<f32>,
    a2: vec4<f32>,
    a3: vec4<f32>,
    a4: vec4<f32>,
    a5: vec4<f32>,
    a6: vec4<f32>,
    a7: vec4<f32>,
}

// One word (octet o) of each of the 8 rows' blocks against the TG = 4 tokens' x.
fn v_word4(p: A8, u0: u32, u1: u32, u2: u32, u3: u32, u4: u32, u5: u32, u6: u32, u7: u32,
           xo: vec4<u32>, o: u32) -> A8 {
    let x0 = v_x8v(xo.x, o);
    let x1 = v_x8v(xo.y, o);
    let x2 = v_x8v(xo.z, o);
    let x3 = v_x8v(xo.w, o);
    return A8(p.a0 + v_dot8x4(v_dec(u0), x0, x1, x2, x3),
              p.a1 + v_dot8x4(v_dec(u1), x0, x1, x2, x3),
              p.a2 + v_dot8x4(v_dec(u2), x0, x1, x2, x3),
              p.a3 + v_dot8x4(v_dec(u3), x0, x1, x2, x3),
              p.a4 + v_dot8x4(v_dec(u4), x0, x1, x2, x3),
              p.a5 + v_dot8x4(v_dec(u5), x0, x1, x2, x3),
              p.a6 + v_dot8x4(v_dec(u6), x0, x1, x2, x3),
              p.a7 + v_dot8x4(v_dec(u7), x0, x1, x2, x3));
}

fn v_fp4_4(lane: u32, kblocks: u32, xo: vec4<u32>, w0: VRow, w1: VRow, w2: VRow, w3: VRow,
           w4: VRow, w5: VRow, w6: VRow, w7: VRow) -> A8 {
    var a = A8(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
               vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var b = lane; b < kblocks; b = b + 32u) {
        let q0 = v_blk(w0, b);
        let q1 = v_blk(w1, b);
        let q2 = v_blk(w2, b);
        let q3 = v_blk(w3, b);
        let q4 = v_blk(w4, b);
        let q5 = v_blk(w5, b);
        let q6 = v_blk(w6, b);
        let q7 = v_blk(w7, b);
        var p = A8(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
                   vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
        p = v_word4(p, q0.x, q1.x, q2.x, q3.x, q4.x, q5.x, q6.x, q7.x, xo, b * 4u);
        p = v_word4(p, q0.y, q1.y, q2.y, q3.y, q4.y, q5.y, q6.y, q7.y, xo, b * 4u + 1u);
        p = v_word4(p, q0.z, q1.z, q2.z, q3.z, q4.z, q5.z, q6.z, q7.z, xo, b * 4u + 2u);
        p = v_word4(p, q0.w, q1.w, q2.w, q3.w, q4.w, q5.w, q6.w, q7.w, xo, b * 4u + 3u);
        a.a0 = a.a0 + p.a0 * v_sc(w0, b);
        a.a1 = a.a1 + p.a1 * v_sc(w1, b);
        a.a2 = a.a2 + p.a2 * v_sc(w2, b);
        a.a3 = a.a3 + p.a3 * v_sc(w3, b);
        a.a4 = a.a4 + p.a4 * v_sc(w4, b);
        a.a5 = a.a5 + p.a5 * v_sc(w5, b);
        a.a6 = a.a6 + p.a6 * v_sc(w6, b);
        a.a7 = a.a7 + p.a7 * v_sc(w7, b);
    }
    return a;
}

// Sum the 32 lanes of the 16 row slots in v_x[slot * 32 + lane] into v_x[slot * 32], pairwise
// in a fixed order (deterministic). Call with v_x filled by every thread and not yet synced.
fn v_tree(lid: u32) {
    let slot = lid / 16u;
    let q = lid % 16u;
    for (var s = 16u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if q < s {
            v_x[slot * 32u + q] = v_x[slot * 32u + q] + v_x[slot * 32u + q + s];
        }
    }
    workgroupBarrier();
}

// v_res[wr * TG + t] = sum_k W[row(wr), k] * x[t, k] for the tile's cnt (<= TG = 4) rows.
// gemv1: x rows are gathered tokens of m_x (K = H); gemv2: rows start + t of m_x (K = I).
// Thread (r = lid / 32, lane): weight rows r + 8i (i < 8); lanes along K in octets of 8
// elements (consecutive lanes read consecutive packed words: coalesced), x read straight from
// m_x (cached), no barriers in the K loop; one token's tile (decode) runs a 1-token loop.
// Lane partials are then summed in workgroup memory in a fixed pairwise order.
// Everything per thread lives in named values (no dynamically indexed private arrays).
fn v_core(lid: u32, is1: bool, e: u32, start: u32, cnt: u32, jb: u32) {
    let h = mp.hidden;
    let inter = mp.inter;
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
    let rowbase = (e - mp.e0) * per_e;
    let r = lid / 32u;
    let lane = lid % 32u;
    let w0 = v_rowinfo(is1, r, jb, inter, nrows, rowbase, kblocks);
    let w1 = v_rowinfo(is1, r + 8u, jb, inter, nrows, rowbase, kblocks);
    let w2 = v_rowinfo(is1, r + 16u, jb, inter, nrows, rowbase, kblocks);
    let w3 = v_rowinfo(is1, r + 24u, jb, inter, nrows, rowbase, kblocks);
    let w4 = v_rowinfo(is1, r + 32u, jb, inter, nrows, rowbase, kblocks);
    let w5 = v_rowinfo(is1, r + 40u, jb, inter, nrows, rowbase, kblocks);
    let w6 = v_rowinfo(is1, r + 48u, jb, inter, nrows, rowbase, kblocks);
    let w7 = v_rowinfo(is1, r + 56u, jb, inter, nrows, rowbase, kblocks);
    var xo = vec4<u32>(0xFFFFFFFFu);
    for (var t = 0u; t < TG; t = t + 1u) {
        if t < cnt {
            if is1 {
                xo[t] = (m_rows[start + t] / mp.top_k) * kk;
            } else {
                xo[t] = (start + t) * kk;
            }
        }
    }
    let fp4 = mx_spec(WFMT).code_bits == 4u;
    if cnt == 1u {
        var s0 = vec4<f32>(0.0); // rows r, r+8, r+16, r+24
        var s1 = vec4<f32>(0.0); // rows r+32, .., r+56
        if fp4 {
            let s = v_fp4_1(lane, kblocks, xo.x, w0, w1, w2, w3, w4, w5, w6, w7);
            s0 = s.s0;
            s1 = s.s1;
        }
        for (var o = select(lane, noct, fp4); o < noct; o = o + 32u) {
            let x = v_x8(xo.x, o);
            s0 = s0 + vec4<f32>(v_d1(v_load(w0, o), x), v_d1(v_load(w1, o), x),
                                v_d1(v_load(w2, o), x), v_d1(v_load(w3, o), x));
            s1 = s1 + vec4<f32>(v_d1(v_load(w4, o), x), v_d1(v_load(w5, o), x),
                                v_d1(v_load(w6, o), x), v_d1(v_load(w7, o), x));
        }
        v_x[(r * 2u) * 32u + lane] = s0;
        v_x[(r * 2u + 1u) * 32u + lane] = s1;
        v_tree(lid);
        if lid < 64u {
            // slot (r, q), component c: row r + 8 * (4q + c)
            let rr = lid / 8u;
            let q = (lid / 4u) % 2u;
            let c = lid % 4u;
            let wr = rr + 8u * (4u * q + c);
            v_res[wr * TG] = v_x[(rr * 2u + q) * 32u][c];
            v_res[wr * TG + 1u] = 0.0;
            v_res[wr * TG + 2u] = 0.0;
            v_res[wr * TG + 3u] = 0.0;
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
        let a = v_fp4_4(lane, kblocks, xo, w0, w1, w2, w3, w4, w5, w6, w7);
        a0 = a.a0;
        a1 = a.a1;
        a2 = a.a2;
        a3 = a.a3;
        a4 = a.a4;
        a5 = a.a5;
        a6 = a.a6;
        a7 = a.a7;
    }
    for (var o = select(lane, noct, fp4); o < noct; o = o + 32u) {
        let x0 = v_x8(xo.x, o);
        let x1 = v_x8(xo.y, o);
        let x2 = v_x8(xo.z, o);
        let x3 = v_x8(xo.w, o);
        a0 = a0 + v_d4(v_load(w0, o), x0, x1, x2, x3);
        a1 = a1 + v_d4(v_load(w1, o), x0, x1, x2, x3);
        a2 = a2 + v_d4(v_load(w2, o), x0, x1, x2, x3);
        a3 = a3 + v_d4(v_load(w3, o), x0, x1, x2, x3);
        a4 = a4 + v_d4(v_load(w4, o), x0, x1, x2, x3);
        a5 = a5 + v_d4(v_load(w5, o), x0, x1, x2, x3);
        a6 = a6 + v_d4(v_load(w6, o), x0, x1, x2, x3);
        a7 = a7 + v_d4(v_load(w7, o), x0, x1, x2, x3);
    }
    // Two rows per round: slot (r, q) holds row r + 8 * (2 * round + q), all TG tokens.
    for (var round = 0u; round < 4u; round = round + 1u) {
        var p0: vec4<f32>;
        var p1: vec4<f32>;
        switch round {
            case 0u: { p0 = a0; p1 = a1; }
            case 1u: { p0 = a2; p1 = a3; }
            case 2u: { p0 = a4; p1 = a5; }
            default: { p0 = a6; p1 = a7; }
        }
        v_x[(r * 2u) * 32u + lane] = p0;
        v_x[(r * 2u + 1u) * 32u + lane] = p1;
        v_tree(lid);
        if lid < 64u {
            let rr = lid / 8u;
            let q = (lid / 4u) % 2u;
            let t = lid % 4u;
            v_res[(rr + 8u * (2u * round + q)) * TG + t] = v_x[(rr * 2u + q) * 32u][t];
        }
        workgroupBarrier();
    }
}

// Grid: x = tile slot (tiles of TG rows), y = I / 32. Same epilogue as gemm1.
@compute @workgroup_size(256)
fn gemv1(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = g_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < mp.e0 || tile.x >= mp.e1 {
        return;
    }
    let e = tile.x;
    let start = tile.y;
    let cnt = tile.z - tile.y;
    let inter = mp.inter;
    let jb = wid.y * 32u;
    v_core(lid, true, e, start, cnt, jb);
    let t = min(lid / 32u, TG - 1u); // threads of t >= TG duplicate row TG-1 and never store
    let tv = lid / 32u < cnt;
    let c = lid % 32u;
    let j = jb + c;
    var gi: u32;
    var ui: u32;
    var grow: u32;
    var urow: u32;
    if ACT == 0u {
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
    var g = v_res[gi * TG + t];
    var u = v_res[ui * TG + t];
    if mp.has_bias13 != 0u {
        g = g + m_bias[e * 2u * inter + grow];
        u = u + m_bias[e * 2u * inter + urow];
    }
    if mp.on_input != 0u && tv {
        let rw = m_topw[m_rows[start + t]];
        g = g * rw;
        u = u * rw;
    }
    var val = bitcast<u32>(m_bf16(g_act(m_bf16(g), m_bf16(u))));
    if lid < 32u {
        atomicStore(&g_amax[lid], 0u);
    }
    workgroupBarrier();
    if AFMT != 255u && tv {
        atomicMax(&g_amax[t], val & 0x7FFFFFFFu);
    }
    workgroupBarrier();
    if tv {
        if AFMT != 255u {
            val = act_qdq(val, mx_scale_byte(AFMT, AMODE, atomicLoad(&g_amax[t])));
        }
        m_out[(start + t) * inter + j] = val;
    }
}

// Grid: x = tile slot (tiles of TG rows), y = ceil(H / 64). Same epilogue as gemm2.
@compute @workgroup_size(256)
fn gemv2(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = g_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < mp.e0 || tile.x >= mp.e1 {
        return;
    }
    let e = tile.x;
    let start = tile.y;
    let cnt = tile.z - tile.y;
    let h = mp.hidden;
    let nb = wid.y * 64u;
    v_core(lid, false, e, start, cnt, nb);
    for (var idx = lid; idx < 64u * TG; idx = idx + 256u) {
        let wr = idx % 64u;
        let t = idx / 64u;
        let n = nb + wr;
        if t < cnt && n < h {
            var v = v_res[wr * TG + t];
            if mp.has_bias2 != 0u {
                v = v + m_bias[e * h + n];
            }
            if mp.on_input == 0u {
                v = v * m_topw[m_rows[start + t]];
            }
            m_out[(start + t) * h + n] = bitcast<u32>(m_bf16(v));
        }
    }
}

// One invocation per output element; 2-D grid of 256-wide workgroups.
@compute @workgroup_size(256)
fn combine(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = (wid.y * nwg.x + wid.x) * 256u + lid;
    let h = mp.hidden;
    if idx >= mp.m * h {
        return;
    }
    let t = idx / h;
    let n = idx % h;
    var acc = 0.0;
    for (var j = 0u; j < mp.top_k; j = j + 1u) {
        let p = m_slot[t * mp.top_k + j];
        if p >= 0 {
            acc = acc + m_y[u32(p) * h + n];
        }
    }
    m_out[idx] = bitcast<u32>(m_bf16(acc));
}
