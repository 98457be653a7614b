// moe_gemv_reduce_shared.wgsl: the GEMV's lane reductions in workgroup memory (every adapter):
// pairwise in a fixed order over the 32 lanes of each group, two rows (or, for one token, all
// eight rows packed in two vec4s) per round. Needs GEMV_R = 8, GEMV_LANES = 32, 256 threads.

var<workgroup> lane_partials: array<vec4<f32>, 512>; // [16 slots][32 lanes]

// Sum the 32 lanes of the 16 slots in lane_partials[slot * 32 + lane] into
// lane_partials[slot * 32]. Call with lane_partials filled and not yet synced.
fn reduce_lane_partials(lid: u32) {
    let slot = lid / 16u;
    let q = lid % 16u;
    for (var s = 16u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if q < s {
            lane_partials[slot * 32u + q] = lane_partials[slot * 32u + q]
                + lane_partials[slot * 32u + q + s];
        }
    }
    workgroupBarrier();
}

fn gemv_reduce1(lid: u32, a: array<vec4<f32>, 2>) {
    let g = lid / 32u;
    let lane = lid % 32u;
    lane_partials[(g * 2u) * 32u + lane] = a[0];
    lane_partials[(g * 2u + 1u) * 32u + lane] = a[1];
    reduce_lane_partials(lid);
    if lid < 64u {
        // group rr, slot q, component c: group row 4q + c
        let rr = lid / 8u;
        let q = (lid / 4u) % 2u;
        let c = lid % 4u;
        row_sums[rr * 8u + 4u * q + c] = vec4<f32>(lane_partials[(rr * 2u + q) * 32u][c], 0.0,
                                                   0.0, 0.0);
    }
    workgroupBarrier();
}

fn gemv_reduce4(lid: u32, a: array<vec4<f32>, 8>) {
    let g = lid / 32u;
    let lane = lid % 32u;
    for (var round = 0u; round < 4u; round = round + 1u) {
        lane_partials[(g * 2u) * 32u + lane] = a[2u * round];
        lane_partials[(g * 2u + 1u) * 32u + lane] = a[2u * round + 1u];
        reduce_lane_partials(lid);
        if lid < 16u {
            let rr = lid / 2u;
            let q = lid % 2u;
            row_sums[rr * 8u + 2u * round + q] = lane_partials[(rr * 2u + q) * 32u];
        }
        workgroupBarrier();
    }
}
