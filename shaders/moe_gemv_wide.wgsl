// moe_gemv_wide.wgsl: the "wide" layout of the decode GEMV (entry points gemv1_wide,
// gemv2_wide; the host picks them with GemvConfig::wide, MXMOE_GEMV_WIDE=1). Same tiles, grid,
// lane groups, reductions and epilogues as moe_gemv.wgsl's gemv1/gemv2; what differs is where
// each lane's operands come from, aimed at the load shape the H200 profile blamed
// (docs/h200-2026-12-01-wgpudecode: the words layout's loads alone read at 1.0-1.5 TB/s, 4-byte
// code loads per lane, a scale load per row and step, x loads from global memory):
//
//   codes   FP4: lane l of a group takes the whole 32-blocks l, l + GEMV_LANES, ... of its 8
//           rows: one 16-byte load (vec4<u32>, one MX block) per row and step, a group's lanes
//           reading consecutive blocks of a row (the blocks layout's loads, GEMV_WORDS = 0);
//           GEMV_PREFETCH loads the next step's 8 blocks before this step's math.
//   x       the tile's tokens' x for a chunk of WIDE_CHUNK_1 (1 token) or WIDE_CHUNK_N (2 or 4
//           tokens) 32-blocks is staged once per workgroup in workgroup memory (f32, coalesced
//           vec4 loads by all invocations), then read from there by all 8 lane groups (the
//           blocks layout read it from global memory, one 128-byte line per lane and step). Each
//           staged block is 8 vec4s stored at position j ^ (block & 7) (an XOR swizzle, no
//           padding), so the 8 lanes of a quarter warp reading consecutive blocks' vec4 j hit 8
//           different 16-byte bank groups.
//   scales  the E8M0 bytes of the 64 rows x the chunk's blocks are staged with u32 loads (4
//           bytes each, consecutive invocations reading consecutive words of a row; rows that
//           do not start on a word boundary take a funnel shift of two words), then read from
//           workgroup memory: no global scale loads in the step loop.
//
// Chunks: the staging areas hold WIDE_XS_VEC4 vec4s of x and WIDE_SC_PITCH words of scales per
// row, so K is walked in chunks (two barriers each); a lane still takes the blocks l,
// l + GEMV_LANES, ... in that order (a block belongs to exactly one chunk), so every lane
// computes the same expressions in the same order as the blocks layout (fp4_blk_1token_x,
// fp4_word_4tokens_x, fp4_blk_4tokens_scale are shared with it) and the results equal the blocks
// layout's up to the compiler's contraction choices; the reductions are the same functions.
//
// Sizes: the staging needs 16 KB + 3.75 KB of workgroup memory. Composed with the subgroup
// reduction, gemv1_wide uses ~31.8 KB in all (fits the 32 KB of lavapipe); with the
// workgroup-memory reduction ~35.8 KB (the host refuses the wide layout where the adapter's
// limit is lower: Context::set_gemv).
//
// Other weight formats (FP6, FP8, INT8: wide_generic below): lanes take half blocks (16 codes:
// one 16-byte load for 8-bit codes, three 4-byte loads for FP6), 2 lanes per 32-block, x and
// scales staged the same way, values through the code table, each octet scaled on its own as
// moe_gemv.wgsl's gemv_generic (a different lane order from it: within the contract, not equal).

const WIDE_XS_VEC4: u32 = 1024u;  // staged x: [token][block][8 vec4]
const WIDE_SC_PITCH: u32 = 15u;   // staged scale words per row (60 blocks)
const WIDE_CHUNK_1: u32 = 60u;    // blocks per chunk for 1 token: 60 x 8 vec4, 15 words a row
const WIDE_CHUNK_N: u32 = 32u;    // blocks per chunk for 2-4 tokens: 4 x 32 x 8 vec4

var<workgroup> wide_x: array<vec4<f32>, 1024>;
var<workgroup> wide_sc: array<u32, 960>; // [64 rows][WIDE_SC_PITCH words]

// Stage the chunk of blocks [c0, c0 + chb) (chb <= WIDE_CHUNK_1 for 1 token, <= WIDE_CHUNK_N
// else): x of tokens 0..ntok-1 (zeros past K or for tokens without a row) and the 64 rows'
// scale bytes. Call between two barriers.
fn wide_stage(lid: u32, is1: bool, jb: u32, gm: GemvGeom, ntok: u32, chb: u32, c0: u32) {
    let per_tok = chb * 8u;
    for (var i = lid; i < ntok * per_tok; i = i + GEMV_THREADS) {
        let t = i / per_tok;
        let r = i % per_tok;
        let bl = r / 8u;
        let j = r % 8u;
        let b = c0 + bl;
        let off = gm.xo[t];
        var v = vec4<f32>(0.0);
        if b < gm.kblocks && off != 0xFFFFFFFFu {
            v = x_in_vec4[off / 4u + b * 8u + j];
        }
        wide_x[(t * chb + bl) * 8u + (j ^ (bl & 7u))] = v;
    }
    let words = (chb + 3u) / 4u;
    for (var i = lid; i < 64u * words; i = i + GEMV_THREADS) {
        let wr = i / words;
        let w = i % words;
        // Byte index of block c0 + 4w of tile row wr in w_scales (past the row's end: the next
        // row's bytes or the clamped end of the buffer, never read back).
        let s = gemv_row_block(is1, wr, jb, params.inter, gm.nrows, gm.rowbase, gm.kblocks)
            + c0 + 4u * w;
        let sh = 8u * (s & 3u);
        var v = w_scales[s / 4u] >> sh;
        if sh != 0u {
            v = v | (w_scales[s / 4u + 1u] << (32u - sh));
        }
        wide_sc[wr * WIDE_SC_PITCH + w] = v;
    }
}

// The staged scale of tile row wr, chunk block bl, as f32 (block_scale_at's bits).
fn wide_scale(wr: u32, bl: u32) -> f32 {
    return e8m0_branchless((wide_sc[wr * WIDE_SC_PITCH + bl / 4u] >> (8u * (bl & 3u))) & 0xFFu);
}

// Octet o (0..3) of chunk block bl of staged token t (zeros for t >= ntok).
fn wide_x_octet(t: u32, ntok: u32, chb: u32, bl: u32, o: u32) -> Octet {
    if t >= ntok {
        return Octet(vec4<f32>(0.0), vec4<f32>(0.0));
    }
    let base = (t * chb + bl) * 8u;
    let sw = bl & 7u;
    return Octet(wide_x[base + ((2u * o) ^ sw)], wide_x[base + ((2u * o + 1u) ^ sw)]);
}

// The 16-byte code blocks of the 8 rows at block b (scales come from workgroup memory).
fn wide_load_codes(w: Rows8, b: u32) -> Blk8 {
    let z = vec4<f32>(0.0);
    return Blk8(w_codes_vec4[w.r0 + b], w_codes_vec4[w.r1 + b], w_codes_vec4[w.r2 + b],
                w_codes_vec4[w.r3 + b], w_codes_vec4[w.r4 + b], w_codes_vec4[w.r5 + b],
                w_codes_vec4[w.r6 + b], w_codes_vec4[w.r7 + b], z, z);
}

// row_sums for the tile (as gemv_core), the wide layout.
fn gemv_core_wide(lid: u32, is1: bool, e: u32, start: u32, cnt: u32, jb: u32) {
    let gm = gemv_geom(lid, is1, e, start, cnt, jb);
    let lane = lid % GEMV_LANES;
    let r0 = (lid / GEMV_LANES) * 8u;
    let kblocks = gm.kblocks;
    var ntok = 4u;
    var chb = WIDE_CHUNK_N;
    if cnt == 1u {
        ntok = 1u;
        chb = WIDE_CHUNK_1;
    } else if cnt == 2u {
        ntok = 2u;
    }
    if mx_spec(WEIGHT_FMT).code_bits != 4u {
        gemv_reduce4(lid, wide_generic(lid, is1, jb, gm, ntok, chb));
        return;
    }
    let z = vec4<f32>(0.0);
    var s0 = z; // one token: rows 0..3
    var s1 = z; // rows 4..7
    var a = FourTokenSums(z, z, z, z, z, z, z, z);
    var b = lane;
    var k = Blk8(vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u),
                 vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u), z, z);
    if b < kblocks {
        k = wide_load_codes(gm.rb, b);
    }
    for (var c0 = 0u; c0 < kblocks; c0 = c0 + chb) {
        workgroupBarrier(); // the previous chunk's reads are done
        wide_stage(lid, is1, jb, gm, ntok, chb, c0);
        workgroupBarrier();
        let cend = min(c0 + chb, kblocks);
        for (; b < cend; b = b + GEMV_LANES) {
            var kn = k;
            if GEMV_PREFETCH != 0u {
                kn = wide_load_codes(gm.rb, min(b + GEMV_LANES, kblocks - 1u));
            }
            let bl = b - c0;
            k.s_lo = vec4<f32>(wide_scale(r0, bl), wide_scale(r0 + 1u, bl),
                               wide_scale(r0 + 2u, bl), wide_scale(r0 + 3u, bl));
            k.s_hi = vec4<f32>(wide_scale(r0 + 4u, bl), wide_scale(r0 + 5u, bl),
                               wide_scale(r0 + 6u, bl), wide_scale(r0 + 7u, bl));
            if cnt == 1u {
                let p = fp4_blk_1token_x(k, wide_x_octet(0u, 1u, chb, bl, 0u),
                                         wide_x_octet(0u, 1u, chb, bl, 1u),
                                         wide_x_octet(0u, 1u, chb, bl, 2u),
                                         wide_x_octet(0u, 1u, chb, bl, 3u));
                s0 = s0 + p[0];
                s1 = s1 + p[1];
            } else {
                var p = FourTokenSums(z, z, z, z, z, z, z, z);
                p = fp4_word_4tokens_x(p, k.q0.x, k.q1.x, k.q2.x, k.q3.x, k.q4.x, k.q5.x,
                                       k.q6.x, k.q7.x, wide_x_octet(0u, ntok, chb, bl, 0u),
                                       wide_x_octet(1u, ntok, chb, bl, 0u),
                                       wide_x_octet(2u, ntok, chb, bl, 0u),
                                       wide_x_octet(3u, ntok, chb, bl, 0u));
                p = fp4_word_4tokens_x(p, k.q0.y, k.q1.y, k.q2.y, k.q3.y, k.q4.y, k.q5.y,
                                       k.q6.y, k.q7.y, wide_x_octet(0u, ntok, chb, bl, 1u),
                                       wide_x_octet(1u, ntok, chb, bl, 1u),
                                       wide_x_octet(2u, ntok, chb, bl, 1u),
                                       wide_x_octet(3u, ntok, chb, bl, 1u));
                p = fp4_word_4tokens_x(p, k.q0.z, k.q1.z, k.q2.z, k.q3.z, k.q4.z, k.q5.z,
                                       k.q6.z, k.q7.z, wide_x_octet(0u, ntok, chb, bl, 2u),
                                       wide_x_octet(1u, ntok, chb, bl, 2u),
                                       wide_x_octet(2u, ntok, chb, bl, 2u),
                                       wide_x_octet(3u, ntok, chb, bl, 2u));
                p = fp4_word_4tokens_x(p, k.q0.w, k.q1.w, k.q2.w, k.q3.w, k.q4.w, k.q5.w,
                                       k.q6.w, k.q7.w, wide_x_octet(0u, ntok, chb, bl, 3u),
                                       wide_x_octet(1u, ntok, chb, bl, 3u),
                                       wide_x_octet(2u, ntok, chb, bl, 3u),
                                       wide_x_octet(3u, ntok, chb, bl, 3u));
                a = fp4_blk_4tokens_scale(a, p, k);
            }
            if GEMV_PREFETCH != 0u {
                k = kn;
            } else if b + GEMV_LANES < kblocks {
                k = wide_load_codes(gm.rb, b + GEMV_LANES);
            }
        }
    }
    if cnt == 1u {
        gemv_reduce1(lid, array<vec4<f32>, 2>(s0, s1));
    } else {
        gemv_reduce4(lid, array<vec4<f32>, 8>(a.row0, a.row1, a.row2, a.row3, a.row4, a.row5,
                                              a.row6, a.row7));
    }
}

// FP6, FP8, INT8 weights (code_bits 6 or 8): a 32-block's codes are code_bits words from a word
// boundary (docs/NUMERICS.md 9), so a half block (16 codes) is 3 words (FP6) or one aligned
// 16-byte vec4 (8-bit codes: rows start at 32 x kblocks bytes). Lane l takes the half blocks l,
// l + GEMV_LANES, ... of its 8 rows: one vec4 load (8-bit) or three u32 loads (FP6) per row and
// step, 2 lanes per 32-block. Values through the code table (exact), each octet's dot product
// scaled on its own as gemv_generic does (only the lane that sums an octet differs from it).
fn wide_load_half(rb: u32, h: u32, cb: u32) -> vec4<u32> {
    if cb == 8u {
        return w_codes_vec4[rb * 2u + h];
    }
    let w = rb * cb + h * (cb / 2u);
    return vec4<u32>(w_codes[w], w_codes[w + 1u], w_codes[w + 2u], 0u);
}

// Code k (< 16) of a half block loaded by wide_load_half.
fn wide_code(q: vec4<u32>, k: u32, cb: u32) -> u32 {
    if cb == 8u {
        return (q[k / 4u] >> (8u * (k % 4u))) & 0xFFu;
    }
    return code_in_3_words(q.x, q.y, q.z, k * cb, cb);
}

// Values of codes k0..k0+7 of a half block (scale 1).
fn wide_octet_values(q: vec4<u32>, k0: u32, cb: u32) -> Octet {
    return Octet(vec4<f32>(code_value[wide_code(q, k0, cb)], code_value[wide_code(q, k0 + 1u, cb)],
                           code_value[wide_code(q, k0 + 2u, cb)],
                           code_value[wide_code(q, k0 + 3u, cb)]),
                 vec4<f32>(code_value[wide_code(q, k0 + 4u, cb)],
                           code_value[wide_code(q, k0 + 5u, cb)],
                           code_value[wide_code(q, k0 + 6u, cb)],
                           code_value[wide_code(q, k0 + 7u, cb)]));
}

// The 4 tokens' x octets of the two octets of a half block.
struct HalfX {
    a0: Octet,
    a1: Octet,
    a2: Octet,
    a3: Octet,
    b0: Octet,
    b1: Octet,
    b2: Octet,
    b3: Octet,
}

// acc + one row's half block h (scale s) against the 4 tokens.
fn wide_generic_row(acc: vec4<f32>, rb: u32, h: u32, cb: u32, s: f32, x: HalfX) -> vec4<f32> {
    let q = wide_load_half(rb, h, cb);
    let lo = dot_octet_4tokens(wide_octet_values(q, 0u, cb), x.a0, x.a1, x.a2, x.a3) * s;
    let hi = dot_octet_4tokens(wide_octet_values(q, 8u, cb), x.b0, x.b1, x.b2, x.b3) * s;
    return acc + lo + hi;
}

fn wide_generic(lid: u32, is1: bool, jb: u32, gm: GemvGeom, ntok: u32,
                chb: u32) -> array<vec4<f32>, 8> {
    let cb = mx_spec(WEIGHT_FMT).code_bits;
    let lane = lid % GEMV_LANES;
    let r0 = (lid / GEMV_LANES) * 8u;
    let rb = gm.rb;
    let z = vec4<f32>(0.0);
    var a = FourTokenSums(z, z, z, z, z, z, z, z);
    var h = lane;
    for (var c0 = 0u; c0 < gm.kblocks; c0 = c0 + chb) {
        workgroupBarrier(); // the previous chunk's reads are done
        wide_stage(lid, is1, jb, gm, ntok, chb, c0);
        workgroupBarrier();
        let hend = 2u * min(c0 + chb, gm.kblocks);
        for (; h < hend; h = h + GEMV_LANES) {
            let bl = h / 2u - c0;
            let o = 2u * (h % 2u);
            let x = HalfX(wide_x_octet(0u, ntok, chb, bl, o), wide_x_octet(1u, ntok, chb, bl, o),
                          wide_x_octet(2u, ntok, chb, bl, o), wide_x_octet(3u, ntok, chb, bl, o),
                          wide_x_octet(0u, ntok, chb, bl, o + 1u),
                          wide_x_octet(1u, ntok, chb, bl, o + 1u),
                          wide_x_octet(2u, ntok, chb, bl, o + 1u),
                          wide_x_octet(3u, ntok, chb, bl, o + 1u));
            a.row0 = wide_generic_row(a.row0, rb.r0, h, cb, wide_scale(r0, bl), x);
            a.row1 = wide_generic_row(a.row1, rb.r1, h, cb, wide_scale(r0 + 1u, bl), x);
            a.row2 = wide_generic_row(a.row2, rb.r2, h, cb, wide_scale(r0 + 2u, bl), x);
            a.row3 = wide_generic_row(a.row3, rb.r3, h, cb, wide_scale(r0 + 3u, bl), x);
            a.row4 = wide_generic_row(a.row4, rb.r4, h, cb, wide_scale(r0 + 4u, bl), x);
            a.row5 = wide_generic_row(a.row5, rb.r5, h, cb, wide_scale(r0 + 5u, bl), x);
            a.row6 = wide_generic_row(a.row6, rb.r6, h, cb, wide_scale(r0 + 6u, bl), x);
            a.row7 = wide_generic_row(a.row7, rb.r7, h, cb, wide_scale(r0 + 7u, bl), x);
        }
    }
    return array<vec4<f32>, 8>(a.row0, a.row1, a.row2, a.row3, a.row4, a.row5, a.row6, a.row7);
}

// gemv1 in the wide layout: same grid, tile and epilogue.
@compute @workgroup_size(GEMV_THREADS)
fn gemv1_wide(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = gemv1_tile(lid, wid);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    gemv_core_wide(lid, true, tile.x, tile.y, tile.z - tile.y, wid.y * 32u);
    gemv1_epilogue(lid, tile, wid.y * 32u);
}

// gemv2 in the wide layout: same grid, tile and epilogue.
@compute @workgroup_size(GEMV_THREADS)
fn gemv2_wide(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = gemv_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        gemv2_no_tiles(lid, tile, wid);
        return;
    }
    gemv_core_wide(lid, false, tile.x, tile.y, tile.z - tile.y, wid.y * 64u);
    gemv2_epilogue(lid, tile, wid.y * 64u);
    gemv2_fused_combine(lid, wid.y);
}
