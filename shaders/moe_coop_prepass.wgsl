// moe_coop_prepass.wgsl: the activation pre-passes of the cooperative GEMM's kernels k64p and
// k64pw (`coop64p_gemm1/2`, `coop64pw_gemm1/2` in moe_gemm_coop.wgsl), and `gemm1_pre_ref`,
// `gemm2_pre_ref`: the tiled f32 GEMM reading the pre-converted rows (the reference of what
// the pre-pass kernels compute, bar summation order and the tensor cores' accumulation; it
// runs the forward's pre-pass plumbing on adapters without cooperative matrices:
// `Context::set_gemm_pre_ref`, a test hook). Composed after moe_gemm.wgsl (parameters, the
// row lists, x_in, the tiled GEMM's loads and epilogues); plain compute, no f16 and no
// cooperative matrices, so it runs (and is tested) on every adapter, lavapipe included.
//
// Kernel k64 converts every activation to f16 inside its k-loop, once per 128-column block
// (45 times per gpt-oss gemm1), with a running per-tile exponent kept by atomics. k64p converts
// each stage's activations ONCE per forward, here, into the layout its MMAs load straight from
// the storage buffer (row-major rows of K f16, one row per GEMM row, coopLoadT):
//
//   coopp_prep1: one workgroup per token: its row of x_in (hidden states, or their QDQ for
//                schemes with MX activations) goes to the GEMM row of each of its top-k pairs
//                (row_of_pair; -1: an expert of another rank, skipped).
//   coopp_prep2: one workgroup per GEMM row: its row of the intermediate (what gemm1's epilogue
//                wrote, after bias, activation and the intermediate QDQ) goes to the same row.
//                (A second pre-pass rather than gemm1's epilogue writing f16: the row's
//                exponent needs the whole row, which 45 gemm1 workgroups produce.)
//
// Numerics (exact integer arithmetic on the f32 bits; docs/NUMERICS.md 10.3):
//   * The row exponent e = floor(log2(largest finite |x| of the row)), at least -112 (rows whose
//     largest finite |x| is below 2^-112, or that have none, use -112), stored in xp_exp.
//   * v = x * 2^(14 - e) (exact: a power of two; |v| < 2^15 where the row's largest is at
//     least 2^-112). hi = v with its 13 low significand bits cleared, as f16 (exact where v is an
//     f16 normal, |v| >= 2^-14; below that rounded to nearest even into f16 subnormals);
//     lo = v - hi (exact in f32, at most 13 significant bits) rounded to nearest even into f16
//     (11 bits). So hi + lo carries about 22 significant bits of x: |hi + lo - v| <=
//     max(2^-21 |v|, 2^-25), i.e. relative 2^-21 for |x| >= 2^-17 of the row's largest finite
//     |x| (where lo is an f16 normal) and at most 2^-39 of the row's largest below; x with at
//     most 22 significant bits (bf16, every MX value) is exact down to 2^-17 of the row's
//     largest. A driver that flushes f16 subnormals in the MMA loses at most 2^-14 of v:
//     < 2^-28 of the row's largest. (k64 had the same split against the TILE's running
//     largest.)
//   * Schemes with MX activations (ACT_FMT != FMT_NONE) write hi only: their values have at
//     most 8 significant bits, exact in hi down to 2^-28 of the row's largest.
//   * NaN x: hi = NaN (quiet, sign kept), lo = +0; +-Inf: hi = +-Inf, lo = +0 (what k64 stages;
//     they then propagate through the MMA as in k64).
//   * The GEMM multiplies row r's sums by 2^(e_r - 14) in its epilogue (exact but for f32
//     over/underflow).
// Output words: two f16 per u32, element 2j in the low half (the little-endian f16 array the
// GEMM binds at the same binding numbers).

// [rows][K / 2] words of f16 hi (lo); row exponents [rows].
@group(0) @binding(17) var<storage, read_write> xp_hi_words: array<u32>;
@group(0) @binding(18) var<storage, read_write> xp_lo_words: array<u32>;
@group(0) @binding(19) var<storage, read_write> xp_exp_out: array<i32>;

var<workgroup> prep_max: atomic<u32>;

// The smallest row exponent (see the header).
const PREP_EMIN: i32 = -112;

// f16 bits of v, rounded to nearest even (f16 subnormals kept; overflow gives +-Inf; NaN gives
// a quiet NaN with v's sign).
fn prep_f16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    let s = (b >> 16u) & 0x8000u;
    let a = b & 0x7FFFFFFFu;
    if a > 0x7F800000u {
        return s | 0x7E00u;
    }
    if a == 0x7F800000u {
        return s | 0x7C00u;
    }
    let e = i32(a >> 23u) - 127;
    if e >= 16 {
        return s | 0x7C00u;
    }
    let m = a & 0x7FFFFFu;
    if e >= -14 {
        var h = (u32(e + 15) << 10u) | (m >> 13u);
        let rem = m & 0x1FFFu;
        if rem > 0x1000u || (rem == 0x1000u && (h & 1u) == 1u) {
            h = h + 1u; // a carry into the exponent is the right encoding (0x7BFF + 1 = Inf)
        }
        return s | h;
    }
    if e < -25 {
        return s;
    }
    // An f16 subnormal: units of 2^-24; |v| = (m | 2^23) * 2^(e - 23).
    let m24 = m | 0x800000u;
    let sh = u32(-e - 1); // 14..24
    var q = m24 >> sh;
    let rem = m24 & ((1u << sh) - 1u);
    let half = 1u << (sh - 1u);
    if rem > half || (rem == half && (q & 1u) == 1u) {
        q = q + 1u; // 0x400 is the smallest normal: the right encoding
    }
    return s | q;
}

// The value of f16 bits h (exact; Inf and NaN too).
fn prep_f16_value(h: u32) -> f32 {
    let ex = (h >> 10u) & 0x1Fu;
    let m = h & 0x3FFu;
    if ex == 31u {
        return bitcast<f32>(((h & 0x8000u) << 16u) | 0x7F800000u | (m << 13u));
    }
    if ex == 0u {
        let v = ldexp(f32(m), -24);
        return select(v, -v, (h & 0x8000u) != 0u);
    }
    return bitcast<f32>(((h & 0x8000u) << 16u) | ((ex + 112u) << 23u) | (m << 13u));
}

// (hi, lo) f16 bits of x in a row of exponent e (see the header).
fn prep_split(x: f32, e: i32) -> vec2<u32> {
    if (bitcast<u32>(x) & 0x7FFFFFFFu) >= 0x7F800000u {
        return vec2<u32>(prep_f16_bits(x), 0u);
    }
    let v = ldexp(x, 14 - e);
    let hi = prep_f16_bits(bitcast<f32>(bitcast<u32>(v) & 0xFFFFE000u));
    let lo = prep_f16_bits(v - prep_f16_value(hi));
    return vec2<u32>(hi, lo);
}

// The exponent of the row x_in[base..base + kk] (every invocation of the workgroup gets it).
fn prep_row_exponent(lid: u32, base: u32, kk: u32) -> i32 {
    if lid == 0u {
        atomicStore(&prep_max, 0u);
    }
    workgroupBarrier();
    var m = 0u;
    for (var i = lid; i < kk; i = i + 256u) {
        let a = bitcast<u32>(x_in[base + i]) & 0x7FFFFFFFu;
        m = max(m, select(0u, a, a < 0x7F800000u));
    }
    atomicMax(&prep_max, m);
    workgroupBarrier();
    let e = i32(atomicLoad(&prep_max) >> 23u) - 127;
    return max(e, PREP_EMIN);
}

// The linear workgroup index of a 2-D grid (Context::grid).
fn prep_group(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// Grid: one workgroup per token (params.m; 2-D when large). x_in = the stage's input rows
// [M, H]; output rows: row_of_pair of the token's pairs.
@compute @workgroup_size(256)
fn coopp_prep1(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = prep_group(wid, nwg);
    if t >= params.m {
        return;
    }
    let kk = params.hidden;
    let base = t * kk;
    let e = prep_row_exponent(lid, base, kk);
    let k = params.top_k;
    let words = kk / 2u;
    for (var w = lid; w < words; w = w + 256u) {
        let a = prep_split(x_in[base + 2u * w], e);
        let b = prep_split(x_in[base + 2u * w + 1u], e);
        for (var s = 0u; s < k; s = s + 1u) {
            let row = row_of_pair[t * k + s];
            if row >= 0 {
                let o = u32(row) * words + w;
                xp_hi_words[o] = a.x | (b.x << 16u);
                if ACT_FMT == FMT_NONE {
                    xp_lo_words[o] = a.y | (b.y << 16u);
                }
            }
        }
    }
    if lid < k {
        let row = row_of_pair[t * k + lid];
        if row >= 0 {
            xp_exp_out[u32(row)] = e;
        }
    }
}

// Grid: one workgroup per GEMM row (params.m x params.top_k rows; 2-D when large). x_in = the
// intermediate [rows, I]; output row = input row.
@compute @workgroup_size(256)
fn coopp_prep2(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = prep_group(wid, nwg);
    if r >= params.m * params.top_k {
        return;
    }
    let kk = params.inter;
    let base = r * kk;
    let e = prep_row_exponent(lid, base, kk);
    let words = kk / 2u;
    for (var w = lid; w < words; w = w + 256u) {
        let a = prep_split(x_in[base + 2u * w], e);
        let b = prep_split(x_in[base + 2u * w + 1u], e);
        let o = r * words + w;
        xp_hi_words[o] = a.x | (b.x << 16u);
        if ACT_FMT == FMT_NONE {
            xp_lo_words[o] = a.y | (b.y << 16u);
        }
    }
    if lid == 0u {
        xp_exp_out[r] = e;
    }
}

// Four activations of tile row xm (of cnt; zeros past them) at k..k+3 from the pre-converted
// rows: (hi + lo) x 2^(e_r - 14), exact in f32 (hi + lo has at most 22 significant bits) but
// for f32 subnormals.
fn pre_ref_x4(start: u32, cnt: u32, xm: u32, kk: u32, k: u32) -> vec4<f32> {
    if xm >= cnt {
        return vec4<f32>(0.0);
    }
    let row = start + xm;
    let w = (row * kk + k) / 2u;
    let h0 = xp_hi_words[w];
    let h1 = xp_hi_words[w + 1u];
    var v = vec4<f32>(prep_f16_value(h0 & 0xFFFFu), prep_f16_value(h0 >> 16u),
                      prep_f16_value(h1 & 0xFFFFu), prep_f16_value(h1 >> 16u));
    if ACT_FMT == FMT_NONE {
        let l0 = xp_lo_words[w];
        let l1 = xp_lo_words[w + 1u];
        v = v + vec4<f32>(prep_f16_value(l0 & 0xFFFFu), prep_f16_value(l0 >> 16u),
                          prep_f16_value(l1 & 0xFFFFu), prep_f16_value(l1 >> 16u));
    }
    let e = xp_exp_out[row] - 14; // in -126..113: one exact ldexp
    return ldexp(v, vec4<i32>(e));
}

// moe_gemm.wgsl's gemm_k_loop with the x rows from the pre-converted rows (tile rows start..
// start + cnt) instead of x_in.
fn pre_ref_k_loop(lid: u32, kk_total: u32, start: u32, cnt: u32, wrow: u32, wcol: u32,
                  wv: bool) -> GemmAcc {
    let xm = lid / 4u;
    let xk = (lid % 4u) * 4u;
    var c = GemmAcc(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
                    vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var k0 = 0u; k0 < kk_total; k0 = k0 + GEMM_K_STEP) {
        let xv = pre_ref_x4(start, cnt, xm, kk_total, k0 + xk);
        c = gemm_k_step(lid, kk_total, k0, xv, wrow, wcol, wv, c);
    }
    return c;
}

// gemm1 over the pre-converted rows of coopp_prep1 (grid and output as moe_gemm.wgsl's gemm1).
@compute @workgroup_size(256)
fn gemm1_pre_ref(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let jb = wid.y * 64u;
    let cnt = tile.z - tile.y;
    let ld = gemm1_load(lid, tile.x, tile.y, cnt, jb);
    let acc = pre_ref_k_loop(lid, params.hidden, tile.y, cnt, ld.wrow, ld.wcol, ld.wv);
    gemm1_finish(lid, tile.x, tile.y, cnt, jb, acc);
}

// gemm2 over the pre-converted rows of coopp_prep2 (grid and output as moe_gemm.wgsl's gemm2).
@compute @workgroup_size(256)
fn gemm2_pre_ref(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let nb = wid.y * 128u;
    let cnt = tile.z - tile.y;
    let ld = gemm2_load(lid, tile.x, tile.y, cnt, nb);
    let acc = pre_ref_k_loop(lid, params.inter, tile.y, cnt, ld.wrow, ld.wcol, ld.wv);
    gemm2_finish(lid, tile.x, tile.y, cnt, nb, acc);
}
