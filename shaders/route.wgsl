// route.wgsl: router logits [M, E] -> top-k ids and weights, one invocation per token.
// Selection compares logits only (the CPU ranks softmax experts by their logits, ties to the
// lower index: strict `>` while scanning upward), so ids are exactly the CPU's. The weights use
// the GPU's exp (tolerance, not bit-exact). A correction bias (selection on score + bias) is not
// done here: the host reports it UNSUPPORTED.

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

const R_MAX_E: u32 = 1024u;
const R_MAX_K: u32 = 32u;

@group(0) @binding(0) var<uniform> rp: RouteParams;
@group(0) @binding(1) var<storage, read> r_logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> r_ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> r_weights: array<f32>;

fn r_sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

@compute @workgroup_size(64)
fn route(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.y * nwg.x * 64u + gid.x;
    if t >= rp.m {
        return;
    }
    let e = rp.n_experts;
    let k = rp.top_k;
    let base = t * e;
    var chosen: array<u32, 32>; // bit set over experts (E <= 1024)
    var sel: array<u32, 32>;
    var w: array<f32, 32>;
    var groups = 0xFFFFFFFFu; // eligible groups (bit set, n_group <= 32)
    var per = e;
    if rp.n_group > 0u {
        per = e / rp.n_group;
        // Group score: the best logit of the group (no correction bias). Top topk_group groups,
        // ties to the lower group index.
        var gchosen = 0u;
        for (var r = 0u; r < rp.topk_group; r = r + 1u) {
            var best = -1;
            var best_v = 0.0;
            for (var g = 0u; g < rp.n_group; g = g + 1u) {
                if (gchosen & (1u << g)) != 0u {
                    continue;
                }
                var gv = r_logits[base + g * per];
                for (var i = 1u; i < per; i = i + 1u) {
                    gv = max(gv, r_logits[base + g * per + i]);
                }
                if best < 0 || gv > best_v {
                    best = i32(g);
                    best_v = gv;
                }
            }
            gchosen = gchosen | (1u << u32(best));
        }
        groups = gchosen;
    }
    for (var j = 0u; j < k; j = j + 1u) {
        var best = -1;
        var best_v = 0.0;
        for (var i = 0u; i < e; i = i + 1u) {
            if (chosen[i / 32u] & (1u << (i & 31u))) != 0u {
                continue;
            }
            if (groups & (1u << min(i / per, 31u))) == 0u {
                continue;
            }
            let v = r_logits[base + i];
            if best < 0 || v > best_v {
                best = i32(i);
                best_v = v;
            }
        }
        let b = u32(best);
        chosen[b / 32u] = chosen[b / 32u] | (1u << (b & 31u));
        sel[j] = b;
        w[j] = best_v;
    }
    if rp.scoring == 1u {
        // gpt-oss: softmax over the selected logits (w holds them, largest first).
        let mx = w[0];
        var s = 0.0;
        for (var j = 0u; j < k; j = j + 1u) {
            w[j] = exp(w[j] - mx);
            s = s + w[j];
        }
        for (var j = 0u; j < k; j = j + 1u) {
            w[j] = w[j] / s;
        }
    } else {
        if rp.scoring == 0u {
            var mx = r_logits[base];
            for (var i = 1u; i < e; i = i + 1u) {
                mx = max(mx, r_logits[base + i]);
            }
            var s = 0.0;
            for (var i = 0u; i < e; i = i + 1u) {
                s = s + exp(r_logits[base + i] - mx);
            }
            for (var j = 0u; j < k; j = j + 1u) {
                w[j] = exp(w[j] - mx) / s;
            }
        } else {
            for (var j = 0u; j < k; j = j + 1u) {
                w[j] = r_sigmoid(w[j]);
            }
        }
        if rp.renormalize != 0u {
            var s = 0.0;
            for (var j = 0u; j < k; j = j + 1u) {
                s = s + w[j];
            }
            for (var j = 0u; j < k; j = j + 1u) {
                w[j] = w[j] / s;
            }
        }
    }
    for (var j = 0u; j < k; j = j + 1u) {
        r_ids[t * k + j] = i32(sel[j]);
        r_weights[t * k + j] = w[j] * rp.scaling;
    }
}
