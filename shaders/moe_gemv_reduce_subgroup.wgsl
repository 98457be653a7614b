// moe_gemv_reduce_subgroup.wgsl: the GEMV's lane reductions with subgroup operations (adapters
// with SUBGROUP whose subgroups are exactly GEMV_LANES / GEMV_SPLIT consecutive invocations: the
// host runs `subgroup_check` first and otherwise composes moe_gemv_reduce_shared.wgsl). No
// barriers but the ones that publish row_sums (one, or two with GEMV_SPLIT > 1).

// GEMV_SPLIT subgroups per lane group (GEMV_LANES = GEMV_SPLIT x the subgroup size, set by the
// host): each subgroup's sums go to split_sums, then one invocation per (group, row) adds the
// group's subgroups in subgroup order (a fixed order: results stay deterministic).
override GEMV_SPLIT: u32 = 1u;
var<workgroup> split_sums: array<vec4<f32>, 256>; // [group (8)][subgroup (<= 4)][row (8)]

// Publish the 8 rows' subgroup sums s0..s7 of lane group g into row_sums.
fn gemv_publish_rows(lid: u32, s0: vec4<f32>, s1: vec4<f32>, s2: vec4<f32>, s3: vec4<f32>,
                     s4: vec4<f32>, s5: vec4<f32>, s6: vec4<f32>, s7: vec4<f32>) {
    let g = lid / GEMV_LANES;
    let lane = lid % GEMV_LANES;
    let sg = GEMV_LANES / GEMV_SPLIT;
    if GEMV_SPLIT == 1u {
        if lane == 0u {
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
        return;
    }
    if lane % sg == 0u {
        let b = (g * GEMV_SPLIT + lane / sg) * 8u;
        split_sums[b] = s0;
        split_sums[b + 1u] = s1;
        split_sums[b + 2u] = s2;
        split_sums[b + 3u] = s3;
        split_sums[b + 4u] = s4;
        split_sums[b + 5u] = s5;
        split_sums[b + 6u] = s6;
        split_sums[b + 7u] = s7;
    }
    workgroupBarrier();
    if lid < 64u {
        let gg = lid / 8u;
        let i = lid % 8u;
        var t = split_sums[gg * GEMV_SPLIT * 8u + i];
        for (var j = 1u; j < GEMV_SPLIT; j = j + 1u) {
            t = t + split_sums[(gg * GEMV_SPLIT + j) * 8u + i];
        }
        row_sums[lid] = t;
    }
    workgroupBarrier();
}

// One token: a[q][c] is the lane sum of group row 4q + c.
fn gemv_reduce1(lid: u32, a: array<vec4<f32>, 2>) {
    let s0 = subgroupAdd(a[0]);
    let s1 = subgroupAdd(a[1]);
    let z = 0.0;
    gemv_publish_rows(lid, vec4<f32>(s0.x, z, z, z), vec4<f32>(s0.y, z, z, z),
                      vec4<f32>(s0.z, z, z, z), vec4<f32>(s0.w, z, z, z),
                      vec4<f32>(s1.x, z, z, z), vec4<f32>(s1.y, z, z, z),
                      vec4<f32>(s1.z, z, z, z), vec4<f32>(s1.w, z, z, z));
}

// Up to 4 tokens: a[i] is the lane sum of group row i, a vec4 over the tokens.
fn gemv_reduce4(lid: u32, a: array<vec4<f32>, 8>) {
    gemv_publish_rows(lid, subgroupAdd(a[0]), subgroupAdd(a[1]), subgroupAdd(a[2]),
                      subgroupAdd(a[3]), subgroupAdd(a[4]), subgroupAdd(a[5]),
                      subgroupAdd(a[6]), subgroupAdd(a[7]));
}

// Start-up check (one workgroup of GEMV_THREADS): out_bits[lid] = 1 when this invocation's
// subgroup is the GEMV_LANES / GEMV_SPLIT consecutive invocations the reductions above assume.
@compute @workgroup_size(GEMV_THREADS)
fn subgroup_check(@builtin(local_invocation_index) lid: u32,
                  @builtin(subgroup_invocation_id) sli: u32,
                  @builtin(subgroup_size) size: u32) {
    let n = GEMV_LANES / GEMV_SPLIT;
    let g = lid / n;
    let want = g * n * n + n * (n - 1u) / 2u;
    let sum = subgroupAdd(lid);
    out_bits[lid] = select(0u, 1u, size == n && sli == lid % n && sum == want);
}
