// route.wgsl: router logits [M, E] (+ an optional e_score_correction_bias [E]) -> top-k ids and
// weights, one 256-wide workgroup per token. The CPU twin is src/moe/route.rs.
//
// Selection keys are exactly the CPU's, so the ids are too: the logits themselves, or with a
// correction bias (DeepSeek-V3/R1) `score + bias`, the score being exact_sigmoid, or for softmax
// routers e^(x - max) by exact_exp_neg over its sequential sum by exact_div, and the add add_ftz
// (exact_math.wgsl: integer arithmetic, the same bits as the CPU). Groups (n_group / topk_group):
// a group's score is its best key, or with a correction bias the sum of its two best keys (one
// f32 add, add_ftz).
// Top-k by ranks, not by k rounds of arg-max: every invocation counts, for each of its experts,
// the eligible experts that beat it (a larger key, or an equal key and a lower index: the CPU's
// order, ties to the lower index), and the expert of rank r < k is selection r. One pass over
// the keys in workgroup memory and one barrier, where k arg-max rounds cost k reduction trees
// of log2(workgroup) barriers each (16 us for one gpt-oss token on the H200,
// docs/h200-2026-12-01-wgpudecode); groups are chosen the same way.
// Weights: exact scores (sigmoid, or softmax with a bias) renormalized by exact_div are bit-exact
// with the CPU; softmax weights without a bias use the GPU's exp (tolerance, not bit-exact).
// The scoring ids (SCORING_*) come from the generated preamble (Rust `Scoring`).

struct RouteParams {
    m: u32,
    n_experts: u32,
    top_k: u32,
    scoring: u32, // SCORING_*
    renormalize: u32,
    n_group: u32, // 0 = no grouping
    topk_group: u32,
    scaling: f32,
    has_bias: u32, // 1: keys are exact score + r_bias (not with SCORING_TOPK_SOFTMAX)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

const R_WG: u32 = 256u;

@group(0) @binding(0) var<uniform> rp: RouteParams;
@group(0) @binding(1) var<storage, read> r_logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> r_ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> r_weights: array<f32>;
@group(0) @binding(4) var<storage, read> r_bias: array<u32>; // f32 bits; unused without a bias

var<workgroup> r_key: array<f32, 1024>;       // the token's selection keys
// key_ord of each eligible expert's key, 0 for experts of groups not chosen and for the padding
// up to a multiple of 4 (every finite key's key_ord is >= 0x00800000, so 0 never beats one).
var<workgroup> r_ord: array<vec4<u32>, 256>;
var<workgroup> r_gord: array<u32, 1024>;      // group scores' key_ord, then 1 = group chosen
var<workgroup> r_sel: array<u32, 32>;         // expert of rank r
var<workgroup> r_sel_score: array<u32, 32>;   // exact scores of the selected experts, f32 bits
var<workgroup> r_sum: array<f32, 256>;
var<workgroup> r_max: f32;   // exact softmax: the token's largest logit
var<workgroup> r_total: u32; // exact softmax: the sum of e^(x - max), f32 bits

// Keys are compared on their bits: an unsigned integer whose order is the IEEE order of finite
// f32 values with -0 == +0. A float comparison would do on a GPU that keeps subnormals, but
// adapters that flush them (the H200's driver does) would tie a subnormal logit with 0 and pick
// other ids than the CPU, which compares exactly.
fn key_ord(v: f32) -> u32 {
    var b = bitcast<u32>(v);
    if b == 0x80000000u {
        b = 0u;
    }
    if (b & 0x80000000u) != 0u {
        return ~b;
    }
    return b | 0x80000000u;
}

fn key_gt(a: f32, b: f32) -> bool {
    return key_ord(a) > key_ord(b);
}

// The score of group g (experts g*per .. g*per+per-1): its best key, or with a correction bias
// the sum of its two best keys (ties between equal keys do not change the sum).
fn r_group_score(g: u32, per: u32) -> f32 {
    let b = g * per;
    if rp.has_bias == 0u {
        var best = r_key[b];
        for (var i = 1u; i < per; i = i + 1u) {
            if key_gt(r_key[b + i], best) {
                best = r_key[b + i];
            }
        }
        return best;
    }
    if per == 1u {
        return r_key[b];
    }
    var best = r_key[b];
    var second = r_key[b + 1u];
    if key_gt(second, best) {
        best = r_key[b + 1u];
        second = r_key[b];
    }
    for (var i = 2u; i < per; i = i + 1u) {
        let v = r_key[b + i];
        if key_gt(v, best) {
            second = best;
            best = v;
        } else if key_gt(v, second) {
            second = v;
        }
    }
    return add_ftz(bitcast<u32>(best), bitcast<u32>(second));
}

// e^(x - max) of expert i of the token at `base` (the difference flushed), as f32 bits.
fn r_exp(base: u32, i: u32) -> u32 {
    return exact_exp_neg(ftz_bits(bitcast<u32>(r_logits[base + i] - r_max)));
}

// The exact score of expert i of the token at `base`, as f32 bits: its sigmoid, or (softmax with
// a bias, after r_max and r_total are set) its softmax probability.
fn r_score(base: u32, i: u32) -> u32 {
    if rp.scoring == SCORING_SIGMOID {
        return exact_sigmoid(bitcast<u32>(r_logits[base + i]));
    }
    return exact_div(r_exp(base, i), r_total);
}

// The rank of key_ord value `mine` of expert i among r_ord[0 .. 4 * e4): entries that beat it
// (larger, or equal with a lower index).
fn r_rank(mine: u32, i: u32, e4: u32) -> u32 {
    let m4 = vec4<u32>(mine);
    let i4 = vec4<u32>(i);
    var cnt = vec4<u32>(0u);
    for (var q = 0u; q < e4; q = q + 1u) {
        let o = r_ord[q];
        let j = vec4<u32>(4u * q) + vec4<u32>(0u, 1u, 2u, 3u);
        cnt = cnt + select(vec4<u32>(0u), vec4<u32>(1u), (o > m4) | ((o == m4) & (j < i4)));
    }
    return cnt.x + cnt.y + cnt.z + cnt.w;
}

@compute @workgroup_size(256)
fn route(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = wid.y * nwg.x + wid.x;
    if t >= rp.m {
        return; // uniform: the whole workgroup is one token
    }
    let e = rp.n_experts;
    let k = rp.top_k;
    let base = t * e;
    let e4 = (e + 3u) / 4u;
    let exact_softmax = rp.has_bias != 0u && rp.scoring == SCORING_SOFTMAX;
    if exact_softmax {
        // The max, then e^(x - max) in r_key, then their sum in expert order (the CPU's).
        if lid == 0u {
            var mx = r_logits[base];
            for (var i = 1u; i < e; i = i + 1u) {
                mx = max(mx, r_logits[base + i]);
            }
            r_max = mx;
        }
        workgroupBarrier();
        for (var i = lid; i < e; i = i + R_WG) {
            r_key[i] = bitcast<f32>(r_exp(base, i));
        }
        workgroupBarrier();
        if lid == 0u {
            var total = 0.0;
            for (var i = 0u; i < e; i = i + 1u) {
                total = add_ftz(bitcast<u32>(total), bitcast<u32>(r_key[i]));
            }
            r_total = bitcast<u32>(total);
        }
        workgroupBarrier();
    }
    for (var i = lid; i < e; i = i + R_WG) {
        if rp.has_bias != 0u {
            r_key[i] = add_ftz(r_score(base, i), r_bias[i]);
        } else {
            r_key[i] = r_logits[base + i];
        }
    }
    for (var i = e + lid; i < 4u * e4; i = i + R_WG) {
        r_ord[i / 4u][i % 4u] = 0u;
    }
    if lid < 32u {
        r_sel[lid] = 0u;
    }
    let grouped = rp.n_group > 0u;
    var per = e;
    if grouped {
        // Groups by rank as experts below: r_gord holds the scores' key_ord, then whether the
        // group is among the best topk_group (bit q of `chosen`: this invocation's q-th group).
        per = e / rp.n_group;
        workgroupBarrier();
        for (var g = lid; g < rp.n_group; g = g + R_WG) {
            r_gord[g] = key_ord(r_group_score(g, per));
        }
        workgroupBarrier();
        var chosen = 0u;
        var q = 0u;
        for (var g = lid; g < rp.n_group; g = g + R_WG) {
            let mine = r_gord[g];
            var rank = 0u;
            for (var h = 0u; h < rp.n_group; h = h + 1u) {
                let o = r_gord[h];
                rank = rank + select(0u, 1u, o > mine || (o == mine && h < g));
            }
            chosen = chosen | select(0u, 1u << q, rank < rp.topk_group);
            q = q + 1u;
        }
        workgroupBarrier();
        q = 0u;
        for (var g = lid; g < rp.n_group; g = g + R_WG) {
            r_gord[g] = (chosen >> q) & 1u;
            q = q + 1u;
        }
    }
    workgroupBarrier();
    for (var i = lid; i < e; i = i + R_WG) {
        var o = key_ord(r_key[i]);
        if grouped && r_gord[i / per] == 0u {
            o = 0u;
        }
        r_ord[i / 4u][i % 4u] = o;
    }
    workgroupBarrier();
    // Top-k: the eligible expert of rank r < k is selection r.
    for (var i = lid; i < e; i = i + R_WG) {
        let mine = r_ord[i / 4u][i % 4u];
        if mine != 0u {
            let rank = r_rank(mine, i, e4);
            if rank < k {
                r_sel[rank] = i;
            }
        }
    }
    workgroupBarrier();
    if rp.scoring == SCORING_SIGMOID || exact_softmax {
        // The selected experts' exact scores (without the bias), one invocation each; then each
        // of them adds the k scores sequentially (the CPU's f32 operations and order, bit for
        // bit, the same sum in every invocation) and divides its own by it exactly.
        if lid < k {
            r_sel_score[lid] = r_score(base, r_sel[lid]);
        }
        workgroupBarrier();
        if lid < k {
            var w = r_sel_score[lid];
            if rp.renormalize != 0u {
                var total = 0.0;
                for (var j = 0u; j < k; j = j + 1u) {
                    total = total + bitcast<f32>(r_sel_score[j]);
                }
                w = exact_div(w, bitcast<u32>(total));
            }
            r_ids[t * k + lid] = i32(r_sel[lid]);
            r_weights[t * k + lid] = bitcast<f32>(w) * rp.scaling;
        }
        return;
    }
    // Without a bias the keys are the logits, and the first selected one is their max.
    let mx = r_key[r_sel[0]];
    var den = 1.0;
    if rp.scoring == SCORING_SOFTMAX {
        // Softmax denominator over all experts: a fixed tree over the invocations' sums.
        var part = 0.0;
        for (var i = lid; i < e; i = i + R_WG) {
            part = part + exp(r_key[i] - mx);
        }
        r_sum[lid] = part;
        workgroupBarrier();
        for (var s = R_WG / 2u; s > 0u; s = s / 2u) {
            if lid < s {
                r_sum[lid] = r_sum[lid] + r_sum[lid + s];
            }
            workgroupBarrier();
        }
        den = r_sum[0];
    }
    if lid >= k {
        return;
    }
    // Each of the first k invocations forms the same total (same operations, same order) and
    // its own weight.
    var total = 0.0;
    if rp.scoring == SCORING_TOPK_SOFTMAX {
        // gpt-oss: softmax over the selected logits (largest first).
        for (var j = 0u; j < k; j = j + 1u) {
            total = total + exp(r_key[r_sel[j]] - mx);
        }
    } else if rp.renormalize != 0u {
        for (var j = 0u; j < k; j = j + 1u) {
            total = total + exp(r_key[r_sel[j]] - mx) / den;
        }
    }
    let v = r_key[r_sel[lid]];
    var w: f32;
    if rp.scoring == SCORING_TOPK_SOFTMAX {
        w = exp(v - mx) / total;
    } else {
        w = exp(v - mx) / den;
        if rp.renormalize != 0u {
            w = w / total;
        }
    }
    r_ids[t * k + lid] = i32(r_sel[lid]);
    r_weights[t * k + lid] = w * rp.scaling;
}
