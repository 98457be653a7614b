// moe_gemv.wgsl: the decode expert passes, grouped GEMV (moe_common.wgsl has the overview).
//
// Over 600 lines: the FP4 paths (32-blocks or words per lane, x 1 or 4 tokens) are written out
// over the 8 rows of a lane group in named values (the loop-over-private-arrays form ran slower
// on the H200, docs/h200-2026-12-01-perf), and gemv1's own row-list builder lives here too.
//
//   gemv1  a tile of <= 4 rows (token-expert pairs) of one expert x 64 weight rows (the gate and
//          up rows of 32 intermediate columns); the gemm1 epilogue (bias, router weight on
//          input, activation, intermediate QDQ over the 32-column block)
//   gemv2  the same over W2 (64 output columns), the gemm2 epilogue (bias, router weight)
//
// A workgroup is GEMV_WROWS / GEMV_R lane groups of GEMV_LANES lanes: group g owns the weight
// rows g * GEMV_R .. + GEMV_R - 1 of the tile, its lanes run along K: FP4 lanes take 8-code words
// (GEMV_WORDS = 1, the host's default: coalesced code and x loads) or 32-blocks (16-byte loads),
// other formats octets; optionally the next word/block is loaded before the current one's math
// (GEMV_PREFETCH). x is loaded once per lane and used for all GEMV_R rows. The lane sums of
// each row are reduced by gemv_reduce1/4, which live in moe_gemv_reduce_{subgroup,shared}.wgsl:
// subgroupAdd where the adapter has subgroups of exactly GEMV_LANES consecutive invocations
// (checked at start-up), else a workgroup-memory tree (GEMV_LANES = 32, 256 threads). The FP4
// word decode is moe_gemv_fp4_{registers,table}.wgsl (FP4_WORD_SCALE: the registers decode gives
// the values times 2^-14, so block/word sums are multiplied back by 2^14 once, before the scale).
// Each lane's block sums are scaled and accumulated in block order; rows never mix (the
// reductions' order is fixed per adapter, so results are deterministic).

const GEMV_TILE_ROWS: u32 = 4u; // rows (token-expert pairs) per GEMV tile
const GEMV_WROWS: u32 = 64u;    // weight rows per workgroup

const GEMV_R: u32 = 8u;            // weight rows per lane group
override GEMV_LANES: u32 = 32u;    // lanes per group (along K)
override GEMV_THREADS: u32 = 256u; // (GEMV_WROWS / GEMV_R) * GEMV_LANES, set by the host
override GEMV_PREFETCH: u32 = 0u;  // 1: load the next block before this block's math
// 0: lane l takes whole 32-blocks (16-byte loads); its x block is 128 bytes, so a warp's x loads
//    are 128 bytes apart (one cache line per lane).
// 1: lane l takes words (8 codes, 4-byte loads) l, l + GEMV_LANES, ...: a row's lanes read 128
//    consecutive bytes of codes and 1 KB of consecutive x (coalesced), scales per word.
override GEMV_WORDS: u32 = 0u;
// 1: gemv1 builds the row and tile lists itself (no `lists` pass; decode sizes, at most
//    GEMV_LIST_MAX pairs): every workgroup derives them from topk_ids in workgroup memory, and
//    workgroup (0, 0) writes them out for gemv2 and combine (moe_lists.wgsl's outputs, rows in
//    (expert, pair) order).
override GEMV_OWN_LISTS: u32 = 0u;
const GEMV_LIST_MAX: u32 = 256u;
// 1: gemv2 also does the combine (decode sizes: the host sets it up to 16 tokens): after its
//    tile's rows are stored, a workgroup counts itself in fc_count[its 64-column slice]; the
//    slice's last one (the count reaching tiles[0], over every weight chunk's dispatch) sums the
//    k slots of every token for those 64 columns exactly as moe_combine.wgsl does (same reads,
//    same order: the same bits) and writes fc_out. The stores are published and the sums read
//    across a storageBarrier (device-scope acquire/release) on each side of the counter, the
//    pattern of CUDA's threadFenceReduction sample; a slice's rows are 256-byte, 128-byte aligned
//    pieces (H is a multiple of 32) that no other workgroup of the pass reads, so no stale cache
//    line can be read. Saves the combine pass (its launch and its read of the rows).
override GEMV_FUSE_COMBINE: u32 = 0u;
// 1: every tile has one row (the host sets it for one-token forwards: the k experts of a token
//    are distinct), so the FP4 paths compile the one-token code only. The 4-token code holds
//    ~4x the accumulators and x values; in the same pipeline its registers set the occupancy of
//    the one-token path too. Same code on the same data: the same bits.
override GEMV_ONE_ROW: u32 = 0u;
var<workgroup> fc_last: u32;
// Diagnostic, never for results (`MXMOE_DIAG_GEMV_LOADS_ONLY=1`, bench --no-check): the FP4 words
// paths load codes, scales and x as usual but replace the decode and the dot products by one
// multiply-add per 4 rows, so a timing shows what the loads alone cost in this kernel's shape.
override GEMV_DIAG_LOADS: u32 = 0u;

var<workgroup> fl_expert: array<i32, 256>; // own lists: local expert of pair a (-1: none)
var<workgroup> fl_pair: array<u32, 256>;   // own lists: pair of row p
var<workgroup> fl_tile: array<u32, 256>;   // own lists: row p starts a tile: 1 + its length

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

// The E8M0 scale of 32-block `sidx` as f32, as e8m0_value gives it but without branches: the
// byte in the exponent field, and bit 22 set for the two special bytes (0 -> 0x00400000 =
// 2^-127, 255 -> 0x7FC00000 = MX_NAN), which (byte + 1) & 0xFF < 2 picks out.
fn block_scale_at(sidx: u32) -> f32 {
    return e8m0_branchless((w_scale_word(sidx / 4u) >> (8u * (sidx & 3u))) & 0xFFu);
}

// E8M0 byte -> f32 as block_scale_at (also the wide layout's, moe_gemv_wide.wgsl).
fn e8m0_branchless(byte: u32) -> f32 {
    let special = ((byte + 1u) & 0xFFu) < 2u;
    return bitcast<f32>((byte << 23u) | select(0u, 0x00400000u, special));
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

// The 8 rows of a lane group: the first 32-block index of each (gemv_row_block).
struct Rows8 {
    r0: u32,
    r1: u32,
    r2: u32,
    r3: u32,
    r4: u32,
    r5: u32,
    r6: u32,
    r7: u32,
}

// Block b of the 8 rows: 16 bytes of codes each (one vec4<u32> load) and the 8 scales.
struct Blk8 {
    q0: vec4<u32>,
    q1: vec4<u32>,
    q2: vec4<u32>,
    q3: vec4<u32>,
    q4: vec4<u32>,
    q5: vec4<u32>,
    q6: vec4<u32>,
    q7: vec4<u32>,
    s_lo: vec4<f32>, // scales of rows 0..3
    s_hi: vec4<f32>, // rows 4..7
}

fn load_blk8(w: Rows8, b: u32) -> Blk8 {
    return Blk8(w_word4(w.r0 + b), w_word4(w.r1 + b), w_word4(w.r2 + b),
                w_word4(w.r3 + b), w_word4(w.r4 + b), w_word4(w.r5 + b),
                w_word4(w.r6 + b), w_word4(w.r7 + b),
                vec4<f32>(block_scale_at(w.r0 + b), block_scale_at(w.r1 + b),
                          block_scale_at(w.r2 + b), block_scale_at(w.r3 + b)),
                vec4<f32>(block_scale_at(w.r4 + b), block_scale_at(w.r5 + b),
                          block_scale_at(w.r6 + b), block_scale_at(w.r7 + b)));
}

// A whole block (4 words) of one row against one token's x (four octets), unscaled.
fn dot_fp4_block(q: vec4<u32>, x0: Octet, x1: Octet, x2: Octet, x3: Octet) -> f32 {
    return dot_octet(decode_fp4_word(q.x), x0) + dot_octet(decode_fp4_word(q.y), x1)
        + dot_octet(decode_fp4_word(q.z), x2) + dot_octet(decode_fp4_word(q.w), x3);
}

// One token, one block of the 8 rows: the scaled block sums (rows 0..3, 4..7).
fn fp4_blk_1token(k: Blk8, xi: u32) -> array<vec4<f32>, 2> {
    let x0 = Octet(x_in_vec4[xi], x_in_vec4[xi + 1u]);
    let x1 = Octet(x_in_vec4[xi + 2u], x_in_vec4[xi + 3u]);
    let x2 = Octet(x_in_vec4[xi + 4u], x_in_vec4[xi + 5u]);
    let x3 = Octet(x_in_vec4[xi + 6u], x_in_vec4[xi + 7u]);
    return fp4_blk_1token_x(k, x0, x1, x2, x3);
}

// The same with the block's x (four octets) given (the wide layout reads them from workgroup
// memory): the one expression both layouts evaluate.
fn fp4_blk_1token_x(k: Blk8, x0: Octet, x1: Octet, x2: Octet, x3: Octet) -> array<vec4<f32>, 2> {
    let p0 = vec4<f32>(dot_fp4_block(k.q0, x0, x1, x2, x3), dot_fp4_block(k.q1, x0, x1, x2, x3),
                       dot_fp4_block(k.q2, x0, x1, x2, x3), dot_fp4_block(k.q3, x0, x1, x2, x3));
    let p1 = vec4<f32>(dot_fp4_block(k.q4, x0, x1, x2, x3), dot_fp4_block(k.q5, x0, x1, x2, x3),
                       dot_fp4_block(k.q6, x0, x1, x2, x3), dot_fp4_block(k.q7, x0, x1, x2, x3));
    return array<vec4<f32>, 2>((p0 * FP4_WORD_SCALE) * k.s_lo, (p1 * FP4_WORD_SCALE) * k.s_hi);
}

// FP4, one token: lane sums of rows 0..3 and 4..7 of the group, blocks in order. With
// GEMV_PREFETCH the next block's codes and scales are loaded before this block's math (the last
// iteration reloads its own block: an L1 hit), so a lane has two blocks of loads in flight.
fn gemv_fp4_1token(lane: u32, kblocks: u32, xo: u32, w: Rows8) -> array<vec4<f32>, 2> {
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    if lane >= kblocks {
        return array<vec4<f32>, 2>(s0, s1);
    }
    var k = load_blk8(w, lane);
    for (var b = lane; b < kblocks; b = b + GEMV_LANES) {
        var kn = k;
        if GEMV_PREFETCH != 0u {
            kn = load_blk8(w, min(b + GEMV_LANES, kblocks - 1u));
        }
        let p = fp4_blk_1token(k, xo / 4u + 8u * b);
        s0 = s0 + p[0];
        s1 = s1 + p[1];
        if GEMV_PREFETCH != 0u {
            k = kn;
        } else if b + GEMV_LANES < kblocks {
            k = load_blk8(w, b + GEMV_LANES);
        }
    }
    return array<vec4<f32>, 2>(s0, s1);
}

// Lane sums of the 8 rows for the tile's 4 tokens (vec4 over tokens per row).
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

fn dot_octet_4tokens(w: Octet, x0: Octet, x1: Octet, x2: Octet, x3: Octet) -> vec4<f32> {
    return vec4<f32>(dot_octet(w, x0), dot_octet(w, x1), dot_octet(w, x2), dot_octet(w, x3));
}

// One word (octet o) of each of the 8 rows' blocks against the 4 tokens' x.
fn fp4_word_4tokens(p: FourTokenSums, u0: u32, u1: u32, u2: u32, u3: u32, u4: u32, u5: u32,
                    u6: u32, u7: u32, xo: vec4<u32>, o: u32) -> FourTokenSums {
    let x0 = load_x_octet_vec4(xo.x, o);
    let x1 = load_x_octet_vec4(xo.y, o);
    let x2 = load_x_octet_vec4(xo.z, o);
    let x3 = load_x_octet_vec4(xo.w, o);
    return fp4_word_4tokens_x(p, u0, u1, u2, u3, u4, u5, u6, u7, x0, x1, x2, x3);
}

// The same with the 4 tokens' x octets given (the wide layout reads them from workgroup memory).
fn fp4_word_4tokens_x(p: FourTokenSums, u0: u32, u1: u32, u2: u32, u3: u32, u4: u32, u5: u32,
                      u6: u32, u7: u32, x0: Octet, x1: Octet, x2: Octet,
                      x3: Octet) -> FourTokenSums {
    return FourTokenSums(p.row0 + dot_octet_4tokens(decode_fp4_word(u0), x0, x1, x2, x3),
                         p.row1 + dot_octet_4tokens(decode_fp4_word(u1), x0, x1, x2, x3),
                         p.row2 + dot_octet_4tokens(decode_fp4_word(u2), x0, x1, x2, x3),
                         p.row3 + dot_octet_4tokens(decode_fp4_word(u3), x0, x1, x2, x3),
                         p.row4 + dot_octet_4tokens(decode_fp4_word(u4), x0, x1, x2, x3),
                         p.row5 + dot_octet_4tokens(decode_fp4_word(u5), x0, x1, x2, x3),
                         p.row6 + dot_octet_4tokens(decode_fp4_word(u6), x0, x1, x2, x3),
                         p.row7 + dot_octet_4tokens(decode_fp4_word(u7), x0, x1, x2, x3));
}

// One block of the 8 rows against the 4 tokens, scaled.
fn fp4_blk_4tokens(a: FourTokenSums, k: Blk8, xo: vec4<u32>, b: u32) -> FourTokenSums {
    let z = vec4<f32>(0.0);
    var p = FourTokenSums(z, z, z, z, z, z, z, z);
    p = fp4_word_4tokens(p, k.q0.x, k.q1.x, k.q2.x, k.q3.x, k.q4.x, k.q5.x, k.q6.x, k.q7.x, xo,
                         b * 4u);
    p = fp4_word_4tokens(p, k.q0.y, k.q1.y, k.q2.y, k.q3.y, k.q4.y, k.q5.y, k.q6.y, k.q7.y, xo,
                         b * 4u + 1u);
    p = fp4_word_4tokens(p, k.q0.z, k.q1.z, k.q2.z, k.q3.z, k.q4.z, k.q5.z, k.q6.z, k.q7.z, xo,
                         b * 4u + 2u);
    p = fp4_word_4tokens(p, k.q0.w, k.q1.w, k.q2.w, k.q3.w, k.q4.w, k.q5.w, k.q6.w, k.q7.w, xo,
                         b * 4u + 3u);
    return fp4_blk_4tokens_scale(a, p, k);
}

// a + the block's unscaled sums p, scaled (rows 0..3: k.s_lo, 4..7: k.s_hi).
fn fp4_blk_4tokens_scale(a: FourTokenSums, p: FourTokenSums, k: Blk8) -> FourTokenSums {
    return FourTokenSums(a.row0 + (p.row0 * FP4_WORD_SCALE) * k.s_lo.x,
                         a.row1 + (p.row1 * FP4_WORD_SCALE) * k.s_lo.y,
                         a.row2 + (p.row2 * FP4_WORD_SCALE) * k.s_lo.z,
                         a.row3 + (p.row3 * FP4_WORD_SCALE) * k.s_lo.w,
                         a.row4 + (p.row4 * FP4_WORD_SCALE) * k.s_hi.x,
                         a.row5 + (p.row5 * FP4_WORD_SCALE) * k.s_hi.y,
                         a.row6 + (p.row6 * FP4_WORD_SCALE) * k.s_hi.z,
                         a.row7 + (p.row7 * FP4_WORD_SCALE) * k.s_hi.w);
}

// FP4, a tile of up to 4 tokens (GEMV_PREFETCH as in gemv_fp4_1token).
fn gemv_fp4_4tokens(lane: u32, kblocks: u32, xo: vec4<u32>, w: Rows8) -> array<vec4<f32>, 8> {
    let z = vec4<f32>(0.0);
    var a = FourTokenSums(z, z, z, z, z, z, z, z);
    if lane < kblocks {
        var k = load_blk8(w, lane);
        for (var b = lane; b < kblocks; b = b + GEMV_LANES) {
            var kn = k;
            if GEMV_PREFETCH != 0u {
                kn = load_blk8(w, min(b + GEMV_LANES, kblocks - 1u));
            }
            a = fp4_blk_4tokens(a, k, xo, b);
            if GEMV_PREFETCH != 0u {
                k = kn;
            } else if b + GEMV_LANES < kblocks {
                k = load_blk8(w, b + GEMV_LANES);
            }
        }
    }
    return array<vec4<f32>, 8>(a.row0, a.row1, a.row2, a.row3, a.row4, a.row5, a.row6, a.row7);
}

// Word k of the 8 rows (8 codes each, one u32 load per row; word k of a row is in block k / 4).
struct Wrd8 {
    u_lo: vec4<u32>, // rows 0..3
    u_hi: vec4<u32>, // rows 4..7
    s_lo: vec4<f32>, // the words' block scales
    s_hi: vec4<f32>,
}

fn load_wrd8(w: Rows8, k: u32) -> Wrd8 {
    let b = k / 4u;
    return Wrd8(vec4<u32>(w_word(4u * w.r0 + k), w_word(4u * w.r1 + k), w_word(4u * w.r2 + k),
                          w_word(4u * w.r3 + k)),
                vec4<u32>(w_word(4u * w.r4 + k), w_word(4u * w.r5 + k), w_word(4u * w.r6 + k),
                          w_word(4u * w.r7 + k)),
                vec4<f32>(block_scale_at(w.r0 + b), block_scale_at(w.r1 + b),
                          block_scale_at(w.r2 + b), block_scale_at(w.r3 + b)),
                vec4<f32>(block_scale_at(w.r4 + b), block_scale_at(w.r5 + b),
                          block_scale_at(w.r6 + b), block_scale_at(w.r7 + b)));
}

// FP4, one token, lanes along words (GEMV_WORDS = 1): lane sums of rows 0..3 and 4..7, words in
// order, each word's 8 products scaled by its block scale.
fn gemv_fp4_1token_words(lane: u32, kwords: u32, xo: u32, w: Rows8) -> array<vec4<f32>, 2> {
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    if lane >= kwords {
        return array<vec4<f32>, 2>(s0, s1);
    }
    var d = load_wrd8(w, lane);
    for (var k = lane; k < kwords; k = k + GEMV_LANES) {
        var dn = d;
        if GEMV_PREFETCH != 0u {
            dn = load_wrd8(w, min(k + GEMV_LANES, kwords - 1u));
        }
        let xi = xo / 4u + 2u * k;
        let x = Octet(x_in_vec4[xi], x_in_vec4[xi + 1u]);
        if GEMV_DIAG_LOADS != 0u {
            let mk = vec4<u32>(0x3F7FFFFFu);
            s0 = s0 + bitcast<vec4<f32>>(d.u_lo & mk) * x.lo * d.s_lo;
            s1 = s1 + bitcast<vec4<f32>>(d.u_hi & mk) * x.hi * d.s_hi;
            if GEMV_PREFETCH != 0u {
                d = dn;
            } else if k + GEMV_LANES < kwords {
                d = load_wrd8(w, k + GEMV_LANES);
            }
            continue;
        }
        let p0 = vec4<f32>(dot_octet(decode_fp4_word(d.u_lo.x), x),
                           dot_octet(decode_fp4_word(d.u_lo.y), x),
                           dot_octet(decode_fp4_word(d.u_lo.z), x),
                           dot_octet(decode_fp4_word(d.u_lo.w), x));
        let p1 = vec4<f32>(dot_octet(decode_fp4_word(d.u_hi.x), x),
                           dot_octet(decode_fp4_word(d.u_hi.y), x),
                           dot_octet(decode_fp4_word(d.u_hi.z), x),
                           dot_octet(decode_fp4_word(d.u_hi.w), x));
        s0 = s0 + (p0 * FP4_WORD_SCALE) * d.s_lo;
        s1 = s1 + (p1 * FP4_WORD_SCALE) * d.s_hi;
        if GEMV_PREFETCH != 0u {
            d = dn;
        } else if k + GEMV_LANES < kwords {
            d = load_wrd8(w, k + GEMV_LANES);
        }
    }
    return array<vec4<f32>, 2>(s0, s1);
}

// FP4, up to 4 tokens, lanes along words.
fn gemv_fp4_4tokens_words(lane: u32, kwords: u32, xo: vec4<u32>,
                          w: Rows8) -> array<vec4<f32>, 8> {
    let z = vec4<f32>(0.0);
    var a = FourTokenSums(z, z, z, z, z, z, z, z);
    if lane < kwords {
        var d = load_wrd8(w, lane);
        for (var k = lane; k < kwords; k = k + GEMV_LANES) {
            var dn = d;
            if GEMV_PREFETCH != 0u {
                dn = load_wrd8(w, min(k + GEMV_LANES, kwords - 1u));
            }
            if GEMV_DIAG_LOADS != 0u {
                let mk = vec4<u32>(0x3F7FFFFFu);
                let x0 = load_x_octet_vec4(xo.x, k);
                let x1 = load_x_octet_vec4(xo.y, k);
                let x2 = load_x_octet_vec4(xo.z, k);
                let x3 = load_x_octet_vec4(xo.w, k);
                let xs = x0.lo + x0.hi + x1.lo + x1.hi + x2.lo + x2.hi + x3.lo + x3.hi;
                a.row0 = a.row0 + bitcast<vec4<f32>>(d.u_lo & mk) * xs * d.s_lo;
                a.row1 = a.row1 + bitcast<vec4<f32>>(d.u_hi & mk) * xs * d.s_hi;
                if GEMV_PREFETCH != 0u {
                    d = dn;
                } else if k + GEMV_LANES < kwords {
                    d = load_wrd8(w, k + GEMV_LANES);
                }
                continue;
            }
            let z4 = FourTokenSums(z, z, z, z, z, z, z, z);
            let p = fp4_word_4tokens(z4, d.u_lo.x, d.u_lo.y, d.u_lo.z, d.u_lo.w, d.u_hi.x,
                                     d.u_hi.y, d.u_hi.z, d.u_hi.w, xo, k);
            a.row0 = a.row0 + (p.row0 * FP4_WORD_SCALE) * d.s_lo.x;
            a.row1 = a.row1 + (p.row1 * FP4_WORD_SCALE) * d.s_lo.y;
            a.row2 = a.row2 + (p.row2 * FP4_WORD_SCALE) * d.s_lo.z;
            a.row3 = a.row3 + (p.row3 * FP4_WORD_SCALE) * d.s_lo.w;
            a.row4 = a.row4 + (p.row4 * FP4_WORD_SCALE) * d.s_hi.x;
            a.row5 = a.row5 + (p.row5 * FP4_WORD_SCALE) * d.s_hi.y;
            a.row6 = a.row6 + (p.row6 * FP4_WORD_SCALE) * d.s_hi.z;
            a.row7 = a.row7 + (p.row7 * FP4_WORD_SCALE) * d.s_hi.w;
            if GEMV_PREFETCH != 0u {
                d = dn;
            } else if k + GEMV_LANES < kwords {
                d = load_wrd8(w, k + GEMV_LANES);
            }
        }
    }
    return array<vec4<f32>, 8>(a.row0, a.row1, a.row2, a.row3, a.row4, a.row5, a.row6, a.row7);
}

// Any other weight format (FP6, FP8, INT8): octets of 8 codes through the code table, scaled
// per octet; lane l takes octets l, l + GEMV_LANES, ...
fn gemv_generic(lane: u32, kk: u32, xo: vec4<u32>, w: Rows8) -> array<vec4<f32>, 8> {
    let z = vec4<f32>(0.0);
    var a = FourTokenSums(z, z, z, z, z, z, z, z);
    for (var o = lane; o < kk / 8u; o = o + GEMV_LANES) {
        let x0 = load_x_octet(xo.x, o);
        let x1 = load_x_octet(xo.y, o);
        let x2 = load_x_octet(xo.z, o);
        let x3 = load_x_octet(xo.w, o);
        a.row0 = a.row0 + generic_octet(w.r0, o, x0, x1, x2, x3);
        a.row1 = a.row1 + generic_octet(w.r1, o, x0, x1, x2, x3);
        a.row2 = a.row2 + generic_octet(w.r2, o, x0, x1, x2, x3);
        a.row3 = a.row3 + generic_octet(w.r3, o, x0, x1, x2, x3);
        a.row4 = a.row4 + generic_octet(w.r4, o, x0, x1, x2, x3);
        a.row5 = a.row5 + generic_octet(w.r5, o, x0, x1, x2, x3);
        a.row6 = a.row6 + generic_octet(w.r6, o, x0, x1, x2, x3);
        a.row7 = a.row7 + generic_octet(w.r7, o, x0, x1, x2, x3);
    }
    return array<vec4<f32>, 8>(a.row0, a.row1, a.row2, a.row3, a.row4, a.row5, a.row6, a.row7);
}

// Octet o of the row whose first block is rb, against 4 tokens, scaled per octet.
fn generic_octet(rb: u32, o: u32, x0: Octet, x1: Octet, x2: Octet, x3: Octet) -> vec4<f32> {
    let sidx = rb + o / 4u;
    let w = decode_weight_octet(sidx * mx_spec(WEIGHT_FMT).code_bits, (o % 4u) * 8u);
    return dot_octet_4tokens(w, x0, x1, x2, x3) * block_scale_at(sidx);
}

// Every GEMV workgroup's set-up: the code tables, only where the decode uses them (any
// workgroup size), and gemv1's block maxima reset.
fn gemv_tile_setup(lid: u32) {
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
}

// The tile of this workgroup, uniformly: (expert, start, end, valid). Fills the code tables only
// where the decode uses them, with any workgroup size; resets the gemv1 block maxima.
fn gemv_load_tile(lid: u32, slot: u32) -> vec4<u32> {
    gemv_tile_setup(lid);
    if lid == 0u {
        var t = vec4<u32>(0u, 0u, 0u, 0u);
        if slot < tiles[0] {
            t = vec4<u32>(tiles[1u + 3u * slot], tiles[2u + 3u * slot], tiles[3u + 3u * slot], 1u);
        }
        tile_desc = t;
    }
    return workgroupUniformLoad(&tile_desc);
}

// The local expert of pair a (-1: not on this rank), as moe_lists.wgsl.
fn gemv_local_expert(a: u32) -> i32 {
    let id = topk_ids[a];
    if params.has_map != 0u {
        return expert_map[id];
    }
    return id;
}

// GEMV_OWN_LISTS: the tile of slot `slot` from topk_ids (rows sorted by (local expert, pair);
// an expert's rows cut into tiles of GEMV_TILE_ROWS; tiles in row order), the row -> pair map in
// fl_pair; workgroup (0, 0) (`writer`) stores pair_of_row, row_of_pair and tiles as the lists
// pass would. Also what gemv_load_tile does (tables, block maxima).
fn gemv_own_lists(lid: u32, slot: u32, writer: bool) -> vec4<u32> {
    gemv_tile_setup(lid);
    let na = params.m * params.top_k;
    for (var a = lid; a < na; a = a + GEMV_THREADS) {
        fl_expert[a] = gemv_local_expert(a);
    }
    for (var p = lid; p < GEMV_LIST_MAX; p = p + GEMV_THREADS) {
        fl_tile[p] = 0u;
    }
    if lid == 0u {
        tile_desc = vec4<u32>(0u);
    }
    workgroupBarrier();
    // Row of each pair: pairs of lower experts, and of the same expert with a lower index.
    for (var a = lid; a < na; a = a + GEMV_THREADS) {
        let l = fl_expert[a];
        if l < 0 {
            if writer {
                row_of_pair[a] = -1;
            }
            continue;
        }
        var first = 0u; // rows of lower experts
        var cnt = 0u;   // pairs of this expert
        var before = 0u; // of them, with a lower index
        for (var b = 0u; b < na; b = b + 1u) {
            let lb = fl_expert[b];
            if lb >= 0 && lb < l {
                first = first + 1u;
            }
            if lb == l {
                cnt = cnt + 1u;
                if b < a {
                    before = before + 1u;
                }
            }
        }
        let p = first + before;
        fl_pair[p] = a;
        if before % GEMV_TILE_ROWS == 0u {
            fl_tile[p] = 1u + min(GEMV_TILE_ROWS, cnt - before);
        }
        if writer {
            pair_of_row[p] = a;
            row_of_pair[a] = i32(p);
        }
    }
    workgroupBarrier();
    // Tile index of each tile start: tile starts in lower rows.
    for (var p = lid; p < na; p = p + GEMV_THREADS) {
        let len = fl_tile[p];
        if len == 0u {
            continue;
        }
        var idx = 0u;
        for (var q = 0u; q < p; q = q + 1u) {
            idx = idx + select(0u, 1u, fl_tile[q] != 0u);
        }
        let e = u32(fl_expert[fl_pair[p]]);
        if idx == slot {
            tile_desc = vec4<u32>(e, p, p + len - 1u, 1u);
        }
        if writer {
            tiles[1u + 3u * idx] = e;
            tiles[2u + 3u * idx] = p;
            tiles[3u + 3u * idx] = p + len - 1u;
        }
    }
    if writer && lid == 0u {
        var n = 0u;
        for (var q = 0u; q < na; q = q + 1u) {
            n = n + select(0u, 1u, fl_tile[q] != 0u);
        }
        tiles[0] = n;
    }
    return workgroupUniformLoad(&tile_desc);
}

// The pair of row p: from the own lists in gemv1 with GEMV_OWN_LISTS, else pair_of_row.
fn gemv_pair_of_row(p: u32, is1: bool) -> u32 {
    if is1 && GEMV_OWN_LISTS != 0u {
        return fl_pair[p];
    }
    return pair_of_row[p];
}

// Where a tile's operands live: K (kk) and its 32-blocks, the rows of the matrix and the
// expert's first row in this chunk, each token's x offset (0xFFFFFFFF: no row), and the first
// 32-block of each of this lane group's 8 rows.
struct GemvGeom {
    kk: u32,
    kblocks: u32,
    nrows: u32,
    rowbase: u32,
    xo: vec4<u32>,
    rb: Rows8,
}

// gemv1: x rows are gathered tokens of x_in (K = H); gemv2: rows start + t of x_in (K = I).
fn gemv_geom(lid: u32, is1: bool, e: u32, start: u32, cnt: u32, jb: u32) -> GemvGeom {
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
    let rowbase = w_use_expert(e) * per_e;
    let g = lid / GEMV_LANES;
    let r0 = g * 8u;
    let rb = Rows8(gemv_row_block(is1, r0, jb, inter, nrows, rowbase, kblocks),
                   gemv_row_block(is1, r0 + 1u, jb, inter, nrows, rowbase, kblocks),
                   gemv_row_block(is1, r0 + 2u, jb, inter, nrows, rowbase, kblocks),
                   gemv_row_block(is1, r0 + 3u, jb, inter, nrows, rowbase, kblocks),
                   gemv_row_block(is1, r0 + 4u, jb, inter, nrows, rowbase, kblocks),
                   gemv_row_block(is1, r0 + 5u, jb, inter, nrows, rowbase, kblocks),
                   gemv_row_block(is1, r0 + 6u, jb, inter, nrows, rowbase, kblocks),
                   gemv_row_block(is1, r0 + 7u, jb, inter, nrows, rowbase, kblocks));
    var xo = vec4<u32>(0xFFFFFFFFu);
    for (var t = 0u; t < GEMV_TILE_ROWS; t = t + 1u) {
        if t < cnt {
            if is1 {
                xo[t] = (gemv_pair_of_row(start + t, true) / params.top_k) * kk;
            } else {
                xo[t] = (start + t) * kk;
            }
        }
    }
    return GemvGeom(kk, kblocks, nrows, rowbase, xo, rb);
}

// row_sums[wr][t] = sum_k W[row(wr), k] * x[t, k] for the tile's cnt (<= 4) rows.
fn gemv_core(lid: u32, is1: bool, e: u32, start: u32, cnt: u32, jb: u32) {
    let gm = gemv_geom(lid, is1, e, start, cnt, jb);
    let kk = gm.kk;
    let kblocks = gm.kblocks;
    let xo = gm.xo;
    let rb = gm.rb;
    let lane = lid % GEMV_LANES;
    let fp4 = mx_spec(WEIGHT_FMT).code_bits == 4u;
    let one = GEMV_ONE_ROW != 0u || cnt == 1u;
    if fp4 && GEMV_WORDS != 0u {
        if one {
            gemv_reduce1(lid, gemv_fp4_1token_words(lane, kblocks * 4u, xo.x, rb));
        } else {
            gemv_reduce4(lid, gemv_fp4_4tokens_words(lane, kblocks * 4u, xo, rb));
        }
        return;
    }
    if fp4 && one {
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
    let tile = gemv1_tile(lid, wid);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    gemv_core(lid, true, tile.x, tile.y, tile.z - tile.y, wid.y * 32u);
    gemv1_epilogue(lid, tile, wid.y * 32u);
}

// gemv1's tile (own lists or the lists pass's), uniformly.
fn gemv1_tile(lid: u32, wid: vec3<u32>) -> vec4<u32> {
    var tile: vec4<u32>;
    if GEMV_OWN_LISTS != 0u {
        tile = gemv_own_lists(lid, wid.x, wid.x == 0u && wid.y == 0u);
    } else {
        tile = gemv_load_tile(lid, wid.x);
    }
    return tile;
}

// gemv1's epilogue over row_sums: the tile's 32 intermediate columns from jb.
fn gemv1_epilogue(lid: u32, tile: vec4<u32>, jb: u32) {
    let e = tile.x;
    let start = tile.y;
    let cnt = tile.z - tile.y;
    let inter = params.inter;
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
            let rw = topk_weights[gemv_pair_of_row(start + t, true)];
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
        gemv2_no_tiles(lid, tile, wid);
        return;
    }
    gemv_core(lid, false, tile.x, tile.y, tile.z - tile.y, wid.y * 64u);
    gemv2_epilogue(lid, tile, wid.y * 64u);
    gemv2_fused_combine(lid, wid.y);
}

// GEMV_FUSE_COMBINE when the forward has no tile at all (every pair on another rank): nobody
// counts, so workgroup (0, y) of each dispatch writes slice y's output (zeros, as combine).
fn gemv2_no_tiles(lid: u32, tile: vec4<u32>, wid: vec3<u32>) {
    if GEMV_FUSE_COMBINE != 0u && tile.w == 0u && wid.x == 0u {
        gemv_combine_slice(lid, wid.y * 64u);
    }
}

// GEMV_FUSE_COMBINE: count this workgroup in its slice; the last one combines the slice.
fn gemv2_fused_combine(lid: u32, slice: u32) {
    if GEMV_FUSE_COMBINE == 0u {
        return;
    }
    storageBarrier(); // release: this workgroup's rows before its count
    if lid == 0u {
        var last = 0u;
        if atomicAdd(&fc_count[slice], 1u) + 1u == tiles[0] {
            last = 1u;
            atomicStore(&fc_count[slice], 0u); // every tile has counted: ready for the next
        }
        fc_last = last;
    }
    if workgroupUniformLoad(&fc_last) == 0u {
        return;
    }
    storageBarrier(); // acquire: the other workgroups' rows after their counts
    gemv_combine_slice(lid, slice * 64u);
}

// moe_combine.wgsl's sum for the output columns nb .. nb + 63 of every token: the fp32 sum of
// the k slots' rows (out_bits here) in slot order, remote pairs adding nothing, rounded with
// bf16_point.
fn gemv_combine_slice(lid: u32, nb: u32) {
    let h = params.hidden;
    let k = params.top_k;
    for (var idx = lid; idx < params.m * 64u; idx = idx + GEMV_THREADS) {
        let t = idx / 64u;
        let n = nb + idx % 64u;
        if n < h {
            var acc = 0.0;
            for (var j = 0u; j < k; j = j + 1u) {
                let p = row_of_pair[t * k + j];
                if p >= 0 {
                    acc = acc + bitcast<f32>(out_bits[u32(p) * h + n]);
                }
            }
            fc_out[t * h + n] = bitcast<u32>(bf16_point(acc));
        }
    }
}

// gemv2's epilogue over row_sums: the tile's 64 output columns from nb.
fn gemv2_epilogue(lid: u32, tile: vec4<u32>, nb: u32) {
    let e = tile.x;
    let start = tile.y;
    let cnt = tile.z - tile.y;
    let h = params.hidden;
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
