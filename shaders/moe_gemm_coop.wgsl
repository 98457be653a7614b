// moe_gemm_coop.wgsl (~1190 lines: four kernel generations, k32 / k64 / k64p / k64pw, kept
// selectable for comparison by MXMOE_COOP_KERNEL; the seam is one file per generation once
// the older ones are dropped): the prefill expert passes on cooperative matrices (tensor cores), for
// adapters with wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX offering f16 16x16x16 with f32
// accumulation. Kernels: k32 (`coop_gemm1`, `coop_gemm2`, described first), k64
// (`coop64_gemm1`, `coop64_gemm2`, below: same tile, epilogues and numerics, cheaper staging),
// and k64p / k64pw (after the pre-passes of moe_coop_prepass.wgsl; k64pw is the default where
// `coop64_check` and `coop64p_check` pass). Composed after moe_gemm.wgsl (same tiles, loads and epilogues: gemm1_load,
// gemm2_load, gemm1_finish, gemm2_finish); only the k-loop differs. The host composes it with
// `enable f16; enable wgpu_cooperative_matrix;` (src/backend/wgpu/source.rs) and runs it only
// after `coop_check` (below) passed on the device; elsewhere moe_gemm.wgsl runs.
//
// Tile: 64 rows x 128 weight columns, K steps of one MX block (32). Eight subgroups of 32
// consecutive invocations (the host verified the layout with `subgroup_check`): subgroup s owns
// rows (s % 4) * 16..+15 and, in each 64-column half of the tile, columns (s / 4) * 32..+31, as
// four 16x16 f32 accumulators (c0, c1 in the low half, c2, c3 in the high half).
//
// Numerics (docs/NUMERICS.md 10.3; design after llama.cpp's Vulkan mul_mm with cooperative
// matrices: dequantize to f16 in workgroup memory; the scaling here is our own):
//   * The workgroup keeps one running power-of-two exponent for the activations (ex: the
//     largest finite |x| seen so far, floor(log2)) and one for the weights (ew: the largest
//     E8M0 byte seen so far). The accumulators hold C / 2^(ex + ew - 127); when a K step raises
//     either maximum, they are multiplied by the power of two of the change first (exact).
//   * Weights are staged as f16 code_value x 2^(byte - ew + COOP_WSH), COOP_WSH = 14 - emax of
//     the format, so |staged| < 2^15 (f16 max 65504): every code value of the six formats has
//     at most 8 significant bits, so this is exact while the value stays an f16 normal, i.e.
//     unless the block's scale lies more than ~18-28 binades (format-dependent) below the
//     largest scale seen in the tile; such values are rounded or flushed (f16 subnormals may
//     be flushed by the driver), at < 2^-28 of the tile's largest weight magnitude.
//   * Activations are staged as v = x x 2^(14 - ex) (|v| < 2^15). Weight-only schemes (f32
//     activations) split them into hi = f16(v) and lo = f16(v - hi), both multiplied (about 22
//     significant bits: lo is an f16 normal for |x| >= 2^-17 of the tile's largest activation;
//     below that the error is < 2^-28 of it). QDQ'd activations (MX codes, at most 8
//     significant bits) are exact in hi alone down to 2^-28 of the tile's largest activation.
//     (The first version scaled to |v| < 2: lo then fell into f16 subnormals, which the H200
//     flushes, and gpt-oss outputs drifted to rel-L2 3.5e-4.)
//   * f16 x f16 products are exact in f32; the tensor cores accumulate in f32. The epilogue
//     multiplies by 2^(ex - 14 + ew - 127 - COOP_WSH) with ldexp (exact but for f32
//     over/underflow).
//   * NaN scale bytes stage NaN weights, NaN activations stage NaN: both propagate. An infinite
//     activation stages hi = inf, lo = 0.
//
// Size (~1200 lines): WGSL has no modules; the host composes files (src/backend/wgpu/source.rs),
// so kernels k64p / k64pw (which also repeat k64's entry points and share one hand-out) could
// move to a file of their own composed after this one; not yet done.

const COOP_SA: u32 = 40u; // f16 per row of the activation tiles: 32 + 8 padding (80 bytes)
const COOP_SB: u32 = 40u; // f16 per weight-tile column (k contiguous): 32 + 8 padding
const COOP_SBT: u32 = 136u; // COOP_B_ROW: f16 per weight-tile k row (n contiguous): 128 + 8
const COOP_ASH: i32 = 14; // activations are staged as x x 2^(COOP_ASH - ex): |v| < 2^15

// B's layout in workgroup memory: 0 = column-major ([n][k], k contiguous, coopLoad),
// 1 = row-major ([k][n], coopLoadT). The host passes the same value to coop_check.
override COOP_B_ROW: u32 = 0u;
// Diagnostics only (MXMOE_COOP_DIAG; results are then wrong): bit 1 skips the MMAs, bit 2 the
// global loads and the staging, bit 3 the lo MMAs.
override COOP_DIAG: u32 = 0u;

// Weights are staged as code x 2^(byte - ew + COOP_WSH): |staged| < 2^15.
fn coop_wsh() -> i32 {
    return 14 - mx_spec(WEIGHT_FMT).emax;
}

// Index of B[k][n] (k along K, n the weight-tile column) in coop_b.
fn coop_b_at(k: u32, n: u32) -> u32 {
    if COOP_B_ROW != 0u {
        return k * COOP_SBT + n;
    }
    return n * COOP_SB + k;
}

// The 16x16 B fragment at (k, n).
fn coop_load_b(k: u32, n: u32) -> coop_mat16x16<f16, B> {
    if COOP_B_ROW != 0u {
        return coopLoadT<coop_mat16x16<f16, B>>(&coop_b[k * COOP_SBT + n], COOP_SBT);
    }
    return coopLoad<coop_mat16x16<f16, B>>(&coop_b[n * COOP_SB + k], COOP_SB);
}
const COOP_SC: u32 = 68u; // f32 per row of the accumulator staging: 64 + 4 padding

var<workgroup> coop_a_hi: array<f16, 2560>; // [64 rows][COOP_SA]
var<workgroup> coop_a_lo: array<f16, 2560>; // [64 rows][COOP_SA] (weight-only schemes)
var<workgroup> coop_b: array<f16, 5120>; // [128 weight columns][COOP_SB]: B (k x n) column-major
var<workgroup> coop_c: array<f32, 4352>; // [64 rows][COOP_SC]: zeros, then the epilogue's staging
var<workgroup> coop_xmax: array<atomic<u32>, 2>; // per K step (two slots): largest finite |x| bits
var<workgroup> coop_wmax: array<atomic<u32>, 2>; // per K step: largest non-NaN E8M0 byte

// Stage four activations v = x x 2^(COOP_ASH - ex) as f16 hi (and lo for weight-only schemes)
// at index i. hi is v with its low 13 significand bits cleared (integer ops: an f32 -> f16 ->
// f32 round trip may be folded away by a driver compiler, which lost lo on the H200), so hi is
// exact in f16 where v is an f16 normal and lo = v - hi (exact in f32, <= 13 bits) loses at
// most 2 bits in f16. Non-finite x: hi = x, lo = 0. No dynamic indexing (private vectors
// indexed at run time may be placed in memory).
fn coop_stage_x(i: u32, x: vec4<f32>, ex: i32) {
    let v = ldexp(x, vec4<i32>(COOP_ASH - ex));
    let finite = (bitcast<vec4<u32>>(x) & vec4<u32>(0x7FFFFFFFu)) < vec4<u32>(0x7F800000u);
    let hv = select(v, bitcast<vec4<f32>>(bitcast<vec4<u32>>(v) & vec4<u32>(0xFFFFE000u)), finite);
    let hi = vec4<f16>(hv);
    coop_a_hi[i] = hi.x;
    coop_a_hi[i + 1u] = hi.y;
    coop_a_hi[i + 2u] = hi.z;
    coop_a_hi[i + 3u] = hi.w;
    if ACT_FMT == FMT_NONE {
        let lo = vec4<f16>(select(vec4<f32>(0.0), v - hv, finite));
        coop_a_lo[i] = lo.x;
        coop_a_lo[i + 1u] = lo.y;
        coop_a_lo[i + 2u] = lo.z;
        coop_a_lo[i + 3u] = lo.w;
    }
}

// Stage eight unscaled weights o (k = k0..k0+7 of tile column n) times
// 2^(byte - ew + COOP_WSH) (NaN for a NaN block).
fn coop_stage_w(k0: u32, n: u32, o: Octet, byte: u32, ew: i32) {
    let f = ldexp(1.0, i32(byte) - ew + coop_wsh());
    var lo = vec4<f16>(o.lo * f);
    var hi = vec4<f16>(o.hi * f);
    if byte == 255u {
        lo = vec4<f16>(vec4<f32>(bitcast<f32>(MX_NAN)));
        hi = lo;
    }
    coop_b[coop_b_at(k0, n)] = lo.x;
    coop_b[coop_b_at(k0 + 1u, n)] = lo.y;
    coop_b[coop_b_at(k0 + 2u, n)] = lo.z;
    coop_b[coop_b_at(k0 + 3u, n)] = lo.w;
    coop_b[coop_b_at(k0 + 4u, n)] = hi.x;
    coop_b[coop_b_at(k0 + 5u, n)] = hi.y;
    coop_b[coop_b_at(k0 + 6u, n)] = hi.z;
    coop_b[coop_b_at(k0 + 7u, n)] = hi.w;
}

// Largest finite |x| of eight activations, as f32 bits (0 when none).
fn coop_finite_max(a: vec4<f32>, b: vec4<f32>) -> u32 {
    let inf = vec4<u32>(0x7F800000u);
    let ua = bitcast<vec4<u32>>(a) & vec4<u32>(0x7FFFFFFFu);
    let ub = bitcast<vec4<u32>>(b) & vec4<u32>(0x7FFFFFFFu);
    let m = max(select(vec4<u32>(0u), ua, ua < inf), select(vec4<u32>(0u), ub, ub < inf));
    return max(max(m.x, m.y), max(m.z, m.w));
}

// Row r of the accumulator staging at columns c..c+3, times 2^e.
fn coop_read4(r: u32, c: u32, e: i32) -> vec4<f32> {
    let b = r * COOP_SC + c;
    return ldexp(vec4<f32>(coop_c[b], coop_c[b + 1u], coop_c[b + 2u], coop_c[b + 3u]),
                 vec4<i32>(e));
}

// The k-loop of coop_gemm1 / coop_gemm2 (the arguments of moe_gemm.wgsl's gemm_k_loop), ending
// with the accumulators scaled back and handed out in the tiled path's per-thread layout.
fn coop_k_loop(lid: u32, kk_total: u32, xoff: u32, wrow: u32, wcol: u32, wv: bool) -> GemmAcc {
    let kblocks = kk_total / 32u;
    let xr = lid / 4u;          // x loader: row xr, k offset xk..xk+7
    let xk = (lid % 4u) * 8u;
    let wk = (lid % 2u) * 16u;  // weight loader: tile column wcol, k offset wk..wk+15
    let sg = lid / 32u;
    let ra = (sg % 4u) * 16u * COOP_SA; // this subgroup's rows in the activation tiles
    let n0 = (sg / 4u) * 32u;           // and its first column in each half
    var c0 = coopLoadT<coop_mat16x16<f32, C>>(&coop_c[0], 16u); // zeros (set in the entry)
    var c1 = c0;
    var c2 = c0;
    var c3 = c0;
    let cb = mx_spec(WEIGHT_FMT).code_bits;
    var ex = -127;
    var ew = 0;
    let stage = (COOP_DIAG & 4u) == 0u;
    for (var k0 = 0u; k0 < kk_total; k0 = k0 + 32u) {
        let slot = (k0 / 32u) & 1u;
        var xa = vec4<f32>(0.0);
        var xb = vec4<f32>(0.0);
        if stage && xoff != 0xFFFFFFFFu {
            let o = xoff + k0 + xk;
            xa = vec4<f32>(x_in[o], x_in[o + 1u], x_in[o + 2u], x_in[o + 3u]);
            xb = vec4<f32>(x_in[o + 4u], x_in[o + 5u], x_in[o + 6u], x_in[o + 7u]);
        }
        var byte = 0u;
        var w0 = Octet(vec4<f32>(0.0), vec4<f32>(0.0));
        var w1 = w0;
        if stage && wv {
            let sidx = wrow * kblocks + k0 / 32u;
            byte = (w_scale_word(sidx / 4u) >> (8u * (sidx & 3u))) & 0xFFu;
            w0 = decode_weight_octet(sidx * cb, wk);
            w1 = decode_weight_octet(sidx * cb, wk + 8u);
        }
        let gx = subgroupMax(coop_finite_max(xa, xb));
        let gw = subgroupMax(select(byte, 0u, byte == 255u));
        if lid % 32u == 0u {
            atomicMax(&coop_xmax[slot], gx);
            atomicMax(&coop_wmax[slot], gw);
        }
        workgroupBarrier();
        // The other slot was last read before the previous step's second barrier; it is next
        // written after this step's.
        if lid == 0u {
            atomicStore(&coop_xmax[slot ^ 1u], 0u);
            atomicStore(&coop_wmax[slot ^ 1u], 0u);
        }
        let ex_new = max(ex, i32(atomicLoad(&coop_xmax[slot]) >> 23u) - 127);
        let ew_new = max(ew, i32(atomicLoad(&coop_wmax[slot])));
        // The same value in every invocation (the maxima after the barrier): the accumulators
        // are rescaled only in the steps that raise a maximum.
        if ex_new != ex || ew_new != ew {
            let f = ldexp(1.0, (ex - ex_new) + (ew - ew_new));
            c0 = c0 * f;
            c1 = c1 * f;
            c2 = c2 * f;
            c3 = c3 * f;
        }
        ex = ex_new;
        ew = ew_new;
        if stage {
            coop_stage_x(xr * COOP_SA + xk, xa, ex);
            coop_stage_x(xr * COOP_SA + xk + 4u, xb, ex);
            coop_stage_w(wk, wcol, w0, byte, ew);
            coop_stage_w(wk + 8u, wcol, w1, byte, ew);
        }
        workgroupBarrier();
        for (var ks = 0u; (ks < 32u) & ((COOP_DIAG & 2u) == 0u); ks = ks + 16u) {
            let b0 = coop_load_b(ks, n0);
            let b1 = coop_load_b(ks, n0 + 16u);
            let b2 = coop_load_b(ks, n0 + 64u);
            let b3 = coop_load_b(ks, n0 + 80u);
            let ah = coopLoadT<coop_mat16x16<f16, A>>(&coop_a_hi[ra + ks], COOP_SA);
            c0 = coopMultiplyAdd(ah, b0, c0);
            c1 = coopMultiplyAdd(ah, b1, c1);
            c2 = coopMultiplyAdd(ah, b2, c2);
            c3 = coopMultiplyAdd(ah, b3, c3);
            if (ACT_FMT == FMT_NONE) & ((COOP_DIAG & 8u) == 0u) {
                let al = coopLoadT<coop_mat16x16<f16, A>>(&coop_a_lo[ra + ks], COOP_SA);
                c0 = coopMultiplyAdd(al, b0, c0);
                c1 = coopMultiplyAdd(al, b1, c1);
                c2 = coopMultiplyAdd(al, b2, c2);
                c3 = coopMultiplyAdd(al, b3, c3);
            }
        }
    }
    // Hand the accumulators out through coop_c, one 64-column half at a time.
    let e = ex - COOP_ASH + ew - 127 - coop_wsh();
    let rc = (sg % 4u) * 16u * COOP_SC;
    workgroupBarrier();
    coopStoreT(c0, &coop_c[rc + n0], COOP_SC);
    coopStoreT(c1, &coop_c[rc + n0 + 16u], COOP_SC);
    workgroupBarrier();
    let ty = lid / 16u;
    let tx = lid % 16u;
    let lo0 = coop_read4(ty * 4u, tx * 4u, e);
    let lo1 = coop_read4(ty * 4u + 1u, tx * 4u, e);
    let lo2 = coop_read4(ty * 4u + 2u, tx * 4u, e);
    let lo3 = coop_read4(ty * 4u + 3u, tx * 4u, e);
    workgroupBarrier();
    coopStoreT(c2, &coop_c[rc + n0], COOP_SC);
    coopStoreT(c3, &coop_c[rc + n0 + 16u], COOP_SC);
    workgroupBarrier();
    return GemmAcc(
        lo0, coop_read4(ty * 4u, tx * 4u, e),
        lo1, coop_read4(ty * 4u + 1u, tx * 4u, e),
        lo2, coop_read4(ty * 4u + 2u, tx * 4u, e),
        lo3, coop_read4(ty * 4u + 3u, tx * 4u, e),
    );
}

// Zero what the k-loop expects zeroed (before load_tile, whose barrier publishes it).
fn coop_init(lid: u32) {
    coop_c[lid] = 0.0;
    if lid < 2u {
        atomicStore(&coop_xmax[lid], 0u);
        atomicStore(&coop_wmax[lid], 0u);
    }
}

// gemm1 on cooperative matrices (grid and output as moe_gemm.wgsl's gemm1).
@compute @workgroup_size(256)
fn coop_gemm1(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    coop_init(lid);
    let tile = load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let jb = wid.y * 64u;
    let ld = gemm1_load(lid, tile.x, tile.y, tile.z - tile.y, jb);
    let acc = coop_k_loop(lid, params.hidden, ld.xoff, ld.wrow, ld.wcol, ld.wv);
    gemm1_finish(lid, tile.x, tile.y, tile.z - tile.y, jb, acc);
}

// gemm2 on cooperative matrices (grid and output as moe_gemm.wgsl's gemm2).
@compute @workgroup_size(256)
fn coop_gemm2(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    coop_init(lid);
    let tile = load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let nb = wid.y * 128u;
    let ld = gemm2_load(lid, tile.x, tile.y, tile.z - tile.y, nb);
    let acc = coop_k_loop(lid, params.inter, ld.xoff, ld.wrow, ld.wcol, ld.wv);
    gemm2_finish(lid, tile.x, tile.y, tile.z - tile.y, nb, acc);
}

// The device check the host runs before choosing this path: one subgroup multiplies a 16x32
// activation tile by a 32x16 weight tile through exactly the loads, layouts and strides of the
// k-loop (row-major A, column-major B, row-major C store, the zero load, the scalar multiply)
// and writes C x 2 (16x16 f32, row-major) to out_bits. A[i][k] = (3i + k) % 7 - 3,
// B[k][n] = (5k + n) % 11 - 5: small integers, so the host knows C exactly
// (`Context::check_coop`).
@compute @workgroup_size(32)
fn coop_check(@builtin(local_invocation_index) lid: u32) {
    for (var i = lid; i < 512u; i = i + 32u) {
        let r = i / 32u; // A row / B column
        let k = i % 32u;
        coop_a_hi[r * COOP_SA + k] = f16(f32((3u * r + k) % 7u) - 3.0);
        coop_b[coop_b_at(k, r)] = f16(f32((5u * k + r) % 11u) - 5.0);
    }
    for (var i = lid; i < 256u; i = i + 32u) {
        coop_c[i] = 0.0;
    }
    workgroupBarrier();
    var c = coopLoadT<coop_mat16x16<f32, C>>(&coop_c[0], 16u);
    for (var ks = 0u; ks < 32u; ks = ks + 16u) {
        let a = coopLoadT<coop_mat16x16<f16, A>>(&coop_a_hi[ks], COOP_SA);
        let b = coop_load_b(ks, 0u);
        c = coopMultiplyAdd(a, b, c);
    }
    c = c * 2.0;
    coopStoreT(c, &coop_c[256], COOP_SC);
    workgroupBarrier();
    for (var i = lid; i < 256u; i = i + 32u) {
        out_bits[i] = bitcast<u32>(coop_c[256u + (i / 16u) * COOP_SC + i % 16u]);
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel k64 (`coop64_gemm1`, `coop64_gemm2`; where `coop64_check` passes,
// `MXMOE_COOP_KERNEL=k64`, and the default where k64pw's check fails; `MXMOE_COOP_KERNEL=k32`
// keeps the kernel above). Same tile (64 rows x 128 weight columns),
// same epilogues, same numerics contract (the running exponents ex / ew, exact weight staging,
// activations as hi + lo); what changes is how the tiles get into workgroup memory and how
// many matrix instructions each staged byte feeds. Kernel k32 spent ~80 % of its time staging
// (docs/h200-2026-12-01-wgpucoop): 16-bit stores that hit 4-8 ways of bank conflicts, FP4 codes
// decoded through a byte table in workgroup memory, and two barriers plus two atomics per K step
// of only 32, with nothing in flight across them. Here:
//   * K steps of 64 (two MX blocks): half the barriers, atomics and exponent updates per MMA.
//   * Layouts chosen so that every 16-bit store of a subgroup writes 64 consecutive bytes
//     (conflict-free): activations column-major ([k][row], 32 consecutive rows per subgroup,
//     loaded with coopLoad) and weights row-major ([k][n], 32 consecutive columns per subgroup,
//     loaded with coopLoadT). Both strides are 16-byte multiples (72 and 136 f16).
//   * FP4 words decoded in registers (decode_fp4_word, moe_gemv_fp4_registers.wgsl) where the
//     adapter passed fp4_decode_check (COOP_FP4_REGISTERS); activations and FP4 words are read
//     as vec4 (one 16-byte load = 4 activations or one whole FP4 block).
//   * The next step's activations, FP4 words and scale bytes are loaded into registers before
//     the current step's MMAs, so the global loads are in flight while the tensor cores run.
//   * Subgroup s owns rows (s % 2) * 32..+31 x columns (s / 2) * 32..+31 (2 x 2 fragments):
//     every A and B fragment loaded feeds two MMAs (four with the lo part).
// Invocation roles per K step: activations: row lid % 64, k (lid / 64) * 16..+15; weights:
// tile column lid % 128, MX block lid / 128 of the step (k 0..31 or 32..63).
// Workgroup memory: 9216 x 2 + 17408 + 8704 + 1024 (code table) + 512 + 32 = 46 KiB (the H200's
// Vulkan limit is 48 KiB).

const C64_SAT: u32 = 72u;  // f16 per k row of the activation tiles ([k][row]): 64 + 8
const C64_SBT: u32 = 136u; // f16 per k row of the weight tile ([k][n]): 128 + 8
const C64_SC: u32 = 68u;   // f32 per row of the hand-out staging ([32 rows][64 columns]): 64 + 4

// 1: FP4 words are decoded in registers (the host sets it where fp4_decode_check passed), 0:
// through the code table like every other format.
override COOP_FP4_REGISTERS: u32 = 0u;

var<workgroup> c64_ah: array<f16, 4608>; // [64 k][C64_SAT]: activation hi, column-major A
var<workgroup> c64_al: array<f16, 4608>; // [64 k][C64_SAT]: activation lo (weight-only schemes)
var<workgroup> c64_b: array<f16, 8704>;  // [64 k][C64_SBT]: weights, row-major B
var<workgroup> c64_c: array<f32, 2176>;  // [32][C64_SC]: zeros, then the hand-out staging
// In range by construction (kernels k64 / k64p / k64pw are built without naga's index clamps
// and loop bounding: COOP_TRUSTED_ENTRIES in src/backend/wgpu/context.rs; tests/shaders.rs
// `coop_trusted_entries_are_in_bounds` proves each of these by interval analysis of the
// specialised IR, for every override combination), with lid < 256, sg = lid / 32 < 8:
//   * activation stores (c64_stage_x, c64pw_store8): k = (lid / 64) * 16 + 0..15 <= 63 and
//     row = lid % 64, so k * C64_SAT + row <= 63 * 72 + 63 = 4599 < 4608.
//   * weight stores (c64_stage_w8): k = (lid / 128) * 32 + 0..31 <= 63 and n = the tile column
//     < 128 (gemm1_load / gemm2_load give wcol < 128 for lid < 256), so <= 63 * 136 + 127 =
//     8695 < 8704.
//   * MMA fragments: ks in 0, 16, 32, 48, r0 + 16 <= 48, n0 + 16 <= 112: A reads up to
//     (48 + 15) * 72 + 48 + 15 = 4599, B up to (48 + 15) * 136 + 112 + 15 = 8695.
//   * hand-out: so + 15 * C64_SC + 15 <= 1136 + 1035 = 2171 < 2176, and c64_read /
//     c64p_read read up to 28 * 68 + 28 + 3 * 68 + 32 + 3 = 2171; c64_c[lid] < 256.
//   * coop_xmax / coop_wmax: slot = step & 1 and lid < 2 under `if lid < 2u`; code_value
//     (256) by lid and by codes masked to code_bits <= 8; block_amax (128) by
//     (ty * 4 + 3) * 2 + 1 <= 127 and lid < 128 under its guard.
//   * loops: the K loop counts steps (<= 2^26), the MMA loop 4, the epilogues' 4 or 8.
// Storage buffers are not clamped by naga here either way: Vulkan's robust buffer access
// (enabled by wgpu where the device offers it) bounds them.

// What one invocation loads for one K step (registers; loaded a step ahead).
struct C64Raw {
    x0: vec4<f32>, // activations k .. k + 15 of row lid % 64
    x1: vec4<f32>,
    x2: vec4<f32>,
    x3: vec4<f32>,
    w: vec4<u32>,  // the FP4 block (COOP_FP4_REGISTERS)
    byte: u32,     // its E8M0 byte (0 where no block)
    wok: bool,     // the weight block exists
}

fn c64_fp4_regs() -> bool {
    return COOP_FP4_REGISTERS != 0u && mx_spec(WEIGHT_FMT).code_bits == 4u;
}

// The loads of K step k0: x row at xoff (0xFFFFFFFF: none), weight row wrow (valid wv) block
// k0 / 32 + blk. Nothing past K (zeros: the staged values there are exact zeros).
fn c64_fetch(k0: u32, kk_total: u32, xoff: u32, kq: u32, wrow: u32, wv: bool, blk: u32) -> C64Raw {
    var r = C64Raw(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
                   vec4<u32>(0u), 0u, false);
    if (COOP_DIAG & 4u) != 0u {
        return r;
    }
    let k = k0 + kq * 16u;
    if xoff != 0xFFFFFFFFu && k < kk_total {
        let v = (xoff + k) / 4u; // xoff and k are multiples of 16
        r.x0 = x_in_vec4[v];
        r.x1 = x_in_vec4[v + 1u];
        r.x2 = x_in_vec4[v + 2u];
        r.x3 = x_in_vec4[v + 3u];
    }
    let kblocks = kk_total / 32u;
    let kb = k0 / 32u + blk;
    if wv && kb < kblocks {
        let sidx = wrow * kblocks + kb;
        r.byte = (w_scale_word(sidx / 4u) >> (8u * (sidx & 3u))) & 0xFFu;
        r.wok = true;
        if c64_fp4_regs() {
            r.w = w_word4(sidx); // an FP4 block is 4 words
        }
    }
    return r;
}

// Largest finite |x| of the 16 activations (f32 bits; 0 when none).
fn c64_xmax(r: C64Raw) -> u32 {
    return max(coop_finite_max(r.x0, r.x1), coop_finite_max(r.x2, r.x3));
}

// Stage four activations (k = k..k+3 of row `row`) as hi (and lo) into the column-major tiles.
fn c64_stage_x(k: u32, row: u32, x: vec4<f32>, ex: i32) {
    let v = ldexp(x, vec4<i32>(COOP_ASH - ex));
    let finite = (bitcast<vec4<u32>>(x) & vec4<u32>(0x7FFFFFFFu)) < vec4<u32>(0x7F800000u);
    let hv = select(v, bitcast<vec4<f32>>(bitcast<vec4<u32>>(v) & vec4<u32>(0xFFFFE000u)), finite);
    let hi = vec4<f16>(hv);
    let i = k * C64_SAT + row;
    c64_ah[i] = hi.x;
    c64_ah[i + C64_SAT] = hi.y;
    c64_ah[i + 2u * C64_SAT] = hi.z;
    c64_ah[i + 3u * C64_SAT] = hi.w;
    if ACT_FMT == FMT_NONE {
        let lo = vec4<f16>(select(vec4<f32>(0.0), v - hv, finite));
        c64_al[i] = lo.x;
        c64_al[i + C64_SAT] = lo.y;
        c64_al[i + 2u * C64_SAT] = lo.z;
        c64_al[i + 3u * C64_SAT] = lo.w;
    }
}

// Stage eight weights (k = k..k+7 of tile column n), already scaled, into the row-major tile.
fn c64_stage_w8(k: u32, n: u32, o: Octet, f: f32, nan: bool) {
    var lo = vec4<f16>(o.lo * f);
    var hi = vec4<f16>(o.hi * f);
    if nan {
        lo = vec4<f16>(vec4<f32>(bitcast<f32>(MX_NAN)));
        hi = lo;
    }
    let i = k * C64_SBT + n;
    c64_b[i] = lo.x;
    c64_b[i + C64_SBT] = lo.y;
    c64_b[i + 2u * C64_SBT] = lo.z;
    c64_b[i + 3u * C64_SBT] = lo.w;
    c64_b[i + 4u * C64_SBT] = hi.x;
    c64_b[i + 5u * C64_SBT] = hi.y;
    c64_b[i + 6u * C64_SBT] = hi.z;
    c64_b[i + 7u * C64_SBT] = hi.w;
}

// Stage this invocation's weight block (32 values of tile column n at k = blk * 32..+31) times
// 2^(byte - ew + COOP_WSH) (NaN for a NaN block, zeros where there is no block).
fn c64_stage_w(r: C64Raw, n: u32, blk: u32, wrow: u32, kblocks: u32, kb: u32, ew: i32) {
    let k = blk * 32u;
    let nan = r.byte == 255u;
    if c64_fp4_regs() {
        // decode_fp4_word gives the values times 2^-14.
        let f = ldexp(1.0, i32(r.byte) - ew + coop_wsh() + 14);
        c64_stage_w8(k, n, decode_fp4_word(r.w.x), f, nan);
        c64_stage_w8(k + 8u, n, decode_fp4_word(r.w.y), f, nan);
        c64_stage_w8(k + 16u, n, decode_fp4_word(r.w.z), f, nan);
        c64_stage_w8(k + 24u, n, decode_fp4_word(r.w.w), f, nan);
        return;
    }
    let f = ldexp(1.0, i32(r.byte) - ew + coop_wsh());
    var o0 = Octet(vec4<f32>(0.0), vec4<f32>(0.0));
    var o1 = o0;
    var o2 = o0;
    var o3 = o0;
    if r.wok {
        let wb = (wrow * kblocks + kb) * mx_spec(WEIGHT_FMT).code_bits;
        o0 = weight_octet_table(wb, 0u);
        o1 = weight_octet_table(wb, 8u);
        o2 = weight_octet_table(wb, 16u);
        o3 = weight_octet_table(wb, 24u);
    }
    c64_stage_w8(k, n, o0, f, nan);
    c64_stage_w8(k + 8u, n, o1, f, nan);
    c64_stage_w8(k + 16u, n, o2, f, nan);
    c64_stage_w8(k + 24u, n, o3, f, nan);
}

// Rows ty*4..+3 of the hand-out staging (tile columns tx*4..+3 and 64 + tx*4..+3) times 2^e.
// Staging row of tile row r: (r / 32) * 16 + r % 16; column of tile column c: (c / 32) * 16 +
// c % 16 (see c64_k_loop).
fn c64_read(ty: u32, tx: u32, e: i32) -> GemmAcc {
    let r = (ty / 8u) * 16u + (ty % 4u) * 4u;
    let c = (tx / 8u) * 16u + (tx % 4u) * 4u;
    let b = r * C64_SC + c;
    return GemmAcc(
        c64_read4(b, e), c64_read4(b + 32u, e),
        c64_read4(b + C64_SC, e), c64_read4(b + C64_SC + 32u, e),
        c64_read4(b + 2u * C64_SC, e), c64_read4(b + 2u * C64_SC + 32u, e),
        c64_read4(b + 3u * C64_SC, e), c64_read4(b + 3u * C64_SC + 32u, e),
    );
}

fn c64_read4(b: u32, e: i32) -> vec4<f32> {
    return ldexp(vec4<f32>(c64_c[b], c64_c[b + 1u], c64_c[b + 2u], c64_c[b + 3u]), vec4<i32>(e));
}

// The k-loop of coop64_gemm1 / coop64_gemm2: x row of this invocation at xoff, weight row wrow
// (valid wv) of tile column wn (= lid % 128). Ends with the accumulators in the tiled path's
// per-thread layout (GemmAcc), scaled back.
fn c64_k_loop(lid: u32, kk_total: u32, xoff: u32, wrow: u32, wn: u32, wv: bool) -> GemmAcc {
    let kblocks = kk_total / 32u;
    let xr = lid % 64u;   // activation row
    let kq = lid / 64u;   // its k quarter of the step
    let blk = lid / 128u; // the block of the step of weight tile column wn (= lid % 128)
    let sg = lid / 32u;
    let r0 = (sg % 2u) * 32u; // this subgroup's rows
    let n0 = (sg / 2u) * 32u; // and columns
    var c00 = coopLoadT<coop_mat16x16<f32, C>>(&c64_c[0], 16u); // zeros (set in the entry)
    var c01 = c00;
    var c10 = c00;
    var c11 = c00;
    var ex = -127;
    var ew = 0;
    let stage = (COOP_DIAG & 4u) == 0u;
    var raw = c64_fetch(0u, kk_total, xoff, kq, wrow, wv, blk);
    // Counted in steps (steps <= 2^26: the counter cannot wrap, a loop that provably ends:
    // these kernels are built without naga's loop bounding, COOP_TRUSTED_ENTRIES).
    let steps = kk_total / 64u + select(0u, 1u, kk_total % 64u != 0u);
    for (var step = 0u; step < steps; step = step + 1u) {
        let k0 = 64u * step;
        let slot = step & 1u;
        let gx = subgroupMax(c64_xmax(raw));
        let gw = subgroupMax(select(raw.byte, 0u, raw.byte == 255u));
        if lid % 32u == 0u {
            atomicMax(&coop_xmax[slot], gx);
            atomicMax(&coop_wmax[slot], gw);
        }
        workgroupBarrier();
        // The other slot was last read before the previous step's second barrier; it is next
        // written after this step's.
        if lid == 0u {
            atomicStore(&coop_xmax[slot ^ 1u], 0u);
            atomicStore(&coop_wmax[slot ^ 1u], 0u);
        }
        let ex_new = max(ex, i32(atomicLoad(&coop_xmax[slot]) >> 23u) - 127);
        let ew_new = max(ew, i32(atomicLoad(&coop_wmax[slot])));
        // The same value in every invocation: rescaled only in steps that raise a maximum.
        if ex_new != ex || ew_new != ew {
            let f = ldexp(1.0, (ex - ex_new) + (ew - ew_new));
            c00 = c00 * f;
            c01 = c01 * f;
            c10 = c10 * f;
            c11 = c11 * f;
        }
        ex = ex_new;
        ew = ew_new;
        if stage {
            let k = kq * 16u;
            c64_stage_x(k, xr, raw.x0, ex);
            c64_stage_x(k + 4u, xr, raw.x1, ex);
            c64_stage_x(k + 8u, xr, raw.x2, ex);
            c64_stage_x(k + 12u, xr, raw.x3, ex);
            c64_stage_w(raw, wn, blk, wrow, kblocks, k0 / 32u + blk, ew);
        }
        workgroupBarrier();
        // The next step's loads, in flight during this step's MMAs.
        raw = c64_fetch(k0 + 64u, kk_total, xoff, kq, wrow, wv, blk);
        for (var kq16 = 0u; (kq16 < 4u) & ((COOP_DIAG & 2u) == 0u); kq16 = kq16 + 1u) {
            let ks = 16u * kq16; // 0, 16, 32, 48: the fragments' extents end at k 63
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&c64_b[ks * C64_SBT + n0], C64_SBT);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&c64_b[ks * C64_SBT + n0 + 16u], C64_SBT);
            let a0 = coopLoad<coop_mat16x16<f16, A>>(&c64_ah[ks * C64_SAT + r0], C64_SAT);
            let a1 = coopLoad<coop_mat16x16<f16, A>>(&c64_ah[ks * C64_SAT + r0 + 16u], C64_SAT);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            if (ACT_FMT == FMT_NONE) & ((COOP_DIAG & 8u) == 0u) {
                let l0 = coopLoad<coop_mat16x16<f16, A>>(&c64_al[ks * C64_SAT + r0], C64_SAT);
                let l1 = coopLoad<coop_mat16x16<f16, A>>(&c64_al[ks * C64_SAT + r0 + 16u], C64_SAT);
                c00 = coopMultiplyAdd(l0, b0, c00);
                c01 = coopMultiplyAdd(l0, b1, c01);
                c10 = coopMultiplyAdd(l1, b0, c10);
                c11 = coopMultiplyAdd(l1, b1, c11);
            }
        }
    }
    // Hand the accumulators out in four rounds, one fragment per subgroup each: round j
    // (c00, c01, c10, c11) holds tile rows with (r / 16) % 2 == j / 2 and columns with
    // (c / 16) % 2 == j % 2, staged at row (r / 32) * 16 + r % 16, column (c / 32) * 16 + c % 16.
    // Invocation (ty, tx) finds all its values (rows ty*4..+3; columns tx*4..+3, 64 + tx*4..+3)
    // in round 2 * ((ty / 4) % 2) + (tx / 4) % 2.
    let e = ex - COOP_ASH + ew - 127 - coop_wsh();
    let ty = lid / 16u;
    let tx = lid % 16u;
    let mine = 2u * ((ty / 4u) % 2u) + (tx / 4u) % 2u;
    let so = (sg % 2u) * 16u * C64_SC + (sg / 2u) * 16u;
    var acc = GemmAcc(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
                      vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    workgroupBarrier();
    coopStoreT(c00, &c64_c[so], C64_SC);
    workgroupBarrier();
    if mine == 0u {
        acc = c64_read(ty, tx, e);
    }
    workgroupBarrier();
    coopStoreT(c01, &c64_c[so], C64_SC);
    workgroupBarrier();
    if mine == 1u {
        acc = c64_read(ty, tx, e);
    }
    workgroupBarrier();
    coopStoreT(c10, &c64_c[so], C64_SC);
    workgroupBarrier();
    if mine == 2u {
        acc = c64_read(ty, tx, e);
    }
    workgroupBarrier();
    coopStoreT(c11, &c64_c[so], C64_SC);
    workgroupBarrier();
    if mine == 3u {
        acc = c64_read(ty, tx, e);
    }
    return acc;
}

// load_tile without the FP4 byte table (k64 decodes FP4 in registers or through code_value).
fn c64_load_tile(lid: u32, slot: u32) -> vec4<u32> {
    code_value[lid] = bitcast<f32>(mx_dequant_bits(WEIGHT_FMT, lid, 127u));
    c64_c[lid] = 0.0;
    if lid < 2u {
        atomicStore(&coop_xmax[lid], 0u);
        atomicStore(&coop_wmax[lid], 0u);
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

// gemm1 on cooperative matrices, kernel k64 (grid and output as moe_gemm.wgsl's gemm1).
@compute @workgroup_size(256)
fn coop64_gemm1(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = c64_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let jb = wid.y * 64u;
    let cnt = tile.z - tile.y;
    // gemm1_load's x row is its argument / 4; its weight row is its argument / 2, which lands
    // in tile column wr (SiLU) or (wr % 2) * 64 + wr / 2 (interleaved): invert that so that
    // invocation lid stages tile column lid % 128 (consecutive columns per subgroup).
    let lx = gemm1_load(4u * (lid % 64u), tile.x, tile.y, cnt, jb);
    let wn = lid % 128u;
    let wr = select(2u * (wn % 64u) + wn / 64u, wn, ACTIVATION == ACT_SILU);
    let lw = gemm1_load(2u * wr, tile.x, tile.y, cnt, jb);
    let acc = c64_k_loop(lid, params.hidden, lx.xoff, lw.wrow, lw.wcol, lw.wv);
    gemm1_finish(lid, tile.x, tile.y, cnt, jb, acc);
}

// gemm2 on cooperative matrices, kernel k64 (grid and output as moe_gemm.wgsl's gemm2).
@compute @workgroup_size(256)
fn coop64_gemm2(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = c64_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let nb = wid.y * 128u;
    let cnt = tile.z - tile.y;
    let lx = gemm2_load(4u * (lid % 64u), tile.x, tile.y, cnt, nb);
    let lw = gemm2_load(2u * (lid % 128u), tile.x, tile.y, cnt, nb);
    let acc = c64_k_loop(lid, params.inter, lx.xoff, lw.wrow, lw.wcol, lw.wv);
    gemm2_finish(lid, tile.x, tile.y, cnt, nb, acc);
}

// The device check of kernel k64's layouts (as coop_check, same product and output): A
// column-major in c64_ah (stride C64_SAT, coopLoad), B row-major in c64_b (stride C64_SBT,
// coopLoadT), C stored row-major with stride C64_SC (coopStoreT), the zero load, the scalar
// multiply.
@compute @workgroup_size(32)
fn coop64_check(@builtin(local_invocation_index) lid: u32) {
    for (var i = lid; i < 512u; i = i + 32u) {
        let r = i / 32u; // A row / B column
        let k = i % 32u;
        c64_ah[k * C64_SAT + r] = f16(f32((3u * r + k) % 7u) - 3.0);
        c64_b[k * C64_SBT + r] = f16(f32((5u * k + r) % 11u) - 5.0);
    }
    for (var i = lid; i < 256u; i = i + 32u) {
        c64_c[i] = 0.0;
    }
    workgroupBarrier();
    var c = coopLoadT<coop_mat16x16<f32, C>>(&c64_c[0], 16u);
    for (var ks = 0u; ks < 32u; ks = ks + 16u) {
        let a = coopLoad<coop_mat16x16<f16, A>>(&c64_ah[ks * C64_SAT], C64_SAT);
        let b = coopLoadT<coop_mat16x16<f16, B>>(&c64_b[ks * C64_SBT], C64_SBT);
        c = coopMultiplyAdd(a, b, c);
    }
    c = c * 2.0;
    workgroupBarrier();
    coopStoreT(c, &c64_c[C64_SC], C64_SC);
    workgroupBarrier();
    for (var i = lid; i < 256u; i = i + 32u) {
        out_bits[i] = bitcast<u32>(c64_c[C64_SC + (i / 16u) * C64_SC + i % 16u]);
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel k64p (`coop64p_gemm1`, `coop64p_gemm2`; `MXMOE_COOP_KERNEL=k64p`, not the default:
// slower than k64pw on the H200): kernel k64 with the activation staging taken out of the k-loop. On the H200 (gpt-oss-120b,
// 2048 tokens, docs/h200-2026-12-01s5-route) k64's global loads and f16 staging took ~12 of
// its 18 ms, and gemm1 converts every activation row once per 128-column block (45 times for
// gpt-oss) with an atomic per subgroup and K step for the running exponent ex. Here the
// pre-passes of moe_coop_prepass.wgsl convert each stage's activations once per forward into
// f16 hi (+ lo for weight-only schemes) rows with one power-of-two exponent per ROW (xp_hi,
// xp_lo, xp_exp; bindings 17-19), in GEMM row order, and the k-loop loads its A fragments
// straight from those storage buffers (coopLoadT: row-major, stride K; naga 30 takes any
// pointer to scalars, storage included, for OpCooperativeMatrixLoadKHR). Weights keep k64's
// staging (FP4 decoded in registers or through the code table, running exponent ew, row-major
// B in workgroup memory, the next step's blocks loaded during the MMAs), and the same
// hand-out and epilogues (gemm1_finish, gemm2_finish: bias, router weight, activation,
// intermediate QDQ).
//
// Numerics (docs/NUMERICS.md 10.3; the pre-pass header has the activation side):
//   * A = hi (+ lo) of v = x * 2^(14 - e_r), e_r the row's exponent: hi + lo carries about
//     22 significant bits of x (relative error <= 2^-21) for |x| >= 2^-17 of the ROW's largest
//     finite |x| (k64: of the TILE's largest so far, the accumulators rescaled when a later K
//     step raised it), and errs by at most 2^-39 of the row's largest below that (2^-28 if the
//     driver flushes f16 subnormals). MX-quantized activations: hi alone, exact down to 2^-28
//     of the row's largest.
//   * Weights exactly as k64 (staged code x 2^(byte - ew + COOP_WSH), |staged| < 2^15, exact
//     while an f16 normal; the accumulators are multiplied by the power of two of a change of
//     ew: exact).
//   * f16 x f16 products are exact in f32; the tensor cores accumulate in f32. The hand-out
//     multiplies row r by 2^(e_r - 14 + ew - 127 - COOP_WSH) in two exact ldexp steps (each
//     exponent within f32's range; the result is exact but for f32 over/underflow).
//   * NaN/Inf: a NaN activation is a NaN hi, +-Inf an infinite hi (lo 0): they propagate
//     through the MMA into their row as in k64; NaN scale bytes stage NaN weights.
//   * COOP_DIAG bit 2 skips the weights' loads and staging only (A is loaded by the MMAs).
//   * Rows of a tile past its row count (cnt) load whatever the neighbouring rows hold (another
//     expert's rows, or the buffers' 64 rows of padding): a row of A only reaches the same row
//     of C, and the epilogues drop rows >= cnt. K steps past K are skipped (no loads).
// Workgroup memory: k64's without the activation tiles (the weight tile 17408, the hand-out
// staging 8704, the code table 1024, block_amax 512, the tile descriptor and exponent slots).

@group(0) @binding(17) var<storage, read> xp_hi: array<f16>;  // [rows (+64)][K]
@group(0) @binding(18) var<storage, read> xp_lo: array<f16>;  // [rows (+64)][K] (weight-only)
@group(0) @binding(19) var<storage, read> xp_exp: array<i32>; // [rows]: e_r

// k64's weight loads of K step k0 (no activations: they come from xp_hi / xp_lo).
fn c64p_fetch(k0: u32, kk_total: u32, wrow: u32, wv: bool, blk: u32) -> C64Raw {
    var r = C64Raw(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
                   vec4<u32>(0u), 0u, false);
    if (COOP_DIAG & 4u) != 0u {
        return r;
    }
    let kblocks = kk_total / 32u;
    let kb = k0 / 32u + blk;
    if wv && kb < kblocks {
        let sidx = wrow * kblocks + kb;
        r.byte = (w_scale_word(sidx / 4u) >> (8u * (sidx & 3u))) & 0xFFu;
        r.wok = true;
        if c64_fp4_regs() {
            r.w = w_word4(sidx); // an FP4 block is 4 words
        }
    }
    return r;
}

// v x 2^e in two exact steps (ldexp's exponent stays within f32's range in each).
fn c64p_scale(v: vec4<f32>, e: i32) -> vec4<f32> {
    let a = clamp(e, -126, 127);
    return ldexp(ldexp(v, vec4<i32>(a)), vec4<i32>(e - a));
}

// Rows ty*4..+3 of the hand-out staging (as c64_read), row i times 2^e[i].
fn c64p_read(ty: u32, tx: u32, e: vec4<i32>) -> GemmAcc {
    let r = (ty / 8u) * 16u + (ty % 4u) * 4u;
    let c = (tx / 8u) * 16u + (tx % 4u) * 4u;
    let b = r * C64_SC + c;
    return GemmAcc(
        c64p_scale(c64p_stage4(b), e.x), c64p_scale(c64p_stage4(b + 32u), e.x),
        c64p_scale(c64p_stage4(b + C64_SC), e.y), c64p_scale(c64p_stage4(b + C64_SC + 32u), e.y),
        c64p_scale(c64p_stage4(b + 2u * C64_SC), e.z),
        c64p_scale(c64p_stage4(b + 2u * C64_SC + 32u), e.z),
        c64p_scale(c64p_stage4(b + 3u * C64_SC), e.w),
        c64p_scale(c64p_stage4(b + 3u * C64_SC + 32u), e.w),
    );
}

fn c64p_stage4(b: u32) -> vec4<f32> {
    return vec4<f32>(c64_c[b], c64_c[b + 1u], c64_c[b + 2u], c64_c[b + 3u]);
}

// The exponent of tile row r (0 past the tile's rows: those are dropped).
fn c64p_row_exp(start: u32, cnt: u32, r: u32) -> i32 {
    if r < cnt {
        return xp_exp[start + r];
    }
    return 0;
}

// The k-loop of coop64p_gemm1 / coop64p_gemm2: the tile's rows start at GEMM row `start` of the
// pre-converted activations (cnt of them); weight row wrow (valid wv) of tile column wn
// (= lid % 128). Ends with the accumulators in the tiled path's per-thread layout (GemmAcc),
// each row scaled back by its own exponent.
fn c64p_k_loop(lid: u32, kk_total: u32, start: u32, cnt: u32, wrow: u32, wn: u32,
               wv: bool) -> GemmAcc {
    let kblocks = kk_total / 32u;
    let blk = lid / 128u; // the block of the step of weight tile column wn (= lid % 128)
    let sg = lid / 32u;
    let r0 = (sg % 2u) * 32u; // this subgroup's rows
    let n0 = (sg / 2u) * 32u; // and columns
    let a0_at = (start + r0) * kk_total; // f16 index of its first row in xp_hi / xp_lo
    let a1_at = a0_at + 16u * kk_total;
    var c00 = coopLoadT<coop_mat16x16<f32, C>>(&c64_c[0], 16u); // zeros (set in the entry)
    var c01 = c00;
    var c10 = c00;
    var c11 = c00;
    var ew = 0;
    let stage = (COOP_DIAG & 4u) == 0u;
    var raw = c64p_fetch(0u, kk_total, wrow, wv, blk);
    // Counted in steps (steps <= 2^26: the counter cannot wrap, a loop that provably ends:
    // these kernels are built without naga's loop bounding, COOP_TRUSTED_ENTRIES).
    let steps = kk_total / 64u + select(0u, 1u, kk_total % 64u != 0u);
    for (var step = 0u; step < steps; step = step + 1u) {
        let k0 = 64u * step;
        let slot = step & 1u;
        let gw = subgroupMax(select(raw.byte, 0u, raw.byte == 255u));
        if lid % 32u == 0u {
            atomicMax(&coop_wmax[slot], gw);
        }
        workgroupBarrier();
        // The other slot was last read before the previous step's second barrier; it is next
        // written after this step's.
        if lid == 0u {
            atomicStore(&coop_wmax[slot ^ 1u], 0u);
        }
        let ew_new = max(ew, i32(atomicLoad(&coop_wmax[slot])));
        // The same value in every invocation: rescaled only in steps that raise the maximum.
        if ew_new != ew {
            let f = ldexp(1.0, ew - ew_new);
            c00 = c00 * f;
            c01 = c01 * f;
            c10 = c10 * f;
            c11 = c11 * f;
        }
        ew = ew_new;
        if stage {
            c64_stage_w(raw, wn, blk, wrow, kblocks, k0 / 32u + blk, ew);
        }
        workgroupBarrier();
        // The next step's weight loads, in flight during this step's MMAs.
        raw = c64p_fetch(k0 + 64u, kk_total, wrow, wv, blk);
        for (var kq16 = 0u; (kq16 < 4u) & ((COOP_DIAG & 2u) == 0u); kq16 = kq16 + 1u) {
            let ks = 16u * kq16; // 0, 16, 32, 48: the fragments' extents end at k 63
            if k0 + ks >= kk_total {
                break; // K is a multiple of 32: the step's second half may lie past K
            }
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&c64_b[ks * C64_SBT + n0], C64_SBT);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&c64_b[ks * C64_SBT + n0 + 16u], C64_SBT);
            let k = k0 + ks;
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xp_hi[a0_at + k], kk_total);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xp_hi[a1_at + k], kk_total);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            if (ACT_FMT == FMT_NONE) & ((COOP_DIAG & 8u) == 0u) {
                let l0 = coopLoadT<coop_mat16x16<f16, A>>(&xp_lo[a0_at + k], kk_total);
                let l1 = coopLoadT<coop_mat16x16<f16, A>>(&xp_lo[a1_at + k], kk_total);
                c00 = coopMultiplyAdd(l0, b0, c00);
                c01 = coopMultiplyAdd(l0, b1, c01);
                c10 = coopMultiplyAdd(l1, b0, c10);
                c11 = coopMultiplyAdd(l1, b1, c11);
            }
        }
    }
    // Hand the accumulators out as k64 does (four rounds; see c64_k_loop), each row times
    // 2^(e_r - 14 + ew - 127 - COOP_WSH).
    let ty = lid / 16u;
    let tx = lid % 16u;
    let ec = -COOP_ASH + ew - 127 - coop_wsh();
    let e = vec4<i32>(
        c64p_row_exp(start, cnt, ty * 4u) + ec,
        c64p_row_exp(start, cnt, ty * 4u + 1u) + ec,
        c64p_row_exp(start, cnt, ty * 4u + 2u) + ec,
        c64p_row_exp(start, cnt, ty * 4u + 3u) + ec,
    );
    let mine = 2u * ((ty / 4u) % 2u) + (tx / 4u) % 2u;
    let so = (sg % 2u) * 16u * C64_SC + (sg / 2u) * 16u;
    var acc = GemmAcc(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
                      vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    workgroupBarrier();
    coopStoreT(c00, &c64_c[so], C64_SC);
    workgroupBarrier();
    if mine == 0u {
        acc = c64p_read(ty, tx, e);
    }
    workgroupBarrier();
    coopStoreT(c01, &c64_c[so], C64_SC);
    workgroupBarrier();
    if mine == 1u {
        acc = c64p_read(ty, tx, e);
    }
    workgroupBarrier();
    coopStoreT(c10, &c64_c[so], C64_SC);
    workgroupBarrier();
    if mine == 2u {
        acc = c64p_read(ty, tx, e);
    }
    workgroupBarrier();
    coopStoreT(c11, &c64_c[so], C64_SC);
    workgroupBarrier();
    if mine == 3u {
        acc = c64p_read(ty, tx, e);
    }
    return acc;
}

// gemm1 on cooperative matrices, kernel k64p (grid and output as moe_gemm.wgsl's gemm1; the
// activations are xp_hi / xp_lo from coopp_prep1).
@compute @workgroup_size(256)
fn coop64p_gemm1(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = c64_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let jb = wid.y * 64u;
    let cnt = tile.z - tile.y;
    // Weight tile column lid % 128 as in coop64_gemm1.
    let wn = lid % 128u;
    let wr = select(2u * (wn % 64u) + wn / 64u, wn, ACTIVATION == ACT_SILU);
    let lw = gemm1_load(2u * wr, tile.x, tile.y, cnt, jb);
    let acc = c64p_k_loop(lid, params.hidden, tile.y, cnt, lw.wrow, lw.wcol, lw.wv);
    gemm1_finish(lid, tile.x, tile.y, cnt, jb, acc);
}

// gemm2 on cooperative matrices, kernel k64p (grid and output as moe_gemm.wgsl's gemm2; the
// activations are xp_hi / xp_lo from coopp_prep2).
@compute @workgroup_size(256)
fn coop64p_gemm2(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = c64_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let nb = wid.y * 128u;
    let cnt = tile.z - tile.y;
    let lw = gemm2_load(2u * (lid % 128u), tile.x, tile.y, cnt, nb);
    let acc = c64p_k_loop(lid, params.inter, tile.y, cnt, lw.wrow, lw.wcol, lw.wv);
    gemm2_finish(lid, tile.x, tile.y, cnt, nb, acc);
}

// The device check of kernel k64p's A loads: as coop64_check (same product, same output), but
// A comes from the storage buffer xp_hi (the host writes A[i][k] = (3i + k) % 7 - 3 there as
// f16, row-major with stride 40: a stride and a row offset like the GEMM's, multiples of 16
// bytes) through coopLoadT, as the k-loop loads it.
@compute @workgroup_size(32)
fn coop64p_check(@builtin(local_invocation_index) lid: u32) {
    for (var i = lid; i < 512u; i = i + 32u) {
        let r = i / 32u; // B column
        let k = i % 32u;
        c64_b[k * C64_SBT + r] = f16(f32((5u * k + r) % 11u) - 5.0);
    }
    for (var i = lid; i < 256u; i = i + 32u) {
        c64_c[i] = 0.0;
    }
    workgroupBarrier();
    var c = coopLoadT<coop_mat16x16<f32, C>>(&c64_c[0], 16u);
    for (var ks = 0u; ks < 32u; ks = ks + 16u) {
        // Row 0 of A sits at row 1 of the buffer (offset 40 f16 = 80 bytes).
        let a = coopLoadT<coop_mat16x16<f16, A>>(&xp_hi[40u + ks], 40u);
        let b = coopLoadT<coop_mat16x16<f16, B>>(&c64_b[ks * C64_SBT], C64_SBT);
        c = coopMultiplyAdd(a, b, c);
    }
    c = c * 2.0;
    workgroupBarrier();
    coopStoreT(c, &c64_c[C64_SC], C64_SC);
    workgroupBarrier();
    for (var i = lid; i < 256u; i = i + 32u) {
        out_bits[i] = bitcast<u32>(c64_c[C64_SC + (i / 16u) * C64_SC + i % 16u]);
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel k64pw (`coop64pw_gemm1`, `coop64pw_gemm2`; the default where its checks pass,
// `MXMOE_COOP_KERNEL=k64` for k64): k64p's pre-converted activations (same pre-passes, same numerics, same per-row
// exponents, same weights and hand-out), but copied into workgroup memory each K step
// instead of loaded by the MMAs from storage: for a driver whose cooperative loads from
// storage are slow. The copy is k64's activation staging without its work: each invocation
// loads 32 contiguous bytes of hi (and of lo) of row lid % 64, k (lid / 64) * 16..+15 (two
// 16-byte loads through vec4<u32> views of the same buffers, bindings 20 and 21; the next
// step's in flight during this step's MMAs) and stores them, unconverted and with no atomics,
// into k64's column-major tiles (conflict-free 16-bit stores; the words are split with
// unpack2x16float, exact for every f16); the MMAs then load A as k64 does. Rows past the
// tile's row count and K past K are staged as zeros (no padding read).

@group(0) @binding(20) var<storage, read> xp_hi_v4: array<vec4<u32>>; // xp_hi, 8 f16 each
@group(0) @binding(21) var<storage, read> xp_lo_v4: array<vec4<u32>>; // xp_lo, 8 f16 each

// One invocation's activations of one K step: 16 f16 of hi (and lo), as words.
struct C64pwA {
    h0: vec4<u32>,
    h1: vec4<u32>,
    l0: vec4<u32>,
    l1: vec4<u32>,
}

// The activations of K step k0 for tile row xr (of cnt) at k (lid / 64) * 16: zeros past the
// rows or past K.
fn c64pw_fetch(k0: u32, kk_total: u32, start: u32, cnt: u32, xr: u32, kq: u32) -> C64pwA {
    var a = C64pwA(vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u));
    let k = k0 + kq * 16u;
    if (COOP_DIAG & 4u) != 0u || xr >= cnt || k >= kk_total {
        return a;
    }
    let v = ((start + xr) * kk_total + k) / 8u; // K and k are multiples of 16
    a.h0 = xp_hi_v4[v];
    a.h1 = xp_hi_v4[v + 1u];
    if ACT_FMT == FMT_NONE {
        a.l0 = xp_lo_v4[v];
        a.l1 = xp_lo_v4[v + 1u];
    }
    return a;
}

// Store 8 f16 (words w, element 2j in the low half: unpack2x16float's order) at k..k+7 of row
// `row` of a column-major tile (c64_ah when lo is false, else c64_al).
fn c64pw_store8(k: u32, row: u32, w: vec4<u32>, lo: bool) {
    let i = k * C64_SAT + row;
    // naga 30 has no size-changing bitcast (u32 -> vec2<f16>): through f32, exact for every
    // f16 (a driver that flushes f16 subnormals: see the header).
    let p0 = vec2<f16>(unpack2x16float(w.x));
    let p1 = vec2<f16>(unpack2x16float(w.y));
    let p2 = vec2<f16>(unpack2x16float(w.z));
    let p3 = vec2<f16>(unpack2x16float(w.w));
    if lo {
        c64_al[i] = p0.x;
        c64_al[i + C64_SAT] = p0.y;
        c64_al[i + 2u * C64_SAT] = p1.x;
        c64_al[i + 3u * C64_SAT] = p1.y;
        c64_al[i + 4u * C64_SAT] = p2.x;
        c64_al[i + 5u * C64_SAT] = p2.y;
        c64_al[i + 6u * C64_SAT] = p3.x;
        c64_al[i + 7u * C64_SAT] = p3.y;
    } else {
        c64_ah[i] = p0.x;
        c64_ah[i + C64_SAT] = p0.y;
        c64_ah[i + 2u * C64_SAT] = p1.x;
        c64_ah[i + 3u * C64_SAT] = p1.y;
        c64_ah[i + 4u * C64_SAT] = p2.x;
        c64_ah[i + 5u * C64_SAT] = p2.y;
        c64_ah[i + 6u * C64_SAT] = p3.x;
        c64_ah[i + 7u * C64_SAT] = p3.y;
    }
}

// The k-loop of coop64pw_gemm1 / coop64pw_gemm2 (arguments as c64p_k_loop).
fn c64pw_k_loop(lid: u32, kk_total: u32, start: u32, cnt: u32, wrow: u32, wn: u32,
                wv: bool) -> GemmAcc {
    let kblocks = kk_total / 32u;
    let xr = lid % 64u;   // activation row
    let kq = lid / 64u;   // its k quarter of the step
    let blk = lid / 128u; // the block of the step of weight tile column wn (= lid % 128)
    let sg = lid / 32u;
    let r0 = (sg % 2u) * 32u; // this subgroup's rows
    let n0 = (sg / 2u) * 32u; // and columns
    var c00 = coopLoadT<coop_mat16x16<f32, C>>(&c64_c[0], 16u); // zeros (set in the entry)
    var c01 = c00;
    var c10 = c00;
    var c11 = c00;
    var ew = 0;
    let stage = (COOP_DIAG & 4u) == 0u;
    var raw = c64p_fetch(0u, kk_total, wrow, wv, blk);
    var xa = c64pw_fetch(0u, kk_total, start, cnt, xr, kq);
    // Counted in steps (steps <= 2^26: the counter cannot wrap, a loop that provably ends:
    // these kernels are built without naga's loop bounding, COOP_TRUSTED_ENTRIES).
    let steps = kk_total / 64u + select(0u, 1u, kk_total % 64u != 0u);
    for (var step = 0u; step < steps; step = step + 1u) {
        let k0 = 64u * step;
        let slot = step & 1u;
        let gw = subgroupMax(select(raw.byte, 0u, raw.byte == 255u));
        if lid % 32u == 0u {
            atomicMax(&coop_wmax[slot], gw);
        }
        workgroupBarrier();
        if lid == 0u {
            atomicStore(&coop_wmax[slot ^ 1u], 0u);
        }
        let ew_new = max(ew, i32(atomicLoad(&coop_wmax[slot])));
        if ew_new != ew {
            let f = ldexp(1.0, ew - ew_new);
            c00 = c00 * f;
            c01 = c01 * f;
            c10 = c10 * f;
            c11 = c11 * f;
        }
        ew = ew_new;
        if stage {
            let k = kq * 16u;
            c64pw_store8(k, xr, xa.h0, false);
            c64pw_store8(k + 8u, xr, xa.h1, false);
            if ACT_FMT == FMT_NONE {
                c64pw_store8(k, xr, xa.l0, true);
                c64pw_store8(k + 8u, xr, xa.l1, true);
            }
            c64_stage_w(raw, wn, blk, wrow, kblocks, k0 / 32u + blk, ew);
        }
        workgroupBarrier();
        // The next step's loads, in flight during this step's MMAs.
        raw = c64p_fetch(k0 + 64u, kk_total, wrow, wv, blk);
        xa = c64pw_fetch(k0 + 64u, kk_total, start, cnt, xr, kq);
        for (var kq16 = 0u; (kq16 < 4u) & ((COOP_DIAG & 2u) == 0u); kq16 = kq16 + 1u) {
            let ks = 16u * kq16; // 0, 16, 32, 48: the fragments' extents end at k 63
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&c64_b[ks * C64_SBT + n0], C64_SBT);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&c64_b[ks * C64_SBT + n0 + 16u], C64_SBT);
            let a0 = coopLoad<coop_mat16x16<f16, A>>(&c64_ah[ks * C64_SAT + r0], C64_SAT);
            let a1 = coopLoad<coop_mat16x16<f16, A>>(&c64_ah[ks * C64_SAT + r0 + 16u], C64_SAT);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            if (ACT_FMT == FMT_NONE) & ((COOP_DIAG & 8u) == 0u) {
                let l0 = coopLoad<coop_mat16x16<f16, A>>(&c64_al[ks * C64_SAT + r0], C64_SAT);
                let l1 = coopLoad<coop_mat16x16<f16, A>>(&c64_al[ks * C64_SAT + r0 + 16u], C64_SAT);
                c00 = coopMultiplyAdd(l0, b0, c00);
                c01 = coopMultiplyAdd(l0, b1, c01);
                c10 = coopMultiplyAdd(l1, b0, c10);
                c11 = coopMultiplyAdd(l1, b1, c11);
            }
        }
    }
    // Hand-out as k64p (per-row exponents).
    let ty = lid / 16u;
    let tx = lid % 16u;
    let ec = -COOP_ASH + ew - 127 - coop_wsh();
    let e = vec4<i32>(
        c64p_row_exp(start, cnt, ty * 4u) + ec,
        c64p_row_exp(start, cnt, ty * 4u + 1u) + ec,
        c64p_row_exp(start, cnt, ty * 4u + 2u) + ec,
        c64p_row_exp(start, cnt, ty * 4u + 3u) + ec,
    );
    let mine = 2u * ((ty / 4u) % 2u) + (tx / 4u) % 2u;
    let so = (sg % 2u) * 16u * C64_SC + (sg / 2u) * 16u;
    var acc = GemmAcc(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
                      vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    workgroupBarrier();
    coopStoreT(c00, &c64_c[so], C64_SC);
    workgroupBarrier();
    if mine == 0u {
        acc = c64p_read(ty, tx, e);
    }
    workgroupBarrier();
    coopStoreT(c01, &c64_c[so], C64_SC);
    workgroupBarrier();
    if mine == 1u {
        acc = c64p_read(ty, tx, e);
    }
    workgroupBarrier();
    coopStoreT(c10, &c64_c[so], C64_SC);
    workgroupBarrier();
    if mine == 2u {
        acc = c64p_read(ty, tx, e);
    }
    workgroupBarrier();
    coopStoreT(c11, &c64_c[so], C64_SC);
    workgroupBarrier();
    if mine == 3u {
        acc = c64p_read(ty, tx, e);
    }
    return acc;
}

// gemm1, kernel k64pw (as coop64p_gemm1).
@compute @workgroup_size(256)
fn coop64pw_gemm1(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = c64_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let jb = wid.y * 64u;
    let cnt = tile.z - tile.y;
    let wn = lid % 128u;
    let wr = select(2u * (wn % 64u) + wn / 64u, wn, ACTIVATION == ACT_SILU);
    let lw = gemm1_load(2u * wr, tile.x, tile.y, cnt, jb);
    let acc = c64pw_k_loop(lid, params.hidden, tile.y, cnt, lw.wrow, lw.wcol, lw.wv);
    gemm1_finish(lid, tile.x, tile.y, cnt, jb, acc);
}

// gemm2, kernel k64pw (as coop64p_gemm2).
@compute @workgroup_size(256)
fn coop64pw_gemm2(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tile = c64_load_tile(lid, wid.x);
    if tile.w == 0u || tile.x < params.e0 || tile.x >= params.e1 {
        return;
    }
    let nb = wid.y * 128u;
    let cnt = tile.z - tile.y;
    let lw = gemm2_load(2u * (lid % 128u), tile.x, tile.y, cnt, nb);
    let acc = c64pw_k_loop(lid, params.inter, tile.y, cnt, lw.wrow, lw.wcol, lw.wv);
    gemm2_finish(lid, tile.x, tile.y, cnt, nb, acc);
}
