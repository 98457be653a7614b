// bandwidth_probe.wgsl: the diagnostic kernels of WgpuBackend::bandwidth_probe (an ignored test):
// a streaming read (vec4<u32> loads, grid-stride), then the gemv's read shape without and with
// the FP4 table decode; and `copy`, the device copy that WgpuBackend::copy_bandwidth times for
// `mxmoe bench`'s floor. Self-contained (no generated preamble). The reads' results are consumed
// only through an impossible condition, so the compiler cannot drop the loads.

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<storage, read_write> copy_dst: array<vec4<u32>>;

// Device copy of the whole buffer (16-byte loads and stores, grid-stride).
@compute @workgroup_size(256)
fn copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = min(arrayLength(&src), arrayLength(&copy_dst));
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < n; i = i + stride) { copy_dst[i] = src[i]; }
}

// Streaming read of the whole buffer.
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = arrayLength(&src);
    let stride = nwg.x * 256u;
    var acc = vec4<u32>(0u);
    for (var i = gid.x; i < n; i = i + stride) { acc = acc ^ src[i]; }
    let s = acc.x ^ acc.y ^ acc.z ^ acc.w;
    if s == 0x9E3779B9u { dst[gid.x % 64u] = s; }
}

// The gemv's read shape: 64 rows of 90 16-byte blocks (K = 2880 FP4) per workgroup,
// thread (r = lid / 32, lane) reads rows r + 8i, blocks lane + 32j.
var<workgroup> lut: array<vec2<f32>, 256>;

@compute @workgroup_size(256)
fn rows(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let nrows = arrayLength(&src) / 90u;
    let r = lid / 32u;
    let lane = lid % 32u;
    var acc = vec4<u32>(0u);
    for (var b = lane; b < 90u; b = b + 32u) {
        for (var i = 0u; i < 8u; i = i + 1u) {
            let row = min(wid.x * 64u + r + 8u * i, nrows - 1u);
            acc = acc ^ src[row * 90u + b];
        }
    }
    let s = acc.x ^ acc.y ^ acc.z ^ acc.w;
    if s == 0x9E3779B9u { dst[lid % 64u] = s; }
}

// The same plus the FP4 decode (byte table in workgroup memory) and the FMAs.
fn dec(w: u32, x: f32) -> f32 {
    let v = vec4<f32>(lut[w & 0xFFu], lut[(w >> 8u) & 0xFFu]) * x
        + vec4<f32>(lut[(w >> 16u) & 0xFFu], lut[w >> 24u]);
    return v.x + v.y + v.z + v.w;
}

@compute @workgroup_size(256)
fn rows_lut(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    lut[lid] = vec2<f32>(f32(lid & 15u), f32(lid >> 4u));
    workgroupBarrier();
    let nrows = arrayLength(&src) / 90u;
    let r = lid / 32u;
    let lane = lid % 32u;
    var acc = 0.0;
    for (var b = lane; b < 90u; b = b + 32u) {
        let x = f32(b) * 0.25;
        for (var i = 0u; i < 8u; i = i + 1u) {
            let row = min(wid.x * 64u + r + 8u * i, nrows - 1u);
            let q = src[row * 90u + b];
            acc = acc + dec(q.x, x) + dec(q.y, x) + dec(q.z, x) + dec(q.w, x);
        }
    }
    if acc == 1.2345 { dst[lid % 64u] = 1u; }
}
