// moe_gemv_reduce_subgroup.wgsl: the GEMV's lane reductions with subgroup operations (adapters
// with SUBGROUP whose subgroups are exactly GEMV_LANES consecutive invocations: the host runs
// `subgroup_check` first and otherwise composes moe_gemv_reduce_shared.wgsl). No barriers but
// the one that publishes row_sums.

// One token: a[q][c] is the lane sum of group row 4q + c.
fn gemv_reduce1(lid: u32, a: array<vec4<f32>, 2>) {
    let g = lid / GEMV_LANES;
    let s0 = subgroupAdd(a[0]);
    let s1 = subgroupAdd(a[1]);
    if lid % GEMV_LANES == 0u {
        let r = g * 8u;
        row_sums[r] = vec4<f32>(s0.x, 0.0, 0.0, 0.0);
        row_sums[r + 1u] = vec4<f32>(s0.y, 0.0, 0.0, 0.0);
        row_sums[r + 2u] = vec4<f32>(s0.z, 0.0, 0.0, 0.0);
        row_sums[r + 3u] = vec4<f32>(s0.w, 0.0, 0.0, 0.0);
        row_sums[r + 4u] = vec4<f32>(s1.x, 0.0, 0.0, 0.0);
        row_sums[r + 5u] = vec4<f32>(s1.y, 0.0, 0.0, 0.0);
        row_sums[r + 6u] = vec4<f32>(s1.z, 0.0, 0.0, 0.0);
        row_sums[r + 7u] = vec4<f32>(s1.w, 0.0, 0.0, 0.0);
    }
    workgroupBarrier();
}

// Up to 4 tokens: a[i] is the lane sum of group row i, a vec4 over the tokens.
fn gemv_reduce4(lid: u32, a: array<vec4<f32>, 8>) {
    let g = lid / GEMV_LANES;
    let s0 = subgroupAdd(a[0]);
    let s1 = subgroupAdd(a[1]);
    let s2 = subgroupAdd(a[2]);
    let s3 = subgroupAdd(a[3]);
    let s4 = subgroupAdd(a[4]);
    let s5 = subgroupAdd(a[5]);
    let s6 = subgroupAdd(a[6]);
    let s7 = subgroupAdd(a[7]);
    if lid % GEMV_LANES == 0u {
        let r = g * 8u;
        row_sums[r] = s0;
        row_sums[r + 1u] = s1;
        row_sums[r + 2u] = s2;
        row_sums[r + 3u] = s3;
        row_sums[r + 4u] = s4;
        row_sums[r + 5u] = s5;
        row_sums[r + 6u] = s6;
        row_sums[r + 7u] = s7;
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
