// moe_lists.wgsl: the row lists of the MoE passes (moe_common.wgsl has the overview).
// One workgroup: count the pairs per local expert (pairs routed to experts of other ranks, via
// expert_map, get no row), prefix-sum the counts into each expert's first row (a parallel scan),
// cut each expert's rows into tiles of TILE_M, then place every pair in its expert's rows.

override TILE_M: u32 = 32u; // rows per tile: GEMM_TILE_ROWS or GEMV_TILE_ROWS

var<workgroup> expert_count: array<atomic<u32>, 1024>;
var<workgroup> expert_offset: array<u32, 1024>;
var<workgroup> scan_rows: array<u32, 256>;  // per thread: rows of its 4 experts, then scanned
var<workgroup> scan_tiles: array<u32, 256>; // per thread: tiles of its 4 experts, then scanned

// The local expert of pair a (-1: not on this rank).
fn local_expert(a: u32) -> i32 {
    let id = topk_ids[a];
    if params.has_map != 0u {
        return expert_map[id];
    }
    return id;
}

// One workgroup. Row order inside an expert's list depends on atomics, but no result does:
// every row is computed independently and the combine reads rows through row_of_pair.
@compute @workgroup_size(256)
fn lists(@builtin(local_invocation_index) lid: u32) {
    let el = params.e_local;
    let na = params.m * params.top_k;
    for (var e = lid; e < el; e = e + 256u) {
        atomicStore(&expert_count[e], 0u);
    }
    workgroupBarrier();
    for (var a = lid; a < na; a = a + 256u) {
        let l = local_expert(a);
        if l >= 0 {
            atomicAdd(&expert_count[u32(l)], 1u);
        }
    }
    workgroupBarrier();
    // Each thread owns 4 consecutive experts (256 x 4 = the 1024 this pass holds): their row and
    // tile counts, then one exclusive scan over the threads (Hillis-Steele in workgroup memory,
    // 8 steps) gives each expert's first row and first tile; tiles stay in expert order.
    let e0 = lid * 4u;
    var rows_here = 0u;
    var tiles_here = 0u;
    for (var e = e0; e < min(e0 + 4u, el); e = e + 1u) {
        let c = atomicLoad(&expert_count[e]);
        rows_here = rows_here + c;
        tiles_here = tiles_here + (c + TILE_M - 1u) / TILE_M;
    }
    scan_rows[lid] = rows_here;
    scan_tiles[lid] = tiles_here;
    for (var s = 1u; s < 256u; s = s << 1u) {
        workgroupBarrier();
        var r = 0u;
        var t = 0u;
        if lid >= s {
            r = scan_rows[lid - s];
            t = scan_tiles[lid - s];
        }
        workgroupBarrier();
        scan_rows[lid] = scan_rows[lid] + r;
        scan_tiles[lid] = scan_tiles[lid] + t;
    }
    workgroupBarrier();
    var acc = scan_rows[lid] - rows_here; // exclusive
    var nt = scan_tiles[lid] - tiles_here;
    for (var e = e0; e < min(e0 + 4u, el); e = e + 1u) {
        let c = atomicLoad(&expert_count[e]);
        expert_offset[e] = acc;
        for (var s = 0u; s < c; s = s + TILE_M) {
            tiles[1u + 3u * nt] = e;
            tiles[2u + 3u * nt] = acc + s;
            tiles[3u + 3u * nt] = acc + min(s + TILE_M, c);
            nt = nt + 1u;
        }
        acc = acc + c;
    }
    if lid == 255u {
        tiles[0] = scan_tiles[255];
    }
    workgroupBarrier();
    for (var e = e0; e < min(e0 + 4u, el); e = e + 1u) {
        atomicStore(&expert_count[e], 0u);
    }
    workgroupBarrier();
    for (var a = lid; a < na; a = a + 256u) {
        let l = local_expert(a);
        if l >= 0 {
            let p = expert_offset[u32(l)] + atomicAdd(&expert_count[u32(l)], 1u);
            pair_of_row[p] = a;
            row_of_pair[a] = i32(p);
        } else {
            row_of_pair[a] = -1;
        }
    }
}
