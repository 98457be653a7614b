// route.wgsl: router logits [M, E] (+ an optional e_score_correction_bias [E]) -> top-k ids and
// weights, one 64-wide workgroup per token. The CPU twin is src/moe/route.rs.
//
// Selection keys are exactly the CPU's, so the ids are too: the logits themselves, or with a
// correction bias (DeepSeek-V3/R1) `score + bias`, the score being exact_sigmoid, or for softmax
// routers e^(x - max) by exact_exp_neg over its sequential sum by exact_div, and the add add_ftz
// (exact_math.wgsl: integer arithmetic, the same bits as the CPU). Groups (n_group / topk_group):
// a group's score is its best key, or with a correction bias the sum of its two best keys (one
// f32 add, add_ftz). Each top-k step is a parallel arg-max whose ties go to the lower index
// (strict `>` while a thread scans upward; (value, index) order when merging).
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

const R_WG: u32 = 64u;

@group(0) @binding(0) var<uniform> rp: RouteParams;
@group(0) @binding(1) var<storage, read> r_logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> r_ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> r_weights: array<f32>;
@group(0) @binding(4) var<storage, read> r_bias: array<u32>; // f32 bits; unused without a bias

var<workgroup> r_key: array<f32, 1024>;   // the token's selection keys
var<workgroup> r_taken: array<u32, 1024>; // 1 = already selected
var<workgroup> r_gscore: array<f32, 1024>; // group scores (a group holds at least one expert)
var<workgroup> r_gbits: array<u32, 32>;     // eligible groups (bit g % 32 of word g / 32)
var<workgroup> r_bv: array<f32, 64>;      // arg-max candidates
var<workgroup> r_bi: array<i32, 64>;
var<workgroup> r_sel: array<u32, 32>;
var<workgroup> r_sel_score: array<u32, 32>; // exact scores of the selected experts, f32 bits
var<workgroup> r_sel_total: u32;            // their sum (renormalization), f32 bits
var<workgroup> r_sum: array<f32, 64>;
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

// (va, ia) beats (vb, ib): larger value, ties to the lower index; -1 = no candidate.
fn r_better(va: f32, ia: i32, vb: f32, ib: i32) -> bool {
    if ia < 0 {
        return false;
    }
    if ib < 0 {
        return true;
    }
    return key_gt(va, vb) || (key_ord(va) == key_ord(vb) && ia < ib);
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

@compute @workgroup_size(64)
fn route(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = wid.y * nwg.x + wid.x;
    if t >= rp.m {
        return; // uniform: the whole workgroup is one token
    }
    let e = rp.n_experts;
    let k = rp.top_k;
    let base = t * e;
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
        r_taken[i] = 0u;
    }
    workgroupBarrier();
    var per = e;
    if rp.n_group > 0u {
        per = e / rp.n_group;
        for (var g = lid; g < rp.n_group; g = g + R_WG) {
            r_gscore[g] = r_group_score(g, per);
        }
        if lid < 32u {
            r_gbits[lid] = 0u;
        }
        workgroupBarrier();
        if lid == 0u {
            // The best topk_group groups, ties to the lower group index.
            for (var r = 0u; r < rp.topk_group; r = r + 1u) {
                var best = -1;
                var bv = 0.0;
                for (var g = 0u; g < rp.n_group; g = g + 1u) {
                    let free = (r_gbits[g / 32u] & (1u << (g % 32u))) == 0u;
                    if free && (best < 0 || key_gt(r_gscore[g], bv)) {
                        best = i32(g);
                        bv = r_gscore[g];
                    }
                }
                let b = u32(best);
                r_gbits[b / 32u] = r_gbits[b / 32u] | (1u << (b % 32u));
            }
        }
    } else if lid < 32u {
        r_gbits[lid] = 0xFFFFFFFFu;
    }
    workgroupBarrier();
    // Top-k by repeated parallel arg-max.
    for (var j = 0u; j < k; j = j + 1u) {
        var bi = -1;
        var bv = 0.0;
        for (var i = lid; i < e; i = i + R_WG) {
            let g = i / per;
            if r_taken[i] == 0u && (r_gbits[g / 32u] & (1u << (g % 32u))) != 0u {
                if bi < 0 || key_gt(r_key[i], bv) {
                    bi = i32(i);
                    bv = r_key[i];
                }
            }
        }
        r_bv[lid] = bv;
        r_bi[lid] = bi;
        workgroupBarrier();
        for (var s = R_WG / 2u; s > 0u; s = s / 2u) {
            if lid < s && r_better(r_bv[lid + s], r_bi[lid + s], r_bv[lid], r_bi[lid]) {
                r_bv[lid] = r_bv[lid + s];
                r_bi[lid] = r_bi[lid + s];
            }
            workgroupBarrier();
        }
        if lid == 0u {
            let b = u32(r_bi[0]);
            r_sel[j] = b;
            r_taken[b] = 1u;
        }
        workgroupBarrier();
    }
    // Softmax denominator over all experts (softmax scoring without a bias: the keys are the
    // logits, and the first selected one is their max).
    let mx = r_logits[base + r_sel[0]];
    var part = 0.0;
    if rp.scoring == SCORING_SOFTMAX && !exact_softmax {
        for (var i = lid; i < e; i = i + R_WG) {
            part = part + exp(r_logits[base + i] - mx);
        }
    }
    r_sum[lid] = part;
    workgroupBarrier();
    for (var s = R_WG / 2u; s > 0u; s = s / 2u) {
        if lid < s {
            r_sum[lid] = r_sum[lid] + r_sum[lid + s];
        }
        workgroupBarrier();
    }
    if rp.scoring == SCORING_SIGMOID || exact_softmax {
        // The selected experts' exact scores (without the bias), one thread each; their
        // sequential sum on one thread (the CPU's f32 operations and order, bit for bit); then
        // the renormalizing exact divisions, one thread each.
        if lid < k {
            r_sel_score[lid] = r_score(base, r_sel[lid]);
        }
        workgroupBarrier();
        if lid == 0u {
            var total = 0.0;
            if rp.renormalize != 0u {
                for (var j = 0u; j < k; j = j + 1u) {
                    total = total + bitcast<f32>(r_sel_score[j]);
                }
            }
            r_sel_total = bitcast<u32>(total);
        }
        workgroupBarrier();
        if lid < k {
            var w = r_sel_score[lid];
            if rp.renormalize != 0u {
                w = exact_div(w, r_sel_total);
            }
            r_ids[t * k + lid] = i32(r_sel[lid]);
            r_weights[t * k + lid] = bitcast<f32>(w) * rp.scaling;
        }
        return;
    }
    if lid != 0u {
        return;
    }
    var total = 0.0;
    if rp.scoring == SCORING_TOPK_SOFTMAX {
        // gpt-oss: softmax over the selected logits (largest first).
        for (var j = 0u; j < k; j = j + 1u) {
            total = total + exp(r_logits[base + r_sel[j]] - mx);
        }
    } else if rp.renormalize != 0u {
        for (var j = 0u; j < k; j = j + 1u) {
            total = total + exp(r_logits[base + r_sel[j]] - mx) / r_sum[0];
        }
    }
    for (var j = 0u; j < k; j = j + 1u) {
        let v = r_logits[base + r_sel[j]];
        var w: f32;
        if rp.scoring == SCORING_TOPK_SOFTMAX {
            w = exp(v - mx) / total;
        } else {
            w = exp(v - mx) / r_sum[0];
            if rp.renormalize != 0u {
                w = w / total;
            }
        }
        r_ids[t * k + j] = i32(r_sel[j]);
        r_weights[t * k + j] = w * rp.scaling;
    }
}
