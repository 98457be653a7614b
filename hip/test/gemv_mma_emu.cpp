// gemv_mma_emu.cpp: runs the matrix-core GEMV kernels of hip/gemv_mma.h on the CPU, one OS thread
// per GPU thread of a block (256), and compares their outputs with a plain matrix product of the
// exactly decoded weights. The GPU primitives are host twins: mma.sync m16n8k16 from the PTX ISA's
// fragment layout (the lanes of a warp meet at a barrier, each computes its C elements from all
// lanes' A and B registers), bf16x2 fma / cvt with round-to-nearest-even, vote.any, the block
// barrier. What comes from hip/moe_common.h (MoeParams), moe_tile.h (load_tile, weight_row) and
// gemv.h (gemv2_combine, GEMV_ARGS) is copied here or stubbed; the activation is a stand-in
// (linear, so that the gate / up row mapping shows) and the intermediate QDQ is off. Built and
// run by the test backend::hip::kernels::tests::gemv_mma_runs_on_the_cpu_emulation (clang++,
// C++20); every case runs the `mma` and the `mmaw` kernels; by hand:
//   clang++-19 -std=c++20 -O1 -pthread -I hip hip/test/gemv_mma_emu.cpp -o /tmp/emu && /tmp/emu
// Exit status 0 when every output matches.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

typedef uint32_t u32;
typedef int32_t i32;
typedef uint64_t u64;
typedef uint16_t u16;
typedef uint8_t u8;
typedef u32 uint4v __attribute__((ext_vector_type(4)));
typedef float float4v __attribute__((ext_vector_type(4)));

#define MX_NV 1
#define GM_HOST_EMU 1
#define MX_DEVICE static inline
#define MX_SHARED static
#define MX_KERNEL_OCC(n, b) static
#define FMT_NONE 255u
#define ACT_SILU 0u
#define ACT_SWIGLUOAI 1u

// ---- the GPU's thread ids, barriers and registers ------------------------------------------
static thread_local u32 g_tid;
static u32 g_bx, g_by;
static std::barrier<>* g_block;
static std::barrier<>* g_warp[8];
MX_DEVICE u32 tid_x() { return g_tid; }
MX_DEVICE u32 bid_x() { return g_bx; }
MX_DEVICE u32 bid_y() { return g_by; }
MX_DEVICE void sync_threads() { g_block->arrive_and_wait(); }
MX_DEVICE void warp_sync() { g_warp[g_tid / 32u]->arrive_and_wait(); }
MX_DEVICE u32 f2u(float f) { u32 u; memcpy(&u, &f, 4); return u; }
MX_DEVICE float u2f(u32 u) { float f; memcpy(&f, &u, 4); return f; }
MX_DEVICE u32 umin(u32 a, u32 b) { return a < b ? a : b; }
MX_DEVICE void atomic_max_u32(u32* p, u32 v) { __atomic_fetch_max(p, v, __ATOMIC_RELAXED); }
MX_DEVICE uint4v load_stream16(const void* p) { return *(const uint4v*)p; }
MX_DEVICE u32 load_stream_u8(const void* p) { return *(const u8*)p; }

#include "bf16_twins.h"

struct FragA { u32 r[4]; };
struct FragB { u32 r[2]; };
struct FragC { float v[4]; };
static FragA g_a[8][32];
static FragB g_b[8][32];
static bool g_vote[8][32];
MX_DEVICE bool warp_any(bool v) {
  u32 w = g_tid / 32u, l = g_tid % 32u;
  g_vote[w][l] = v;
  warp_sync();
  bool any = false;
  for (u32 i = 0; i < 32u; ++i) any = any || g_vote[w][i];
  warp_sync();
  return any;
}
// PTX ISA mma.m16n8k16 (.bf16): A register j of lane (g, t) holds rows g + 8 (j & 1), k 2t + 8
// (j >> 1) + half; B register j: k 2t + 8 j + half, column g; C element i: row g + 8 (i >> 1),
// column 2t + (i & 1).
MX_DEVICE void mma(FragC& c, const FragA& a, const FragB& b) {
  u32 w = g_tid / 32u, l = g_tid % 32u;
  g_a[w][l] = a;
  g_b[w][l] = b;
  warp_sync();
  u32 g = l / 4u, t = l % 4u;
  for (u32 i = 0; i < 4u; ++i) {
    u32 row = g + 8u * (i >> 1), col = 2u * t + (i & 1u);
    double s = 0.0;
    for (u32 k = 0; k < 16u; ++k) {
      u32 kt = (k % 8u) / 2u, half = k & 1u, hk = k >= 8u ? 1u : 0u;
      u32 ar = g_a[w][(row % 8u) * 4u + kt].r[(row >= 8u ? 1u : 0u) + 2u * hk];
      u32 br = g_b[w][col * 4u + kt].r[hk];
      s += (double)bf16f(ar >> (16u * half)) * (double)bf16f(br >> (16u * half));
    }
    c.v[i] = (float)((double)c.v[i] + s);
  }
  warp_sync();
}

// ---- the pieces of hip/moe_common.h, moe_tile.h and gemv.h the GEMV uses ------------------
struct MoeParams {
  u32 m, top_k, hidden, inter, n_experts, e_local, has_map, has_bias13, has_bias2, on_input;
  u32 weight_fmt, act_fmt, act_mode, activation, round_bf16, tile_m;
  u32 wrows;  // the MXFP4 codes' row order on the matrix-core path (hip/nv4.h Nv4Rows)
  u32 xc2;    // gemm2's bf16 activations in the c16 order (gemv_epilogue.h c16_pos)
};
MX_DEVICE float bf16_point(const MoeParams&, float x) { return x; }
MX_DEVICE float activate(const MoeParams& p, float g, float u) {
  return p.activation == ACT_SILU ? 2.0f * g + 3.0f * u : 5.0f * g - 7.0f * u;
}
MX_DEVICE u32 mx_scale_byte(u32, u32, u32) { abort(); }
MX_DEVICE u32 intermediate_qdq(const MoeParams&, u32, u32) { abort(); }
template <u32 OUTR>
MX_DEVICE void gemv2_combine(const MoeParams&, const u32*, const i32*, const u32*, u32*, u32*, u32) {
  abort();
}
MX_DEVICE bool load_tile(const u32* tiles, u32 slot, u32* e, u32* start, u32* cnt) {
  u32 n = tiles[0], te = tiles[1u + 3u * slot], ts = tiles[2u + 3u * slot], tn = tiles[3u + 3u * slot];
  if (slot >= n) return false;
  *e = te;
  *start = ts;
  *cnt = tn - ts;
  return true;
}
MX_DEVICE u32 weight_row(const MoeParams& p, bool is1, u32 wr, u32 jb, u32 ic = 32u) {
  if (!is1) return jb + wr;
  if (p.activation == ACT_SILU) return wr < ic ? jb + wr : p.inter + jb + wr - ic;
  return 2u * jb + wr;
}
MX_DEVICE bool weight_row_ok(const MoeParams& p, u32 wr, u32 jb, u32 ic = 32u) {
  return jb + (p.activation == ACT_SILU ? wr % ic : wr / 2u) < p.inter;
}
#define GEMV_ARGS                                                                              \
  MoeParams p, const u32 *pair_of_row, const u32 *tiles, const float *x, const u32 *wcodes,   \
      const u8 *wscales, u32 *out, const float *bias, const float *topw, const i32 *row_of_pair, \
      u32 *counters, u32 *final_out
#define GEMV_PASS pair_of_row, tiles, x, wcodes, wscales, out, bias, topw, row_of_pair, counters, final_out

#include "gemv_epilogue.h"
#include "gemv_mma.h"

// ---- the test ---------------------------------------------------------------------------------
static const float E2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

struct Case {
  const char* name;
  bool is1, split, odd;  // odd: a second shape (K steps that end mid-warp)
  u32 activation, k, nrows_or_inter;  // gemv1: K = hidden, inter; gemv2: K = inter, hidden
  bool big_scales;
  bool on_input = false;  // the router weight on gemv1's output (Llama 4), not gemv2's
  bool bias = true;
  bool one = false;       // one pair per tile (a 1-token forward's tiles)
};

// mx_to_bf16_p8's place of element i, restated (hip/gemv_epilogue.h p8_pos: each group of 8 stored 0, 4, 1, 5,
// 2, 6, 3, 7).
static size_t p8(size_t i) {
  size_t q = i & 7u;
  return (i & ~(size_t)7) | (q < 4u ? 2u * q : 2u * (q - 4u) + 1u);
}

// mode 0: `mma`; 1: `mmaw` (two 16-row tiles per warp, the K steps over 4 warps per row group);
// 2: `mmab` (mmaw on bf16 activations in mx_to_bf16_p8's order, hi then lo; gemv1 writes its
// output that way); 3: `mmao` (gemv1 only: f32 activations, output as mmab's); 4: `mmab32`
// (gemv2 only: mmab with 32 output rows per block); 5: `mmab4` (hi-only gemv1 only: mmab's kernel
// built for four blocks per multiprocessor).
static const char* MODE_NAMES[6] = {"", ", mmaw", ", mmab", ", mmao", ", mmab32", ", mmab4"};
static int run_case(const Case& c, std::mt19937& rng, int mode) {
  if (mode == 3 && !c.is1) return 0;
  if (mode == 4 && c.is1) return 0;
  if (mode == 5 && (!c.is1 || c.split)) return 0;
  bool wide = mode >= 1, xbi = mode == 2 || mode == 4 || mode == 5, xb = mode == 2 || mode == 3 || mode == 5;
  u32 rows2 = mode == 4 ? 32u : GM_ROWS;
  const u32 E = 3, top_k = 2, m = 9;  // 18 pairs
  MoeParams p{};
  p.m = m;
  p.top_k = top_k;
  p.hidden = c.is1 ? c.k : c.nrows_or_inter;
  p.inter = c.is1 ? c.nrows_or_inter : c.k;
  p.n_experts = E;
  p.e_local = E;
  p.has_bias13 = c.bias;
  p.has_bias2 = c.bias;
  p.on_input = c.on_input;
  p.act_fmt = FMT_NONE;
  p.activation = c.activation;
  p.tile_m = GM_COLS;
  u32 K = c.k, kb = K / 32u, nrows = c.is1 ? 2u * p.inter : p.hidden;
  // Expert pair counts 1, 8 + 5 (two tiles), 4: rows in expert order.
  u32 counts[E] = {1, 13, 4};
  if (c.one) counts[1] = counts[2] = 1;
  std::vector<u32> pair_of_row;
  std::vector<u32> tiles = {0};
  u32 row = 0, ntiles = 0;
  for (u32 e = 0; e < E; ++e)
    for (u32 s = 0; s < counts[e]; s += GM_COLS) {
      u32 n = std::min(counts[e] - s, GM_COLS);
      tiles.insert(tiles.end(), {e, row + s, row + s + n});
      ++ntiles;
      if (s + n >= counts[e]) row += counts[e];
    }
  tiles[0] = ntiles;
  tiles.insert(tiles.end(), {0, 0, 0});  // an empty slot
  u32 rows = row;
  for (u32 r = 0; r < rows; ++r) pair_of_row.push_back((r * 7u) % (m * top_k));
  std::uniform_int_distribution<u32> code(0, 0xFFFFFFFFu);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  std::vector<u32> wcodes((size_t)E * nrows * kb * 4u);
  std::vector<u8> wscales((size_t)E * nrows * kb);
  for (auto& w : wcodes) w = code(rng);
  for (auto& s : wscales) {
    u32 r = code(rng) % 16u;
    s = (u8)(c.big_scales && r == 0u ? 129u + code(rng) % 3u : r == 1u ? 0u : 120u + r % 8u);
  }
  // The kernels read the codes in the nv4 layout (hip/nv4.h); the reference reads them as stored.
  std::vector<u32> wnv(wcodes.size());
  for (size_t i = 0; i < wcodes.size(); ++i) wnv[i] = nv4_word(wcodes[i]);
  u32 xrows = c.is1 ? m : rows;
  std::vector<float> x((size_t)xrows * K);
  for (auto& v : x) v = c.split ? uni(rng) : bf16f(bf16_rne(uni(rng)));
  // mmab's input: hi for the kernel's rows (tokens or all m x top_k pairs), then lo.
  u32 na = m * top_k, xbrows = c.is1 ? m : na;
  std::vector<u16> xbuf((size_t)2 * xbrows * K, 0x7FC0u);
  for (size_t i = 0; i < (size_t)xrows * K; ++i) {
    u32 hb = bf16_rne(x[i]);
    xbuf[p8(i)] = (u16)hb;
    xbuf[(size_t)xbrows * K + p8(i)] = (u16)bf16_rne(x[i] - bf16f(hb));
  }
  std::vector<float> bias((size_t)E * nrows), topw(m * top_k);
  for (auto& v : bias) v = uni(rng);
  for (auto& v : topw) v = uni(rng);
  u32 ocols = c.is1 ? p.inter : p.hidden;
  std::vector<u32> out((size_t)std::max(rows, na) * ocols, 0xFFFFFFFFu);
  // Launch: grid (slots, column blocks), 256 threads per block.
  u32 gy = c.is1 ? p.inter / 32u : (p.hidden + rows2 - 1u) / rows2;
  for (u32 by = 0; by < gy; ++by)
    for (u32 bx = 0; bx < ntiles + 1u; ++bx) {
      g_bx = bx;
      g_by = by;
      std::barrier<> block(GM_THREADS);
      for (u32 w = 0; w < GM_WARPS; ++w) g_warp[w] = new std::barrier<>(32);
      g_block = &block;
      std::vector<std::thread> th;
      for (u32 t = 0; t < GM_THREADS; ++t)
        th.emplace_back([&, t] {
          g_tid = t;
          auto f = c.is1 ? (c.split ? moe_gemv1_mma_split_cb4 : moe_gemv1_mma_cb4)
                         : (c.split ? moe_gemv2_mma_split_cb4 : moe_gemv2_mma_cb4);
          if (wide)
            f = c.is1 ? (c.split ? moe_gemv1_mmaw_split_cb4 : moe_gemv1_mmaw_cb4)
                      : (c.split ? moe_gemv2_mmaw_split_cb4 : moe_gemv2_mmaw_cb4);
          if (xb)
            f = c.is1 ? (c.split ? moe_gemv1_mmab_split_cb4 : moe_gemv1_mmab_cb4)
                      : (c.split ? moe_gemv2_mmab_split_cb4 : moe_gemv2_mmab_cb4);
          if (mode == 3) f = c.split ? moe_gemv1_mmao_split_cb4 : moe_gemv1_mmao_cb4;
          if (mode == 4) f = c.split ? moe_gemv2_mmab32_split_cb4 : moe_gemv2_mmab32_cb4;
          if (mode == 5) f = moe_gemv1_mmab4_cb4;
          const float* xin = xbi ? (const float*)xbuf.data() : x.data();
          f(p, pair_of_row.data(), tiles.data(), xin, wnv.data(), wscales.data(), out.data(),
            bias.data(), topw.data(), nullptr, nullptr, nullptr);
        });
      for (auto& t : th) t.join();
      for (u32 w = 0; w < GM_WARPS; ++w) delete g_warp[w];
    }
  // Reference: the weight values from the E2M1 table x 2^(s - 127), f64 sums.
  auto wval = [&](u32 e, u32 r, u32 k) {
    u64 blk = ((u64)e * nrows + r) * kb + k / 32u;
    u32 word = wcodes[blk * 4u + (k % 32u) / 8u], cd = (word >> (4u * (k % 8u))) & 15u;
    double v = E2M1[cd & 7u] * std::ldexp(1.0, (int)wscales[blk] - 127);
    return (cd & 8u) ? -v : v;
  };
  int bad = 0;
  for (u32 s = 0; s < ntiles; ++s) {
    u32 e = tiles[1 + 3 * s], st = tiles[2 + 3 * s], en = tiles[3 + 3 * s];
    for (u32 r = st; r < en; ++r) {
      const float* xr = x.data() + (size_t)(c.is1 ? pair_of_row[r] / top_k : r) * K;
      auto dot = [&](u32 wrow, double* mag) {
        double acc = 0.0, a = 0.0;
        for (u32 k = 0; k < K; ++k) {
          double t = wval(e, wrow, k) * xr[k];
          acc += t;
          a += std::fabs(t);
        }
        *mag = a;
        return acc;
      };
      for (u32 j = 0; j < ocols; ++j) {
        double want, mag;
        if (c.is1) {
          bool silu = c.activation == ACT_SILU;
          u32 gr = silu ? j : 2u * j, ur = silu ? p.inter + j : 2u * j + 1u;
          double mg, mu;
          double g = dot(gr, &mg) + (c.bias ? bias[(size_t)e * nrows + gr] : 0.0);
          double u = dot(ur, &mu) + (c.bias ? bias[(size_t)e * nrows + ur] : 0.0);
          if (c.on_input) {
            g *= topw[pair_of_row[r]];
            u *= topw[pair_of_row[r]];
          }
          want = activate(p, (float)g, (float)u);
          mag = 8.0 * (mg + mu + std::fabs(g) + std::fabs(u)) * (c.on_input ? 1.0 + std::fabs(topw[pair_of_row[r]]) : 1.0);
        } else {
          double rw = c.on_input ? 1.0 : topw[pair_of_row[r]];
          want = (dot(j, &mag) + (c.bias ? bias[(size_t)e * nrows + j] : 0.0)) * rw;
          mag = (mag + std::fabs(want)) * std::fabs(rw) + std::fabs(want);
        }
        double got = u2f(out[(size_t)r * ocols + j]);
        double tol = (c.split ? 3e-5 : 1e-5) * mag + 1e-30;
        if (xb && c.is1) {
          // gemv1's mmab output: bf16 hi + lo at the element's p8 place (lo: na x inter further).
          const u16* o = (const u16*)out.data();
          size_t pos = p8((size_t)r * ocols + j);
          got = (double)bf16f(o[pos]) + (double)bf16f(o[(size_t)na * ocols + pos]);
          tol += std::ldexp(std::fabs(want), -16);  // hi + lo keeps 16 significant bits
        }
        if (!(std::fabs(got - want) <= tol)) {
          if (++bad <= 5)
            printf("%s: row %u col %u: got %.9g want %.9g (tol %.3g)\n", c.name, r, j, got, want, tol);
        }
      }
    }
  }
  // Rows of no tile stay untouched (the empty slot wrote nothing).
  printf("%s%s: %s (%d mismatches)\n", c.name, MODE_NAMES[mode], bad ? "FAIL" : "ok", bad);
  return bad;
}

int main() {
  std::mt19937 rng(1234);
  const Case cases[] = {
      {"gemv2 hi", false, false, false, ACT_SILU, 32u * 70u, 96u, false},
      {"gemv2 split", false, true, false, ACT_SILU, 32u * 70u, 96u, false},
      {"gemv2 big scales", false, false, false, ACT_SILU, 32u * 9u, 160u, true},
      {"gemv1 silu split", true, true, false, ACT_SILU, 32u * 37u, 64u, false},
      {"gemv1 oai hi big scales", true, false, false, ACT_SWIGLUOAI, 32u * 5u, 96u, true},
      {"gemv2 split, 41 blocks", false, true, true, ACT_SILU, 32u * 70u, 96u, false},
      {"gemv2 hi big scales, 41 blocks", false, false, true, ACT_SILU, 32u * 41u, 160u, true},
      {"gemv1 silu split, 37 blocks", true, true, true, ACT_SILU, 32u * 37u, 64u, false},
      {"gemv1 oai hi, 3 blocks", true, false, true, ACT_SWIGLUOAI, 32u * 3u, 96u, false},
      {"gemv1 on-input no-bias one-pair", true, true, false, ACT_SILU, 32u * 45u, 64u, false, true, false, true},
      {"gemv2 on-input no-bias one-pair", false, true, true, ACT_SILU, 32u * 45u, 96u, false, true, false, true},
  };
  int bad = 0;
  for (const Case& c : cases) {
    for (int mode = 0; mode < 6; ++mode) bad += run_case(c, rng, mode);
  }
  return bad ? 1 : 0;
}
