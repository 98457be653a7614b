// moe_combine.wgsl: the MoE output (moe_common.wgsl has the overview): per (token, h), the fp32
// sum of gemm2's rows over the k slots in slot order (deterministic: no float atomics; remote
// pairs, row -1, add nothing), rounded to bf16 with ROUND_BF16.

// One invocation per output element; 2-D grid of 256-wide workgroups.
@compute @workgroup_size(256)
fn combine(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = (wid.y * nwg.x + wid.x) * 256u + lid;
    let h = params.hidden;
    if idx >= params.m * h {
        return;
    }
    let t = idx / h;
    let n = idx % h;
    var acc = 0.0;
    for (var j = 0u; j < params.top_k; j = j + 1u) {
        let p = row_of_pair[t * params.top_k + j];
        if p >= 0 {
            acc = acc + expert_out[u32(p) * h + n];
        }
    }
    out_bits[idx] = bitcast<u32>(bf16_point(acc));
}
