// route.wgsl: router logits [M, E] -> top-k ids and weights, one 64-wide workgroup per token.
// Selection compares logits only (the CPU ranks softmax experts by their logits, ties to the
// lower index), so ids are exactly the CPU's: each step is a parallel arg-max whose ties go to
// the lower index (strict `>` while a thread scans upward; (value, index) order when merging).
// The weights use the GPU's exp (tolerance, not bit-exact). A correction bias (selection on
// score + bias) is not done here: the host reports it UNSUPPORTED.

struct RouteParams {
    m: u32,
    n_experts: u32,
    top_k: u32,
    scoring: u32, // 0 softmax, 1 topk_softmax, 2 sigmoid
    renormalize: u32,
    n_group: u32, // 0 = no grouping
    topk_group: u32,
    scaling: f32,
}

const R_WG: u32 = 64u;

@group(0) @binding(0) var<uniform> rp: RouteParams;
@group(0) @binding(1) var<storage, read> r_logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> r_ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> r_weights: array<f32>;

var<workgroup> r_x: array<f32, 1024>;     // the token's logits
var<workgroup> r_taken: array<u32, 1024>; // 1 = already selected
var<workgroup> r_gmax: array<f32, 32>;    // group scores
var<workgroup> r_groups: u32;             // eligible groups (bit set)
var<workgroup> r_bv: array<f32, 64>;      // arg-max candidates
var<workgroup> r_bi: array<i32, 64>;
var<workgroup> r_sel: array<u32, 32>;
var<workgroup> r_sum: array<f32, 64>;

// (va, ia) beats (vb, ib): larger value, ties to the lower index; -1 = no candidate.
fn r_better(va: f32, ia: i32, vb: f32, ib: i32) -> bool {
    if ia < 0 {
        return false;
    }
    if ib < 0 {
        return true;
    }
    return va > vb || (va == vb && ia < ib);
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
    for (var i = lid; i < e; i = i + R_WG) {
        r_x[i] = r_logits[base + i];
        r_taken[i] = 0u;
    }
    workgroupBarrier();
    // Groups (DeepSeek without a correction bias: the group score is its best logit).
    var per = e;
    if rp.n_group > 0u {
        per = e / rp.n_group;
        if lid < rp.n_group {
            var gv = r_x[lid * per];
            for (var i = 1u; i < per; i = i + 1u) {
                gv = max(gv, r_x[lid * per + i]);
            }
            r_gmax[lid] = gv;
        }
        workgroupBarrier();
        if lid == 0u {
            var chosen = 0u;
            for (var r = 0u; r < rp.topk_group; r = r + 1u) {
                var best = -1;
                var bv = 0.0;
                for (var g = 0u; g < rp.n_group; g = g + 1u) {
                    if (chosen & (1u << g)) == 0u && (best < 0 || r_gmax[g] > bv) {
                        best = i32(g);
                        bv = r_gmax[g];
                    }
                }
                chosen = chosen | (1u << u32(best));
            }
            r_groups = chosen;
        }
    } else if lid == 0u {
        r_groups = 0xFFFFFFFFu;
    }
    workgroupBarrier();
    let groups = r_groups;
    // Top-k by repeated parallel arg-max.
    for (var j = 0u; j < k; j = j + 1u) {
        var bi = -1;
        var bv = 0.0;
        for (var i = lid; i < e; i = i + R_WG) {
            if r_taken[i] == 0u && (groups & (1u << min(i / per, 31u))) != 0u {
                if bi < 0 || r_x[i] > bv {
                    bi = i32(i);
                    bv = r_x[i];
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
    // Softmax denominator over all experts (for softmax scoring).
    let mx = r_x[r_sel[0]];
    var part = 0.0;
    if rp.scoring == 0u {
        for (var i = lid; i < e; i = i + R_WG) {
            part = part + exp(r_x[i] - mx);
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
    if lid == 0u {
        var total = 0.0;
        if rp.scoring == 1u {
            // gpt-oss: softmax over the selected logits (largest first).
            for (var j = 0u; j < k; j = j + 1u) {
                total = total + exp(r_x[r_sel[j]] - mx);
            }
        } else if rp.renormalize != 0u {
            for (var j = 0u; j < k; j = j + 1u) {
                let v = r_x[r_sel[j]];
                if rp.scoring == 0u {
                    total = total + exp(v - mx) / r_sum[0];
                } else {
                    total = total + 1.0 / (1.0 + exp(-v));
                }
            }
        }
        for (var j = 0u; j < k; j = j + 1u) {
            let v = r_x[r_sel[j]];
            var w: f32;
            if rp.scoring == 1u {
                w = exp(v - mx) / total;
            } else {
                if rp.scoring == 0u {
                    w = exp(v - mx) / r_sum[0];
                } else {
                    w = 1.0 / (1.0 + exp(-v));
                }
                if rp.renormalize != 0u {
                    w = w / total;
                }
            }
            r_ids[t * k + j] = i32(r_sel[j]);
            r_weights[t * k + j] = w * rp.scaling;
        }
    }
}
