// moe_gemv_reduce_subgroup.wgsl: the GEMV's lane reductions with subgroup operations (adapters
// with SUBGROUP whose subgroups are exactly GEMV_LANES consecutive invocations: the host runs
// `subgroup_check` first and otherwise composes moe_gemv_reduce_shared.wgsl). No barriers but
// the one that publishes row_sums.

// One token: a[q][c] is the lane sum of group row 4q + c.
fn gemv_reduce1(lid: u32, a: array<vec4<f32>, 2>) {
    let g = lid / GEMV_LANES;
    let lane = lid % GEMV_LANES;
    for (var q = 0u; q < 2u; q = q + 1u) {
        if 4u * q < GEMV_R {
            let s = subgroupAdd(a[q]);
            if lane == 0u {
                for (var c = 0u; c < min(4u, GEMV_R - 4u * q); c = c + 1u) {
                    row_sums[g * GEMV_R + 4u * q + c] = vec4<f32>(s[c], 0.0, 0.0, 0.0);
                }
            }
        }
    }
    workgroupBarrier();
}

// Up to 4 tokens: a[i] is the lane sum of group row i, a vec4 over the tokens.
fn gemv_reduce4(lid: u32, a: array<vec4<f32>, 8>) {
    let g = lid / GEMV_LANES;
    let lane = lid % GEMV_LANES;
    for (var i = 0u; i < GEMV_R; i = i + 1u) {
        let s = subgroupAdd(a[i]);
        if lane == 0u {
            row_sums[g * GEMV_R + i] = s;
        }
    }
    workgroupBarrier();
}

// Start-up check (one workgroup of GEMV_THREADS): out_bits[lid] = 1 when this invocation's
// subgroup is the GEMV_LANES consecutive invocations the reductions above assume.
@compute @workgroup_size(GEMV_THREADS)
fn subgroup_check(@builtin(local_invocation_index) lid: u32,
                  @builtin(subgroup_invocation_id) sli: u32,
                  @builtin(subgroup_size) size: u32) {
    let g = lid / GEMV_LANES;
    let want = g * GEMV_LANES * GEMV_LANES + GEMV_LANES * (GEMV_LANES - 1u) / 2u;
    let sum = subgroupAdd(lid);
    out_bits[lid] = select(0u, 1u, size == GEMV_LANES && sli == lid % GEMV_LANES && sum == want);
}
