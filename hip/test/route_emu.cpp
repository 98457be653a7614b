// route_emu.cpp: runs the warp routing kernels of hip/route_warp.h (MXMOE_HIP_ROUTE=v6) on the
// CPU, one OS thread per GPU thread of a block, and compares their ids, weights (bits) and
// one-token lists with a port of the CPU router (src/moe/route.rs route_row: top_k_indices with
// ties to the lower index, the group scores, exact_sigmoid + add_ftz keys, the serial sums and
// exact_div) and of the GPU weight expressions of route_token (hip/route.h: fast_exp, the
// 64-partial softmax sum and its tree, route_weights_serial), on random logits and on logits
// drawn from a few values (ties, both zeros, negative values). The GPU primitives are host
// twins: shuffles through a per-warp array between two warp barriers, the block barrier, exp2f
// for the hardware exp2 (the same function on both sides of the comparison). The warp
// reductions take route_warp.h's portable path (a shuffle butterfly; NVIDIA's redux.sync gives
// the same max / min / or). What comes from hip/route.h (RouteParams, key_ord) and
// hip/moe_common.h (MoeParams) is copied here. Built and run by
// backend::hip::kernels::tests::route_warp_runs_on_the_cpu_emulation (clang++, C++20); by hand:
//   clang++-19 -std=c++20 -O1 -pthread -ffp-contract=off -I hip hip/test/route_emu.cpp -o /tmp/r
// Exit status 0 when every output matches.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

typedef uint32_t u32;
typedef int32_t i32;
typedef uint64_t u64;
typedef uint16_t u16;

#define MX_HOST_EMU 1
#define MX_DEVICE static inline
#define MX_SHARED static
#define MX_KERNEL(n) static

// ---- the GPU's thread ids, barriers and shuffles ---------------------------------------------
static thread_local u32 g_tid;
static u32 g_bx;
static std::barrier<>* g_block;
static std::barrier<>* g_warp[8];
static u32 g_x[8][32];
MX_DEVICE u32 tid_x() { return g_tid; }
MX_DEVICE u32 bid_x() { return g_bx; }
MX_DEVICE void sync_threads() { g_block->arrive_and_wait(); }
MX_DEVICE u32 f2u(float f) { u32 u; memcpy(&u, &f, 4); return u; }
MX_DEVICE float u2f(u32 u) { float f; memcpy(&f, &u, 4); return f; }
MX_DEVICE u32 umin(u32 a, u32 b) { return a < b ? a : b; }
MX_DEVICE u32 umax(u32 a, u32 b) { return a > b ? a : b; }
MX_DEVICE u32 clz32(u32 x) { return x == 0u ? 32u : (u32)__builtin_clz(x); }
static u32 xchg(u32 v, u32 src) {
  u32 w = g_tid / 32u, l = g_tid % 32u;
  g_x[w][l] = v;
  g_warp[w]->arrive_and_wait();
  u32 r = g_x[w][src & 31u];
  g_warp[w]->arrive_and_wait();
  return r;
}
MX_DEVICE float shfl_xor(float v, u32 m) { return u2f(xchg(f2u(v), (g_tid % 32u) ^ m)); }
MX_DEVICE float shfl_idx(float v, u32 src) { return u2f(xchg(f2u(v), src)); }
MX_DEVICE float fast_exp(float x) { return exp2f(x * 1.4426950408889634f); }

#include "exact_math.h"

// ---- hip/route.h's and moe_common.h's pieces the routing kernels use -------------------------
struct RouteParams {
  u32 m, n_experts, top_k, scoring, renormalize, n_group, topk_group, scaling, has_bias, p0, p1, p2;
};
struct MoeParams {
  u32 m, top_k, hidden, inter, n_experts, e_local, has_map, has_bias13, has_bias2, on_input;
  u32 weight_fmt, act_fmt, act_mode, activation, round_bf16, tile_m;
  u32 wrows;  // the MXFP4 codes' row order on the matrix-core path (hip/nv4.h Nv4Rows)
  u32 xc2;    // gemm2's bf16 activations in the c16 order (gemv_epilogue.h c16_pos)
};
MX_DEVICE u32 key_ord(float v) {
  u32 b = f2u(v);
  if (b == 0x80000000u) b = 0u;
  if ((b & 0x80000000u) != 0u) return ~b;
  return b | 0x80000000u;
}

#include "route_warp.h"

// One block of n threads (block index bx), each running f.
static void launch(u32 n, u32 bx, const std::function<void()>& f) {
  std::barrier<> block(n);
  g_block = &block;
  for (u32 w = 0; w < 8u; ++w) g_warp[w] = new std::barrier<>(32);
  g_bx = bx;
  std::vector<std::thread> th;
  for (u32 t = 0; t < n; ++t)
    th.emplace_back([&, t] {
      g_tid = t;
      f();
    });
  for (auto& x : th) x.join();
  for (u32 w = 0; w < 8u; ++w) delete g_warp[w];
}

// ---- the reference: src/moe/route.rs route_row, with route_token's weight expressions -------
static std::vector<int> top_k_indices(const std::vector<float>& keys, u32 k,
                                      const std::function<bool(u32)>& eligible) {
  std::vector<int> chosen;
  for (u32 r = 0; r < k; ++r) {
    int best = -1;
    for (u32 i = 0; i < keys.size(); ++i) {
      if (!eligible(i)) continue;
      bool taken = false;
      for (int c : chosen) taken = taken || c == (int)i;
      if (taken) continue;
      if (best < 0 || keys[i] > keys[best]) best = (int)i;
    }
    if (best < 0) break;
    chosen.push_back(best);
  }
  return chosen;
}

struct Router {
  u32 e, k, scoring, renorm, ng, tg;
  bool bias;
  float scaling;
};

static void reference(const Router& r, const float* row, const float* bias, i32* ids, float* w) {
  std::vector<float> lg(row, row + r.e);
  if (r.scoring != SCORING_SIGMOID) {
    std::vector<int> sel = top_k_indices(lg, r.k, [](u32) { return true; });
    float mx = lg[sel[0]];
    if (r.scoring == SCORING_TOPK_SOFTMAX) {
      float total = 0.0f;
      for (u32 j = 0; j < r.k; ++j) total += fast_exp(lg[sel[j]] - mx);
      for (u32 j = 0; j < r.k; ++j) {
        ids[j] = sel[j];
        w[j] = fast_exp(lg[sel[j]] - mx) / total * r.scaling;
      }
      return;
    }
    float part[64];
    for (u32 v = 0; v < 64u; ++v) {
      part[v] = 0.0f;
      for (u32 i = v; i < r.e; i += 64u) part[v] += fast_exp(lg[i] - mx);
    }
    for (u32 st = 32u; st > 0u; st /= 2u)
      for (u32 v = 0; v < st; ++v) part[v] = part[v] + part[v + st];
    float total = 0.0f;
    for (u32 j = 0; j < r.k; ++j) total += fast_exp(lg[sel[j]] - mx) / part[0];
    for (u32 j = 0; j < r.k; ++j) {
      float x = fast_exp(lg[sel[j]] - mx) / part[0];
      if (r.renorm) x = x / total;
      ids[j] = sel[j];
      w[j] = x * r.scaling;
    }
    return;
  }
  std::vector<u32> sc(r.e);
  std::vector<float> keys(r.e);
  for (u32 i = 0; i < r.e; ++i) {
    sc[i] = exact_sigmoid(f2u(lg[i]));
    keys[i] = r.bias ? add_ftz(sc[i], f2u(bias[i])) : lg[i];
  }
  std::vector<int> sel;
  if (r.ng > 0) {
    u32 per = r.e / r.ng;
    std::vector<float> gs(r.ng);
    for (u32 g = 0; g < r.ng; ++g) {
      std::vector<float> ks(keys.begin() + g * per, keys.begin() + (g + 1) * per);
      if (r.bias) {
        std::vector<int> t2 = top_k_indices(ks, 2, [](u32) { return true; });
        gs[g] = add_ftz(f2u(ks[t2[0]]), f2u(ks[t2[1]]));
      } else {
        float m = -INFINITY;
        for (float x : ks) m = x > m ? x : m;
        gs[g] = m;
      }
    }
    std::vector<int> groups = top_k_indices(gs, r.tg, [](u32) { return true; });
    sel = top_k_indices(keys, r.k, [&](u32 i) {
      for (int g : groups)
        if ((u32)g == i / per) return true;
      return false;
    });
  } else {
    sel = top_k_indices(keys, r.k, [](u32) { return true; });
  }
  float total = 0.0f;
  if (r.renorm)
    for (u32 j = 0; j < r.k; ++j) total = total + u2f(sc[sel[j]]);
  for (u32 j = 0; j < r.k; ++j) {
    u32 x = sc[sel[j]];
    if (r.renorm) x = exact_div(x, f2u(total));
    ids[j] = sel[j];
    w[j] = u2f(x) * r.scaling;
  }
}

// ---- the test ---------------------------------------------------------------------------------
static RouteParams params(const Router& r, u32 m) {
  u32 s;
  memcpy(&s, &r.scaling, 4);
  return RouteParams{m, r.e, r.k, r.scoring, r.renorm, r.ng, r.tg, s, r.bias ? 1u : 0u, 0, 0, 0};
}

// Logits: normal, or from a few values (ties; both zeros; exact sigmoid ties), per `mode`.
static float draw(std::mt19937& rng, u32 mode) {
  static const float few[] = {0.0f, -0.0f, 1.5f, -2.25f, 0.75f, 3.0f, -0.5f};
  if (mode == 0) return std::normal_distribution<float>(0.0f, 2.0f)(rng);
  if (mode == 1) return few[rng() % 7u];
  return few[rng() % 2u];  // zeros only: every key ties
}

static int g_fail = 0, g_cases = 0;
static void check(const char* what, const Router& r, u32 m, const std::vector<i32>& ids,
                  const std::vector<float>& w, const std::vector<i32>& rid,
                  const std::vector<float>& rw) {
  g_cases++;
  for (u32 i = 0; i < m * r.k; ++i) {
    if (ids[i] != rid[i] || f2u(w[i]) != f2u(rw[i])) {
      if (g_fail++ < 10)
        printf("MISMATCH %s e=%u k=%u scoring=%u renorm=%u ng=%u tg=%u bias=%d m=%u slot %u: id %d vs "
               "%d, weight %08x vs %08x\n",
               what, r.e, r.k, r.scoring, r.renorm, r.ng, r.tg, r.bias, m, i, ids[i], rid[i],
               f2u(w[i]), f2u(rw[i]));
      return;
    }
  }
}

// The one-token lists (moe_lists for one token): rows by local expert, one tile per pair.
static void check_lists(const char* what, const Router& r, const std::vector<i32>& ids,
                        const std::vector<i32>& map, const std::vector<u32>& por,
                        const std::vector<i32>& rop, const std::vector<u32>& tiles) {
  std::vector<std::pair<i32, u32>> v;
  for (u32 a = 0; a < r.k; ++a) {
    i32 l = map.empty() ? ids[a] : map[ids[a]];
    if (l >= 0) v.push_back({l, a});
  }
  std::sort(v.begin(), v.end());
  bool ok = tiles[0] == v.size();
  for (u32 row = 0; row < v.size() && ok; ++row) {
    u32 a = v[row].second;
    ok = por[row] == a && rop[a] == (i32)row && tiles[1 + 3 * row] == (u32)v[row].first &&
         tiles[2 + 3 * row] == row && tiles[3 + 3 * row] == row + 1;
  }
  for (u32 a = 0; a < r.k && ok; ++a) {
    i32 l = map.empty() ? ids[a] : map[ids[a]];
    if (l < 0) ok = rop[a] == -1;
  }
  if (!ok && g_fail++ < 10) printf("MISMATCH %s lists e=%u k=%u\n", what, r.e, r.k);
}

template <u32 NQ>
static void run_simple(const Router& r, std::mt19937& rng, u32 mode) {
  for (u32 m : {1u, 5u}) {
    std::vector<float> lg(m * r.e);
    for (auto& x : lg) x = draw(rng, mode);
    std::vector<i32> rid(m * r.k), ids(m * r.k, 7777);
    std::vector<float> rw(m * r.k), w(m * r.k, 0.0f);
    for (u32 t = 0; t < m; ++t) reference(r, &lg[t * r.e], nullptr, &rid[t * r.k], &rw[t * r.k]);
    RouteParams rp = params(r, m);
    if (m == 1) {
      MoeParams p{};
      p.m = 1;
      p.top_k = r.k;
      std::vector<i32> map;
      if (rng() % 2u) {
        map.resize(r.e);
        for (auto& x : map) x = (rng() % 3u) == 0u ? -1 : (i32)(rng() % r.e);
        // a local expert map is injective on its experts
        for (u32 i = 0; i < r.e; ++i)
          if (map[i] >= 0) map[i] = (i32)i;
        p.has_map = 1;
      }
      std::vector<u32> por(r.k, 9999), tiles(1 + 3 * r.k, 9999);
      std::vector<i32> rop(r.k, 9999);
      launch(32, 0, [&] {
        i32 sel = route_warp_simple<NQ>(rp, 0u, tid_x(), lg.data(), ids.data(), w.data());
        lists_one_token_warp(p, tid_x(), r.k, sel, map.empty() ? nullptr : map.data(), por.data(),
                             rop.data(), tiles.data());
      });
      check("w2", r, m, ids, w, rid, rw);
      check_lists("w2", r, ids, map, por, rop, tiles);
    } else {
      for (u32 b = 0; b < (m + 3u) / 4u; ++b)
        launch(128, b, [&] {
          u32 t = bid_x() * 4u + (tid_x() >> 5);
          if (t < rp.m) route_warp_simple<NQ>(rp, t, tid_x() & 31u, lg.data(), ids.data(), w.data());
        });
      check("mx_route_w", r, m, ids, w, rid, rw);
    }
  }
}

template <u32 NQ>
static void run_sigmoid(const Router& r, std::mt19937& rng, u32 mode) {
  for (u32 m : {1u, 3u}) {
    std::vector<float> lg(m * r.e), bias(r.e);
    for (auto& x : lg) x = draw(rng, mode);
    static const float fb[] = {0.0f, 0.125f, -0.125f, 0.25f};
    for (auto& x : bias) x = mode == 0 ? std::normal_distribution<float>(0.0f, 0.1f)(rng) : fb[rng() % 4u];
    std::vector<i32> rid(m * r.k), ids(m * r.k, 7777);
    std::vector<float> rw(m * r.k), w(m * r.k, 0.0f);
    for (u32 t = 0; t < m; ++t) reference(r, &lg[t * r.e], bias.data(), &rid[t * r.k], &rw[t * r.k]);
    RouteParams rp = params(r, m);
    MoeParams p{};
    p.m = 1;
    p.top_k = r.k;
    std::vector<u32> por(r.k, 9999), tiles(1 + 3 * r.k, 9999);
    std::vector<i32> rop(r.k, 9999);
    const u32* bp = (const u32*)bias.data();
    for (u32 t = 0; t < m; ++t)
      launch(256, t, [&] {
        MX_SHARED RouteWShared s;
        if (m == 1)
          route_block_sigmoid<NQ, true>(rp, p, 0u, lg.data(), bp, ids.data(), w.data(), nullptr,
                                        por.data(), rop.data(), tiles.data(), s);
        else
          route_block_sigmoid<NQ, false>(rp, p, bid_x(), lg.data(), bp, ids.data(), w.data(),
                                         nullptr, nullptr, nullptr, nullptr, s);
      });
    check(m == 1 ? "w2g" : "mx_route_wg", r, m, ids, w, rid, rw);
    if (m == 1) check_lists("w2g", r, ids, {}, por, rop, tiles);
  }
}

int main() {
  std::mt19937 rng(20261201u);
  for (u32 mode = 0; mode < 3u; ++mode) {
    for (u32 e : {8u, 60u, 128u, 256u, 1024u})
      for (u32 k : {1u, 4u, 8u, 32u}) {
        if (k > e) continue;
        for (u32 scoring : {SCORING_TOPK_SOFTMAX, SCORING_SOFTMAX})
          for (u32 renorm : {0u, 1u}) {
            Router r{e, k, scoring, renorm, 0, 0, false, renorm ? 1.0f : 2.5f};
            if (e <= 128) run_simple<4>(r, rng, mode);
            if (e <= 256) run_simple<8>(r, rng, mode);
            if (e > 256 || (k == 4 && e == 60)) run_simple<32>(r, rng, mode);
          }
      }
    // Sigmoid routers: DeepSeek-V3/R1's shape, groups of 64 and 32 experts, none, no bias.
    struct G {
      u32 e, k, ng, tg;
      bool bias;
    };
    for (G g : {G{256, 8, 8, 4, true}, G{256, 8, 8, 4, false}, G{256, 8, 0, 0, true},
                G{256, 6, 4, 2, true}, G{64, 4, 2, 1, true}, G{128, 32, 4, 4, true},
                G{1024, 8, 32, 3, true}, G{1024, 16, 0, 0, false}, G{384, 8, 1, 1, true},
                G{96, 8, 3, 2, false}})
      for (u32 renorm : {0u, 1u}) {
        Router r{g.e, g.k, SCORING_SIGMOID, renorm, g.ng, g.tg, g.bias, 2.5f};
        if (g.e <= 256) run_sigmoid<8>(r, rng, mode);
        run_sigmoid<32>(r, rng, mode);
      }
  }
  printf("%d cases, %d mismatches\n", g_cases, g_fail);
  if (g_fail == 0) printf("route_emu: ok (0 mismatches)\n");
  return g_fail == 0 ? 0 : 1;
}
